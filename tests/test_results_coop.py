"""`make results-coop` (`benchmarks/results_coop.py`) at toy sizes on the tiny fixture model: every stage runs
(one work unit in a subprocess, as `--jobs` does) and writes its own unit file with every evaluation episode,
every row has an equal budget of sampled completions, a rerun runs only the units whose file is missing, and
the docs are rebuilt from the unit files alone; plus the split and the statistics by hand, the scripted
own-part baseline and its exact expectation, the information flow per row, and the committed results page
against the committed unit files."""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "results_coop.py"
sys.path.insert(0, str(ROOT / "benchmarks"))
import coop_report  # noqa: E402
import results  # noqa: E402
import results_coop  # noqa: E402


def run(tiny_dir: str, out: Path, *extra: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, str(SCRIPT), "--smoke", "--model-dir", tiny_dir, "--out", str(out),
                           "--device", "cpu", *extra],
                          capture_output=True, text=True, cwd=ROOT, env=env, timeout=900)


def run_here(capsys: pytest.CaptureFixture, tiny_dir: str, out: Path, *extra: str) -> str:
    """The same command in this process (one process start less; `--jobs 1`: the stages run right here);
    its printout."""
    capsys.readouterr()
    assert results_coop.main(["--smoke", "--model-dir", tiny_dir, "--out", str(out), "--device", "cpu", *extra]) == 0
    return capsys.readouterr().out


FEW = ("team-base", "team-maac-lora", "alone-full-base", "alone-own-base", "alone-own-magrpo-lora",
       "alone-own-scripted")
"""The default suite's stages (one task, both seeds): every view, a team trained with a critic (MAAC: the
critic's branch), a lone agent trained with MAGRPO and the scripted own-part baseline, and four comparisons
between rows of two seeds each.
The whole grid (both tasks, all eight conditions, IAC and the team's MAGRPO too) is the `slow` test below."""


