"""docs/metrics.md lists every metric name the learners log, no more: one short run of MAGRPO, IAC (a critic
model per agent, and value heads on the actors), MAAC and MARLHF on a tiny model each logs exactly the names
the page lists for that learner under the conditions the run meets.

The page's tables are parsed here: a row is `| `name` | learners | when | meaning | unit |`, with `{i}`
(trained agent), `{c}` (critic), `{t}` (turn) and `{key}` (an `eval_aggregator` key) in per-agent names.
Names logged only with the vLLM backend cannot be produced here; their text must still be in the code.
"""

from __future__ import annotations

import json
import pathlib
import re
from typing import Any

import pytest

from learners import IAC, MAAC, MAGRPO, MARLHF, IACConfig, MAACConfig, MAGRPOConfig, MARLHFConfig
from learners.loop.logger import RunLogger

ROOT = pathlib.Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "metrics.md"
LEARNERS = ("MAGRPO", "IAC", "MAAC", "MARLHF")
ROW = re.compile(r"^\| `(?P<name>[\w/{}]+)` \| (?P<learners>[^|]+) \| (?P<when>[^|]+) \|", re.M)

# The page's "when" cells, each named by what a run must do for the name to be logged.
CONDITIONS = {
    "always": "always",
    "evaluation": "evaluation",
    "`reference_kl_enabled`": "reference_kl",
    "`num_generations` ≥ 2": "groups",
    "`use_separate_critic`": "critic_model",
    "vLLM": "vllm",
    "vLLM + `rollout_correction`": "vllm",
    "info-flow task": "info_flow",
    "chance level": "chance",
    "training pairs": "training_pairs",
    "held-out pairs": "heldout_pairs",
    "`eval_logger`": "eval_logger",
    "`curriculum_threshold`": "curriculum",
}
# vllm: needs vLLM, which the default test venv lacks (tests/test_vllm.py runs it); curriculum: needs an env with
# levels (tests/test_curriculum.py checks the logged levels)
NOT_RUN_HERE = {"vllm", "curriculum"}

FAST = dict(num_train_epochs=1, max_new_tokens=4, temperature=1.0, top_p=1.0, top_k=None, episodes_per_epoch=2,
            rollout_buffer_size=2, eval_num_samples=2, verbose=False)
AGGREGATE = {"custom_score": 1.0}  # what the MAGRPO run's eval_aggregator returns: logged as eval/custom_score


def documented() -> list[dict[str, Any]]:
    """Every row of the page's metric tables: name, learners, condition."""
    rows = []
    for m in ROW.finditer(PAGE.read_text(encoding="utf-8")):
        cell = m.group("learners").strip()
        learners = LEARNERS if cell == "all" else tuple(x.strip() for x in cell.split(","))
        assert set(learners) <= set(LEARNERS), f"{m.group('name')}: unknown learners {learners}"
        when = m.group("when").strip()
        assert when in CONDITIONS, f"{m.group('name')}: unknown condition {when!r}; add it to CONDITIONS"
        rows.append({"name": m.group("name"), "learners": learners, "when": CONDITIONS[when]})
    return rows


def expected(learner: str, conditions: set[str], values: dict[str, list[Any]]) -> set[str]:
    """The names the page says `learner` logs in a run that meets `conditions`, placeholders filled in."""
    names: set[str] = set()
    for row in documented():
        if learner not in row["learners"] or row["when"] not in conditions:
            continue
        filled = [row["name"]]
        for key, options in values.items():
            filled = [n.replace("{" + key + "}", str(v)) for n in filled for v in options] \
                if "{" + key + "}" in row["name"] else filled
        assert not any("{" in n for n in filled), f"{row['name']}: a placeholder this test does not fill"
        names.update(filled)
    return names


@pytest.fixture
def logged(monkeypatch):
    """The names of every metric passed to a run's logger (file, wandb and TensorBoard alike)."""
    names: set[str] = set()
    log = RunLogger.log

    def record(self, metrics, *args, **kwargs):
        names.update(metrics)
        return log(self, metrics, *args, **kwargs)

    monkeypatch.setattr(RunLogger, "log", record)
    return names


def longer(first, second):
    """Longer joint answers are better: distinct lengths give preference pairs."""
    return [(len(a) + len(b)) / 100 for a, b in zip(first, second)]


def eval_logger(agent_completions_turns, batch_items, prompts):
    return [{"n": len(prompts)}]


def eval_aggregator(rows, num_turns):
    return AGGREGATE


