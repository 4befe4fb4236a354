"""What a run prints and writes: one run id per run in metrics.jsonl, no Hugging Face progress bars, a
progress bar with reward, loss and KL, and clear errors for a missing model folder."""

from __future__ import annotations

import json

import pytest
from datasets import Dataset

from learners import MAGRPO, MAGRPOConfig
from learners.loop.logger import RunLogger

data = Dataset.from_list([{"prompt": f"Question {i}:"} for i in range(2)])
FAST = dict(num_train_epochs=1, num_generations=2, max_new_tokens=4, temperature=1.0, top_p=1.0, top_k=None,
            eval_interval=0, verbose=False)


def spaces(a, b):
    return [sum(ch.isspace() for ch in x + y) / max(len(x + y), 1) for x, y in zip(a, b)]


def test_two_runs_into_one_output_dir_stay_apart_by_run_id(tiny_dir, tmp_path):
    """metrics.jsonl used to append silently: after two runs nothing told their rows apart."""
    runs = []
    for _ in range(2):
        learner = MAGRPO(agent_model=tiny_dir, num_agents=2, reward_func=spaces, train_dataset=data,
                         args=MAGRPOConfig(output_dir=str(tmp_path), **FAST))
        learner.learn()
        runs.append(learner.run_id)
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert runs[0] != runs[1] and len(rows) == 2
    assert [r["run_id"] for r in rows] == runs  # one training row per run here, each with its run's id


def test_loading_and_saving_show_no_hugging_face_progress_bars(tiny_dir, tmp_path, capfd):
    learner = MAGRPO(agent_model=tiny_dir, num_agents=2, reward_func=spaces, train_dataset=data,
                     args=MAGRPOConfig(**FAST))
    learner.save_model(str(tmp_path / "out"))
    err = capfd.readouterr().err
    assert "Loading weights" not in err and "Writing model shards" not in err


def test_the_progress_bar_shows_reward_loss_and_kl():
    """kl is the reference KL of the loss (`train/agent_i/kl`), not the policy step's approx_kl (issue 40)."""
    logger = RunLogger(None, None, {}, verbose=True)
    logger.start(total=1)
    logger.log({"train/reward_mean": 0.5, "train/agent_0/loss": 0.2, "train/agent_1/loss": 0.4,
                "train/agent_0/approx_kl": 0.0, "train/agent_1/approx_kl": 0.02,
                "train/agent_0/kl": 0.0, "train/agent_1/kl": 0.02}, step=1, advance=1)
    shown = logger._bar.postfix
    logger.close()
    assert shown == "reward=0.500, loss=0.3000, kl=0.0100"


@pytest.mark.parametrize("source", ["outputs/quickstart/agents/agent_9", "./missing", "/no/such/model"])
def test_a_missing_model_folder_says_so_before_anything_loads(source):
    """It used to surface Hugging Face's "Repo id must be in the form 'repo_name' or 'namespace/repo_name'"."""
    with pytest.raises(ValueError, match=f"no model at '{source}': it is not a folder"):
        MAGRPO(agent_model=source, num_agents=2, reward_func=spaces, train_dataset=data, args=MAGRPOConfig(**FAST))


def test_a_reward_without_spread_is_reported_and_warned_about(tiny_dir):
    """A sparse reward that nothing reaches gave all-zero advantages for a whole run, and nothing said so."""
    learner = MAGRPO(agent_model=tiny_dir, num_agents=2, reward_func=lambda a, b: [0.0] * len(a),
                     train_dataset=Dataset.from_list([{"prompt": f"Q{i}"} for i in range(10)]),
                     args=MAGRPOConfig(**{**FAST, "num_train_epochs": 1}))
    seen = []
    learner.callbacks.append(type("Seen", (), {"on_step_end": lambda s, t, m: seen.append(m)})())
    with pytest.warns(UserWarning, match="for 5 rollouts in a row every group's samples got the same return"):
        learner.learn()
    assert len(seen) == 5 and all(m["train/frac_reward_zero_std"] == 1.0 for m in seen)


def test_learn_returns_training_and_evaluation_metrics(tiny_dir):
    """learn() used to return only the evaluation's metrics when one ran."""
    learner = MAGRPO(agent_model=tiny_dir, num_agents=2, reward_func=spaces, train_dataset=data,
                     args=MAGRPOConfig(**{**FAST, "eval_interval": 1, "eval_num_samples": 2}))
    summary = learner.learn()
    assert {"train/reward_mean", "train/agent_0/loss", "eval/reward_mean"} <= set(summary)


def test_optimizer_steps_and_completions_are_counted_apart_and_samples_are_logged(tiny_dir, tmp_path):
    """step counted samples (joint actions) only; optimizer steps and sampled completions are now their own
    metrics, and sampled answers can be read in completions.jsonl."""
    learner = MAGRPO(agent_model=tiny_dir, num_agents=2, reward_func=spaces, train_dataset=data,
                     args=MAGRPOConfig(**{**FAST, "num_train_epochs": 2}, rollout_buffer_size=2, train_batch_size=1,
                                       output_dir=str(tmp_path), log_completions_steps=1))
    summary = learner.learn()
    # 2 epochs x 1 rollout (2 prompts x 2 samples); each rollout: 2 groups in minibatches of 1 -> 2 steps.
    assert summary["train/optimizer_steps"] == 4 and summary["train/completions"] == 8
    rows = [json.loads(line) for line in (tmp_path / "completions.jsonl").read_text().splitlines()]
    assert len(rows) == 8 and rows[0]["run_id"] == learner.run_id  # up to 4 joint answers per logged rollout
    assert len(rows[0]["completions"]) == 2 and len(rows[0]["rewards"]) == 2 and "Question" in rows[0]["state"]


def test_a_config_turn_count_an_env_ignores_is_warned_about(tiny_dir):
    """num_turns in the config was silently ignored by a registered env with its own turn count."""
    with pytest.warns(UserWarning, match="num_turns=3 in the config does not apply to this env, which plays 4"):
        MAGRPO(env="coop/GuessNumber-v1", agent_model=tiny_dir, num_agents=2,
               args=MAGRPOConfig(**FAST, num_turns=3))


def test_report_to_tensorboard_writes_every_logged_metric(tiny_dir, tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    learner = MAGRPO(agent_model=tiny_dir, num_agents=2, reward_func=spaces, train_dataset=data,
                     args=MAGRPOConfig(**FAST, output_dir=str(tmp_path), report_to="tensorboard"))
    learner.learn()
    events = EventAccumulator(str(tmp_path / "tensorboard" / learner.run_id))
    events.Reload()
    assert {"train/reward_mean", "train/agent_0/loss"} <= set(events.Tags()["scalars"])
    with pytest.raises(ValueError, match="report_to='tensorboard' writes into output_dir"):
        MAGRPOConfig(report_to="tensorboard")
    with pytest.raises(ValueError, match=r"report_to \['mlflow'\] is not supported"):
        MAGRPOConfig(report_to=["mlflow"], output_dir=str(tmp_path))


def test_evaluation_shows_a_progress_bar(tiny_dir, capfd):
    """evaluate() used to run in silence (about 1.5 minutes with SmolLM2)."""
    learner = MAGRPO(agent_model=tiny_dir, num_agents=2, reward_func=spaces, train_dataset=data,
                     args=MAGRPOConfig(**{**FAST, "verbose": True, "eval_num_samples": 2}))
    capfd.readouterr()
    learner.evaluate()
    assert "eval" in capfd.readouterr().err