def check_pipeline(capsys: pytest.CaptureFixture, tiny_dir: str, tmp_path: Path, only: list[str],
                   rows_expected: list[tuple[str, str]], seeds_of: dict[str, list[int]], lost_key: str) -> None:
    """Run two base stages of secretpair/seed0 as one work unit of a `--jobs 2` subprocess, then `only` at
    --seeds 0 1 in this process; check the unit files, rows, comparisons and report; delete `lost_key`'s unit
    and check that only it runs again; rebuild the docs from the unit files alone."""
    out = tmp_path / "r-smoke"
    units = out / "units"  # --smoke keeps the units out of the repo
    part = run(tiny_dir, tmp_path / "r", "--seeds", "0", "--jobs", "2", "--only", "secretpair/seed0/team-base",
               "secretpair/seed0/alone-own-base")  # one work unit: a subprocess
    assert part.returncode == 0, part.stdout[-2000:] + part.stderr[-4000:]
    assert "process of 2 stage(s) exited 0" in part.stdout
    assert (out / "logs" / "secretpair__seed0__team-base.log").is_file()
    assert sorted(p.relative_to(units).as_posix() for p in units.rglob("*.json")) == [
        "secretpair/seed0/alone-own-base.json", "secretpair/seed0/team-base.json"]
    n = sum(len(seeds_of[t]) for t, _ in rows_expected)  # stages
    printed = run_here(capsys, tiny_dir, tmp_path / "r", "--seeds", "0", "1", "--only", *only)
    assert f"2 of {n} stages done before" in printed  # the first run's two
    data = json.loads((out / "results.json").read_text())
    rows = data["rows"]
    assert [(r["task"], r["name"]) for r in rows] == rows_expected
    for r in rows:
        seeds = seeds_of[r["task"]]
        per_seed = 16 if r["view"] == "own" else 8  # the own-part agent: each instance with each part shown
        assert r["seeds"] == seeds and r["sampled"]["episodes"] == per_seed * len(seeds)
        assert (r["greedy"] is None) == r["scripted"]  # a script has no greedy decoding
        assert r["scripted"] or r["greedy"]["episodes"] == per_seed * len(seeds)
        assert (r["expected_reward"] is not None) == r["scripted"]
        assert (r["info_flow"] is not None) == (r["view"] == "team")
        assert (r["sampled"]["ci95_seeds"] is None) == (len(seeds) == 1)  # a t-interval needs 2 seeds
        assert r["completions"] == (None if r["learner"] is None else 64)  # equal budget: team and lone alike
        assert (r["used_partner_info_chance"] is None) == (r["view"] != "team")
    present = set(rows_expected)
    own = {r["name"]: r["sampled"]["mean"] for r in rows if r["name"] in coop_report.OWN_BASELINES}
    best = max(own, key=own.get) if own else None  # the better own-part baseline: the higher mean over seeds
    named = [(a, b, best if b == coop_report.BEST_OWN else b) for a, b in coop_report.COMPARISONS]
    assert {(c["a"], c["against"], c["b"]) for c in data["comparisons"]} == {
        (a, b, row) for a, b, row in named if {("secretpair", a), ("secretpair", row)} <= present}
    unit_files = sorted(units.rglob("*.json"))
    assert len(unit_files) == n
    for path in unit_files:
        e = json.loads(path.read_text())
        assert path.relative_to(units).as_posix() == f"{e['task']}/seed{e['seed']}/{e['name']}.json"
        assert len(e["examples"]) == results_coop.EXAMPLES and e["settings"]["budget"] == 64
        per_seed = 16 if e["view"] == "own" else 8
        modes = ("sampled",) if e["scripted"] else ("sampled", "greedy")
        assert sorted(e["episodes"]) == sorted(modes)  # every evaluation episode, not only the examples
        assert all(len(coop_report.episode_rows(e, m)) == per_seed for m in modes)
        assert e["settings"]["lr_schedule"] == results_coop.LR_SCHEDULE
        assert len(e["examples"][0]["turns"]) == (2 if e["view"] == "team" else 1)
        assert set(e["examples"][0]["turns"][0]) == ({"agent_0", "agent_1"} if e["view"] == "team" else {"agent_0"})
        assert (e["curve"] is None) == (e["learner"] is None) and e["seconds_train"] >= 0
        assert path.stat().st_size < 100_000  # small JSON, no weights
    md = (out / "results.md").read_text()
    assert "| secretpair | team-maac-lora |" in md and "| secretpair | alone-own-base |" in md
    assert "(better own-part baseline)" in md and "alone-own-magrpo-lora − alone-own-scripted" in md
    assert "from all 8 episodes of each of seeds 0, 1" in md  # the info flow of units that store every episode
    assert (out / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    trained = sorted((out / "runs").glob("*/*/*/final/done.json"))
    assert len(trained) == sum(len(seeds_of[t]) for t, c in rows_expected if results_coop.BY_NAME[c].learner)
    assert not list((out / "runs").glob("*/*/*/checkpoints"))
    # a killed unit: only its file is missing, so only it runs again
    lost = units / (lost_key + ".json")
    lost.unlink()
    written = {p: p.stat().st_mtime_ns for p in unit_files if p != lost}
    again = run_here(capsys, tiny_dir, tmp_path / "r", "--seeds", "0", "1", "--only", *only)
    assert f"{n - 1} of {n} stages done before; running 1" in again and lost.is_file()
    assert {p: p.stat().st_mtime_ns for p in written} == written  # every other unit reused, nothing redone
    # the docs come from the unit files alone: without the weights, runs and report, on a page of their own
    for gone in ("runs", "logs", "results.json", "results.md", "curves.png"):
        shutil.rmtree(out / gone) if (out / gone).is_dir() else (out / gone).unlink()
    page = tmp_path / "docs" / "results.md"
    page.parent.mkdir()
    page.write_text("# Results\n\nhand-written\n")
    assert results_coop.main(["--docs-only", "--docs", "--units", str(units), "--out", str(tmp_path / "rebuilt"),
                              "--docs-page", str(page)]) == 0
    text = page.read_text()
    assert text.startswith("# Results\n\nhand-written\n") and "<!-- results-coop:begin -->" in text
    block = text.split("<!-- results-coop:begin -->")[1]
    assert not re.search(r"^#{1,2} ", block, re.M)  # the page's sections own the top levels; the block nests under
    assert max(map(len, block.split("```")[1].splitlines())) <= coop_report.CODE_WIDTH  # the site cuts long code
    assert f"lr {results_coop.LR} {results_coop.LR_SCHEDULE};" in text
    assert "seeds 0, 1 for every row;" in text and "sampled 64 completions" in text
    assert (page.parent / "img" / "results-coop.png").is_file()
    assert (tmp_path / "rebuilt" / "results.md").read_text() in text
    timeless = lambda rows: [{k: v for k, v in r.items() if not k.startswith("minutes")} for r in rows]  # noqa: E731
    # the same numbers but the wall times (the lost unit ran again)
    assert timeless(json.loads((tmp_path / "rebuilt" / "results.json").read_text())["rows"]) == timeless(rows)


def test_smoke_run_writes_one_file_per_unit_resumes_and_rebuilds_the_docs_from_the_units(capsys, tiny_dir,
                                                                                         tmp_path):
    """One task, two seeds, `FEW` conditions: 12 stages, 4 trainings."""
    check_pipeline(capsys, tiny_dir, tmp_path, [f"secretpair/{c}" for c in FEW], [("secretpair", c) for c in FEW],
                   {"secretpair": [0, 1]}, "secretpair/seed1/team-base")


@pytest.mark.slow
def test_smoke_run_of_every_stage_writes_one_file_per_unit_resumes_and_rebuilds_the_docs(capsys, tiny_dir,
                                                                                           tmp_path):
    """All 27 stages (both seeds of secretpair, seed 0 of picnic; 15 trainings): every learner's branch and
    every comparison, including a row of one seed beside rows of two."""
    check_pipeline(capsys, tiny_dir, tmp_path, ["secretpair", "seed0"],
                   [(t, c.name) for t in results_coop.TASKS for c in results_coop.CONDITIONS],
                   {"secretpair": [0, 1], "picnic": [0]}, "picnic/seed0/team-base")


@pytest.mark.parametrize("task", list(results_coop.TASKS))
def test_held_out_instances_are_the_same_in_every_view_and_never_trained_on(task):
    held_out = {v: results_coop.task_env(task, v, "held_out") for v in ("team", "full", "own")}
    train = results_coop.task_env(task, "team", "train")
    assert held_out["team"].num_tasks == results.EVAL_EPISODES
    assert held_out["team"].task_subset == held_out["full"].task_subset
    # the own view's set has each instance once per shown part: own indices 2h, 2h + 1 are instance h
    assert held_out["own"].task_subset == tuple(2 * h + p for h in held_out["team"].task_subset for p in (0, 1))
    own_train = results_coop.task_env(task, "own", "train")
    assert {i // 2 for i in own_train.task_subset} == set(train.task_subset)
    assert not set(train.task_subset) & set(held_out["team"].task_subset)
    assert len(train.task_subset) + results.EVAL_EPISODES == train.metadata["num_tasks"]
    assert [len(e.possible_agents) for e in held_out.values()] == [2, 1, 1]


def test_over_seeds_and_differences_by_hand():
    a = coop_report.over_seeds([{"reward_mean": 0.2, "reward_std": 0.1, "reward_ci95": 0.0, "episodes": 100},
                                 {"reward_mean": 0.4, "reward_std": 0.3, "reward_ci95": 0.0, "episodes": 100}])
    assert a["mean"] == pytest.approx(0.3)
    assert a["ci95_seeds"] == pytest.approx(12.706 * math.sqrt(0.02) / math.sqrt(2))  # sd of (0.2, 0.4)
    # pooled: (99 * 0.01 + 99 * 0.09 + 100 * 0.01 + 100 * 0.01) / 199
    assert a["pooled_std"] ** 2 == pytest.approx((99 * 0.1 + 200 * 0.01) / 199)
    assert a["pooled_ci95"] == pytest.approx(1.96 * a["pooled_std"] / math.sqrt(200))
    b = coop_report.over_seeds([{"reward_mean": 0.1, "reward_std": 0.1, "reward_ci95": 0.0, "episodes": 100},
                                 {"reward_mean": 0.2, "reward_std": 0.1, "reward_ci95": 0.0, "episodes": 100}])
    d = coop_report.difference(a, b)  # paired by seed: (0.1, 0.2)
    assert d["mean"] == pytest.approx(0.15)
    assert d["ci95_seeds"] == pytest.approx(12.706 * math.sqrt(0.005) / math.sqrt(2))
    assert d["verdict"] == "within CI" and d["intervals_apart"] == "no" and d["seeds"] == [0, 1]
    # rows with different seeds pair on the seeds both have: here seed 1 alone, judged on its episodes
    late = coop_report.over_seeds([{"reward_mean": 0.1, "reward_std": 0.1, "reward_ci95": 0.02, "episodes": 100}],
                                  seeds=[1])
    d = coop_report.difference(a, late)
    assert d["seeds"] == [1] and d["mean"] == pytest.approx(0.4 - 0.1) and d["ci95_seeds"] is None
    assert d["ci95"] == pytest.approx(math.hypot(0.0, 0.02)) and d["verdict"] == "above"  # 0.3 ± 0.02
    assert d["pooled"] == pytest.approx(0.3 - 0.1)  # every episode of each row, for reference
    assert d["intervals_apart"] == "no"  # a's own interval over its 2 seeds is wide
    other = coop_report.over_seeds([{"reward_mean": 0.1, "reward_std": 0.1, "reward_ci95": 0.02, "episodes": 100}],
                                   seeds=[2])
    assert coop_report.difference(late, other) is None  # no seed in common: no comparison


def test_a_row_of_one_seed_is_judged_on_its_evaluations_interval_even_when_every_episode_scored_alike():
    # Picnic's IAC team (seed 0) scored 0 in all 100 episodes: the pooled normal interval is 0.000 wide, the
    # evaluation's own (Wilson, for rewards all 0 or 1) is 0.037. The untrained team over 5 seeds:
    # 0.012 +- 2.776 * 0.00447 / sqrt(5) = 0.012 +- 0.0056, so a zero-width interval would sit below it.
    zero = coop_report.over_seeds([{"reward_mean": 0.0, "reward_std": 0.0, "reward_ci95": 0.037, "episodes": 100}])
    base = coop_report.over_seeds([{"reward_mean": m, "reward_std": 0.1, "reward_ci95": 0.012, "episodes": 100}
                                   for m in (0.01, 0.01, 0.02, 0.01, 0.01)])
    assert zero["pooled_ci95"] == 0.0 and base["mean"] - base["ci95_seeds"] > 0.006
    d = coop_report.difference(zero, base)
    assert d["verdict"] == "within CI" and d["intervals_apart"] == "no"


def test_units_made_before_the_lr_schedule_setting_read_as_constant(tmp_path):
    old, new = tmp_path / "secretpair" / "seed0", tmp_path / "secretpair" / "seed1"
    for folder, settings in ((old, {"lr": 5e-4}), (new, {"lr": 1e-3, "lr_schedule": "linear"})):
        folder.mkdir(parents=True)
        (folder / "team-base.json").write_text(json.dumps({"settings": settings}))
    names = [c.name for c in results_coop.CONDITIONS]
    units = coop_report.load_units(str(tmp_path), list(results_coop.TASKS), names)
    assert units["secretpair/seed0/team-base"]["settings"] == {"lr": 5e-4, "lr_schedule": "constant"}
    assert units["secretpair/seed1/team-base"]["settings"] == {"lr": 1e-3, "lr_schedule": "linear"}


def test_only_picks_stages_by_the_parts_of_their_keys():
    key = "secretpair/seed1/team-iac-lora"
    assert all(results_coop.selected(key, [o]) for o in ("secretpair", "seed1/team-iac-lora", key))
    assert not any(results_coop.selected(key, [o]) for o in ("picnic", "seed0", "secretpair/team-base"))


def test_replace_block_keeps_the_rest_of_the_page(tmp_path):
    page = tmp_path / "results.md"
    page.write_text("# Title\n\nhand-written\n")
    results.replace_block(str(page), "coop", "table v1")
    results.replace_block(str(page), "other", "B")
    results.replace_block(str(page), "coop", "table v2")
    assert page.read_text() == ("# Title\n\nhand-written\n\n<!-- coop:begin -->\ntable v2\n<!-- coop:end -->\n\n"
                                "<!-- other:begin -->\nB\n<!-- other:end -->\n")
    assert results.read_block(str(page), "coop") == "table v2" and results.read_block(str(page), "none") is None


# ----- the scripted own-part baseline -----------------------------------------------------------------------


COMMITTED = results_coop.UNITS


def committed_units() -> dict[str, dict]:
    return coop_report.load_units(COMMITTED, list(results_coop.TASKS), [c.name for c in results_coop.CONDITIONS])


@pytest.mark.parametrize("task", list(results_coop.TASKS))
def test_the_scripted_own_part_baseline_names_its_part_guesses_the_other_and_earns_exactly_the_chance_level(task):
    env = results_coop.task_env(task, "own", "held_out")
    chance = env.metadata["partner_info_chance"]
    assert chance == 1 / 12
    # every guess of every held-out instance, scored by the env: 1 when the guess is the hidden part, else 0
    # (the shown part alone earns nothing), so the mean over the 12 guesses is exactly 1/12 on each instance
    for i in range(env.num_tasks):
        env.reset(seed=0, options={"task_index": i})
        shown = env.task["own_part"]
        rewards = []
        for guess in env.VOCABULARIES[1 - shown]:
            answer = [env.task["parts"][shown], guess][:: -1 if shown else 1]
            rewards.append(env.clone().step({"agent_0": " ".join(answer)})[1]["agent_0"])
        assert sorted(rewards) == [0.0] * 11 + [1.0]
    # the policy: the part shown plus one word of the other's vocabulary, seeded
    obs, _ = env.reset(seed=0, options={"task_index": 0})
    answers = [results_coop.OwnPartGuess(7)([obs] * 240, [env] * 240) for _ in range(2)]
    assert answers[0] == results_coop.OwnPartGuess(7)([obs] * 240, [env] * 240)  # the same seed, the same guesses
    shown, hidden = env.task["own_part"], env.VOCABULARIES[1 - env.task["own_part"]]
    guesses = []
    for a in answers[0]:
        words = a["agent_0"].split()
        assert words[shown] == env.task["parts"][shown] and words[1 - shown] in hidden
        guesses.append(words[1 - shown])
    assert set(guesses) == set(hidden)  # uniform over all 12 (240 draws miss one with probability < 1e-8)


def test_the_scripted_units_are_committed_for_seeds_0_to_4_with_every_episode_and_their_expectation():
    units = committed_units()
    for task in results_coop.TASKS:
        for seed in range(5):
            u = units[f"{task}/seed{seed}/alone-own-scripted"]
            rows = coop_report.episode_rows(u)
            assert u["scripted"] and u["learner"] is None and u["greedy"] is None and u["training"] is None
            assert u["expected_reward"] == pytest.approx(1 / 12)
            assert len(rows) == u["sampled"]["episodes"] == 2 * results.EVAL_EPISODES
            # the measured mean is the mean of the stored episodes' returns
            assert np.mean([r["returns"]["agent_0"] for r in rows]) == pytest.approx(u["sampled"]["reward_mean"])
            assert {r["returns"]["agent_0"] for r in rows} <= {0.0, 1.0}


def test_teams_are_compared_with_the_better_own_part_baseline_and_the_page_says_what_clears_one_twelfth():
    report = coop_report.build(committed_units(), list(results_coop.TASKS), results_coop.CONDITIONS)
    by = {(r["task"], r["name"]): r for r in report["rows"]}
    for c in [c for c in report["comparisons"] if c["against"] == coop_report.BEST_OWN]:
        own = {n: by[c["task"], n]["sampled"]["mean"] for n in coop_report.OWN_BASELINES}
        assert c["b"] == max(own, key=own.get)
    pairs = {(c["task"], c["a"], c["against"]) for c in report["comparisons"]}
    for task in results_coop.TASKS:
        for team in ("team-magrpo-lora", "team-iac-lora", "team-maac-lora"):
            assert (task, team, coop_report.BEST_OWN) in pairs
            assert (task, team, "alone-own-magrpo-lora") not in pairs  # the weaker baseline is not the bar
    findings = coop_report.findings(report["rows"], report["comparisons"])
    assert ("picnic, team-magrpo-lora (seeds 0-4): 0.197 ± 0.117" in findings
            and "[0.080, 0.314], does not clear 0.083 = 1/12" in findings)
    assert "[0.288, 0.670], clears 0.083 = 1/12" in findings  # SecretPair's team clears it
    row = coop_report.table(report["rows"])
    assert re.search(r"\| picnic \| alone-own-scripted \| 0-4 \| - \| [\d.]+ \| 0\.\d{3} ± 0\.\d{3}; expected "
                     r"exactly 0\.083 = 1/12 \|", row)


# ----- information flow per row --------------------------------------------------------------------------


def test_a_unit_keeps_every_evaluation_episode_messages_and_answers(tiny_dir):
    team = results_coop.evaluate("secretpair", 0, results_coop.BY_NAME["team-base"], [tiny_dir] * 2, 3, "cpu")
    for mode in ("sampled", "greedy"):
        rows = team["episodes"][mode]
        assert len(rows) == team[mode]["episodes"] == 3 and len(team["examples"]) == 3
        for row in rows:
            assert set(row["messages"]) == set(row["answers"]) == set(row["used_partner_info"]) == {"agent_0",
                                                                                                     "agent_1"}
    lone = results_coop.evaluate("secretpair", 0, results_coop.BY_NAME["alone-own-base"], [tiny_dir], 2, "cpu")
    assert [len(lone["episodes"][m]) for m in ("sampled", "greedy")] == [4, 4]  # each part shown: 2 x 2
    assert set(lone["episodes"]["sampled"][0]) == {"episode", "task_index", "answers", "returns"}
    rows = team["episodes"]["sampled"]
    assert coop_report.episode_rows({"episodes": {"sampled": coop_report.packed(rows)}}) == rows  # gzip + base64


def test_information_flow_counts_every_stored_episode_or_the_three_stored_exchanges():
    env = results_coop.task_env("picnic", "team", "held_out")
    env.reset(seed=0, options={"task_index": 4})
    fruit, place = env.task["parts"]
    rows = [{"task_index": 4, "messages": {"agent_0": f"Bring {fruit.upper()}!", "agent_1": "hello"},
             "answers": {}, "used_partner_info": {"agent_0": False, "agent_1": True}}] * 3 + [
            {"task_index": 4, "messages": {"agent_0": "hi", "agent_1": f"at the {place}"},
             "answers": {}, "used_partner_info": {"agent_0": True, "agent_1": False}}]
    unit = {"view": "team", "seed": 0, "episodes": {"sampled": rows}}
    flow = coop_report.info_flow(unit, env)
    assert flow["source"] == "all" and flow["episodes"] == 4
    assert flow["message_named_own"] == {"agent_0": 3, "agent_1": 1}
    assert flow["answer_used_partner"] == {"agent_0": 1, "agent_1": 3}
    assert coop_report.info_flow({"view": "own", "seed": 0}, env) is None  # a lone agent sends no message
    units = committed_units()
    # units made before the episodes were stored: their 3 exchanges, played again, give their stored rewards
    for key in ("picnic/seed0/team-magrpo-lora", "secretpair/seed3/team-maac-lora"):
        if key in units:
            task = key.split("/")[0]
            team_env = results_coop.task_env(task, "team", "held_out")
            for ex in units[key]["examples"]:
                assert coop_report.replayed(team_env, ex)["returns"] == ex["rewards"]
    summed = coop_report.flow_over_seeds([coop_report.info_flow(units[f"picnic/seed{s}/team-magrpo-lora"], env)
                                          for s in range(5)])
    assert summed["source"] == "from 3 stored exchanges of each of seeds 0-4" and summed["episodes"] == 15
    # Picnic's stored exchanges are one-way: the fruit holder names its fruit and the place holder's answers
    # use it; the fruit holder's answers never name the place
    assert summed["message_named_own"]["agent_0"] >= 10 and summed["answer_used_partner"]["agent_1"] >= 8
    assert summed["answer_used_partner"]["agent_0"] == 0
    assert "from all 100 episodes of seed 0" == coop_report.flow_over_seeds(
        [{**flow, "episodes": 100}])["source"]


# ----- the committed page --------------------------------------------------------------------------------


def test_the_results_page_is_rebuilt_from_the_committed_units_and_states_its_seeds_and_qualifiers(tmp_path):
    page = ROOT / "docs" / "results.md"
    copy = tmp_path / "results.md"
    copy.write_text(page.read_text())
    assert results_coop.main(["--docs-only", "--docs", "--out", str(tmp_path / "out"), "--docs-page",
                              str(copy)]) == 0
    assert copy.read_text() == page.read_text()  # the committed block is what the units give
    text = page.read_text()
    block = text.split("<!-- results-coop:begin -->")[1].split("<!-- results-coop:end -->")[0]
    # which rows ran which seeds: the actor-critic teams and the everything-agent ran seed 0 only
    assert ("seeds 0-4 (team-base, team-magrpo-lora, alone-own-base, alone-own-magrpo-lora, alone-own-scripted) "
            "and seed 0 only (team-iac-lora, team-maac-lora, alone-full-base, alone-full-magrpo-lora)") in block
    assert "| secretpair | team-iac-lora | 0 |" in block and "| secretpair | team-magrpo-lora | 0-4 |" in block
    assert "below the trained everything-agent (-0.560 ± 0.070, seed 0 only)" in block  # one seed, said so
    assert "#### What the messages carried" in block and "from 3 stored exchanges of each of seeds 0-4" in block
    hand = text.replace(block, "")
    assert "seeds 0-4, on 100 held-out" not in hand and "seed 0 only for the IAC and MAAC teams" in hand
    assert "3-seed" not in text
    iac = committed_units()["picnic/seed0/team-iac-lora"]["curve"][1]
    assert max(iac) == 0.03125 and "never above 0.03)" not in hand and "at most 0.031)" in hand
    assert "[0.080, 0.314]" in hand  # the claim against the lone agents says what holds on Picnic


def test_the_rerun_table_on_the_page_is_what_the_committed_rerun_units_give():
    import coop_reruns

    assert coop_reruns.equal_prefix([0.5, 0.0, 0.25], [0.5, 0.0, 0.5]) == 2
    assert coop_reruns.equal_prefix([0.5, 0.0], [0.5, 0.0]) == 2 and coop_reruns.equal_prefix([1.0], [0.0]) == 0
    table = coop_reruns.rows()
    assert {(r["task"], r["seed"], r["kernels"].split()[0]) for r in table} >= {
        ("secretpair", 0, "AVX-512"), ("picnic", 0, "AVX-512"), ("picnic", 0, "AVX2")}
    for r in table:  # every flow count is over all of the rerun's evaluation episodes, not stored exchanges
        assert r["flow"]["source"] == "all" and r["flow"]["episodes"] == 100
    text = (ROOT / "docs" / "results.md").read_text()
    block = text.split("<!-- coop-reruns:begin -->\n")[1].split("<!-- coop-reruns:end -->")[0]
    assert block == coop_reruns.markdown(table)


def test_held_to_avx2_kernels_the_untrained_team_repeats_its_stored_exchanges_and_with_avx512_they_part():
    stored = committed_units()["picnic/seed0/team-base"]
    reruns = ROOT / "benchmarks" / "results"
    avx2 = json.loads((reruns / "coop-rerun-avx2" / "picnic" / "seed0" / "team-base.json").read_text())
    avx512 = json.loads((reruns / "coop-rerun" / "picnic" / "seed0" / "team-base.json").read_text())
    assert avx2["settings"]["cpu_capability"] == "AVX2" and avx2["settings"]["mkl_instructions"] == "AVX2"
    assert avx512["settings"]["cpu_capability"] == "AVX512" and avx512["settings"]["mkl_instructions"] is None
    for mode in ("sampled", "greedy"):
        assert avx2[mode]["reward_mean"] == stored[mode]["reward_mean"]
    for rate in ("invalid_action_rate", "used_partner_info_rate"):
        assert avx2["sampled"][rate] == stored["sampled"][rate]
    assert avx2["examples"] == stored["examples"]  # every word of the three stored exchanges
    assert avx512["examples"] != stored["examples"]