RUNS = {
    # A 2-turn message task (it reports used_partner_info and its chance level), a KL term, a custom eval metric.
    "magrpo": ("MAGRPO", {"always", "evaluation", "groups", "reference_kl", "info_flow", "chance", "eval_logger"},
               {"t": [1, 2], "key": list(AGGREGATE)}),
    "iac": ("IAC", {"always", "evaluation", "groups", "critic_model"}, {"c": [0, 1], "t": [1]}),
    "iac-value-heads": ("IAC", {"always", "evaluation"}, {"c": [0, 1], "t": [1]}),  # one sample per task instance
    "maac": ("MAAC", {"always", "evaluation", "groups", "critic_model"}, {"c": [0], "t": [1]}),
    "marlhf": ("MARLHF", {"always", "evaluation", "groups", "training_pairs", "heldout_pairs"}, {"t": [1]}),
}


def run(kind: str, model: str, output_dir: str) -> Any:
    """Build and train the learner of `kind` for one short epoch; return it."""
    env, args = "smoke/FormatAgreement-v1", dict(FAST, output_dir=output_dir)
    if kind == "magrpo":
        learner = MAGRPO(env="coop/SecretPair-v1", agent_model=model, num_agents=2, eval_logger=eval_logger,
                         eval_aggregator=eval_aggregator,
                         args=MAGRPOConfig(**args, num_generations=2, reference_kl_enabled=True))
    elif kind == "iac":
        learner = IAC(env=env, agent_model=model, num_agents=2, critic_model=model,
                      args=IACConfig(**args, num_generations=2))
    elif kind == "iac-value-heads":
        learner = IAC(env=env, agent_model=model, num_agents=2, args=IACConfig(**args, use_separate_critic=False))
    elif kind == "maac":
        learner = MAAC(env=env, agent_model=model, num_agents=2, critic_model=model,
                       args=MAACConfig(**args, num_generations=2))
    else:  # 4 task instances x 4 candidates of distinct lengths: enough distinct comparisons to hold some out
        prompts = [{"prompt": f"Question {i}:"} for i in range(4)]
        learner = MARLHF(train_dataset=prompts, reward_func=longer, agent_model=model, num_agents=2,
                         args=MARLHFConfig(**{**args, "episodes_per_epoch": 4, "rollout_buffer_size": 4,
                                              "max_new_tokens": 6}, num_generations=2, preference_num_candidates=4,
                                           reward_learning_rate=1e-3))
    learner.learn()
    return learner


@pytest.mark.parametrize("kind", list(RUNS))
def test_a_run_logs_exactly_the_documented_names(kind, tiny_dir, tmp_path, logged):
    learner, conditions, values = RUNS[kind]
    run(kind, tiny_dir, str(tmp_path))
    want = expected(learner, conditions, {"i": [0, 1], **values})
    undocumented, missing = sorted(logged - want), sorted(want - logged)
    assert not undocumented, f"{learner} logs {undocumented}, which docs/metrics.md does not list for it"
    assert not missing, f"docs/metrics.md lists {missing} for {learner}, which this run did not log"
    if kind == "marlhf":  # the preference stage's dict reaches the file like every other
        in_file = {name for line in (tmp_path / "metrics.jsonl").read_text().splitlines() for name in json.loads(line)}
        assert "preference/train_pairs" in in_file and "preference/current_pairs" in in_file


def test_every_condition_is_met_by_a_run_or_its_names_are_in_the_code():
    rows = documented()
    met = set().union(*(conditions for _, conditions, _ in RUNS.values()))
    assert set(CONDITIONS.values()) - NOT_RUN_HERE <= met
    code = "\n".join(p.read_text(encoding="utf-8") for p in (ROOT / "learners").rglob("*.py"))
    for row in rows:
        if row["when"] in NOT_RUN_HERE:  # e.g. train/agent_{i}/rollout_ratio_mean: its last part is in the code
            assert row["name"].rsplit("/", 1)[-1] in code, f"{row['name']} is documented but not in learners/"


def test_every_learner_and_section_of_the_page_has_rows():
    rows = documented()
    assert {learner for row in rows for learner in row["learners"]} == set(LEARNERS)
    for prefix in ("train/", "perf/", "eval/", "preference/", "train/agent_{i}/", "train/critic_{c}/"):
        assert any(row["name"].startswith(prefix) for row in rows), prefix
    names = [row["name"] for row in rows]
    assert len(names) == len(set(names)), "a name has two rows"
