"""Information flow in private-information tasks: what each agent sent and whether its answer used the partner's
part, in evaluation (metric, table column, episode JSONL) and in training logs (metrics.jsonl, episodes.jsonl);
and what each critic reads: MAAC's centralized critic every agent's observation (with the messages received),
IAC's critic its own agent's observation only.

`Whisper` is a tiny two-agent task of the `coop/` contract: turn 0 every agent sends a message, turn 1 every
agent answers "<colour> <animal>"; agent_0 holds the colour, agent_1 the animal.
"""

from __future__ import annotations

import json
import re

import pytest
import torch
from datasets import Dataset
from transformers import AutoTokenizer

from comlrl_env import TextParallelEnv
from comlrl_env.benchmark import evaluate_policy, markdown_table, play_episodes, run_suite
from comlrl_env.info_flow import episode_record, used_partner_info_rate
from comlrl_env.intervals import t_quantile
from learners import IAC, MAAC, MAGRPO, IACConfig, MAACConfig, MAGRPOConfig
from learners.loop.data import reset_roots
from learners.models.critics import CausalLMWithValueHead
from rewards.joint import joint_text

COLOURS = ("red", "blue", "green", "gold")
ANIMALS = ("cat", "dog", "owl", "fox")


class Whisper(TextParallelEnv):
    """agent_0 holds COLOURS[i], agent_1 ANIMALS[i]; turn 0: message; turn 1: answer, credit 1 per agent whose
    answer names both words, reward the mean credit."""

    metadata = {**TextParallelEnv.metadata, "name": "test/Whisper-v0", "num_tasks": 4, "reward_range": (0.0, 1.0)}
    reports_flow = True  # False: the same task without the info-flow fields

    def __init__(self) -> None:
        super().__init__(num_agents=2, num_turns=2)

    def load_task(self, task_index):
        i = task_index if task_index is not None else int(self.np_random.integers(4))
        return {"secret": {"agent_0": COLOURS[i], "agent_1": ANIMALS[i]}, "heard": {}}

    def partner(self, agent: str) -> str:
        return "agent_1" if agent == "agent_0" else "agent_0"

    def prompts(self):
        if self.turn == 0:
            return {a: f"Your word: {self.task['secret'][a]}. Message your partner:" for a in self.agents}
        return {a: f"Your word: {self.task['secret'][a]}. Partner says: {self.task['heard'][a]} Answer:"
                for a in self.agents}

    def score(self, actions):
        if self.turn == 0:
            self.task["heard"] = {a: actions[self.partner(a)] for a in self.agents}
            return 0.0, False
        credit = {}
        for a in self.agents:
            words = set(re.findall(r"[a-z]+", actions[a].lower()))
            used = self.task["secret"][self.partner(a)] in words
            credit[a] = float(used and self.task["secret"][a] in words)
            if self.reports_flow:
                self._step_infos.setdefault(a, {}).update(
                    message_sent=self.response_history[a][0][:200], used_partner_info=used)
        return sum(credit.values()) / len(credit), True


def words_of(observation: str) -> tuple[str, str]:
    """(own word, what the partner said) of a Whisper observation."""
    own = re.search(r"Your word: (\w+)", observation).group(1)
    heard = re.search(r"Partner says: (.*) Answer:", observation)
    return own, heard.group(1) if heard else ""


def sharing_team(share: tuple[bool, bool] = (True, True)):
    """Scripted team: at turn 0 each agent sends its word; at turn 1 agent i answers its own word plus, when
    `share[i]`, what it heard."""
    def policy(observations, envs):
        out = []
        for obs in observations:
            joint = {}
            for i, (agent, text) in enumerate(sorted(obs.items())):
                own, heard = words_of(text)
                if "Answer:" not in text:
                    joint[agent] = own
                else:
                    joint[agent] = f"{own} {heard}" if share[i] else own
            out.append(joint)
        return out

    return policy


# ----- evaluation ---------------------------------------------------------------------------------------------


def wilson(rate, n, z=1.959964):
    """The Wilson score interval, written out."""
    centre = (rate + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * (rate * (1 - rate) / n + z * z / (4 * n * n)) ** 0.5
    return centre - half, centre + half


def test_episode_rows_say_what_each_agent_sent_and_answered_and_whether_it_used_the_partner(tmp_path):
    path = tmp_path / "eval" / "episodes.jsonl"
    metrics = evaluate_policy(Whisper(), sharing_team((True, False)), episodes=4, episodes_path=str(path))
    assert metrics["used_partner_info_rate"] == 0.5  # agent_0 used agent_1's word in every episode, agent_1 never
    # every episode's share is 0.5: no spread over tasks, so Wilson over the 8 answers, at t_3 (4 tasks of 2
    # answers: the design effect is estimated from 4 tasks)
    assert (metrics["used_partner_info_low"], metrics["used_partner_info_high"]) == pytest.approx(
        wilson(0.5, 8, t_quantile(3)))
    assert metrics["reward_mean"] == 0.5
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    # the 4 instances, in the benchmark's seeded shuffle (instance_order(4, 4, seed=0))
    assert [r["episode"] for r in rows] == [0, 1, 2, 3] and [r["task_index"] for r in rows] == [2, 0, 1, 3]
    assert rows[0] == {
        "episode": 0, "task_index": 2,
        "messages": {"agent_0": "green", "agent_1": "owl"},
        "answers": {"agent_0": "green owl", "agent_1": "owl"},
        "used_partner_info": {"agent_0": True, "agent_1": False},
        "returns": {"agent_0": 0.5, "agent_1": 0.5},
    }


def test_the_rate_counts_agent_answers_and_nothing_without_the_flag():
    assert evaluate_policy(Whisper(), sharing_team(), episodes=4)["used_partner_info_rate"] == 1.0
    empty = evaluate_policy(Whisper(), lambda obs, envs: [dict.fromkeys(o, "") for o in obs], episodes=4)
    assert empty["used_partner_info_rate"] == 0.0 and empty["reward_mean"] == 0.0
    rows = [{"used_partner_info": {"agent_0": True, "agent_1": False}},
            {"used_partner_info": {"agent_0": True, "agent_1": True}}]
    rate, low, high = used_partner_info_rate(rows)
    # per-task counts 1 of 2 and 2 of 2: variance over tasks ((1 - 1.5)^2 + (2 - 1.5)^2) / (2 * 1 * 2^2) = 1/16,
    # so the effective sample size is 0.75 * 0.25 / (1/16) = 3 answers, at t_1 (two tasks)
    assert rate == 0.75 and (low, high) == pytest.approx(wilson(0.75, 3, t_quantile(1)))
    assert used_partner_info_rate([]) is None
    assert episode_record({"agent_0": {"turn": 1}}, {"agent_0": "x"}, {"agent_0": 1.0}) is None


def test_an_env_without_the_flag_gets_no_rate_no_column_and_no_file(tmp_path):
    env = Whisper()
    env.reports_flow = False
    metrics = evaluate_policy(env, sharing_team(), episodes=2, episodes_path=str(tmp_path / "e.jsonl"))
    assert "used_partner_info_rate" not in metrics and not (tmp_path / "e.jsonl").exists()
    assert play_episodes(env, sharing_team(), 2).records == []
    assert "used_partner_info_rate" not in markdown_table([{"env": "e", "team": "t", **metrics}])


def test_run_suite_writes_the_column_and_the_episode_files(tmp_path):
    results = run_suite([Whisper()], {"sharing": sharing_team()}, episodes=4, out_dir=str(tmp_path),
                        record_episodes=True)
    rows = {r["team"]: r for r in results["rows"]}
    assert rows["sharing"]["used_partner_info_rate"] == 1.0 and rows["empty"]["used_partner_info_rate"] == 0.0
    table = (tmp_path / "results.md").read_text()
    header = next(line for line in table.splitlines() if "| policy |" in line)
    assert header.rstrip(" |").endswith("used_partner_info_rate")
    assert "| test/Whisper-v0 | sharing |" in table and "1.000 [0.510, 1.000] |" in table  # Wilson, 4 tasks
    files = sorted(p.name for p in (tmp_path / "episodes").iterdir())
    assert files == ["test_Whisper-v0__empty.jsonl", "test_Whisper-v0__sharing.jsonl"]


# ----- training logs ------------------------------------------------------------------------------------------

FAST = dict(num_train_epochs=1, num_generations=2, max_new_tokens=4, temperature=1.0, top_p=1.0, top_k=None,
            eval_interval=0, verbose=False, rollout_buffer_size=2)


def test_training_logs_the_rate_and_one_row_per_episode_with_the_messages(tiny_dir, tmp_path):
    learner = MAGRPO(env=Whisper(), agent_model=tiny_dir, num_agents=2,
                     args=MAGRPOConfig(**FAST, episodes_per_epoch=2, rollout_mode="parallel",
                                       output_dir=str(tmp_path)))
    summary = learner.learn()
    rollout = learner.last_rollout
    assert summary["train/used_partner_info_rate"] == used_partner_info_rate(rollout.episodes)[0]
    metrics = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert "train/used_partner_info_rate" in metrics[0]
    rows = [json.loads(line) for line in (tmp_path / "episodes.jsonl").read_text().splitlines()]
    assert len(rows) == 4 and all(r["run_id"] == learner.run_id and r["turn"] == 1 for r in rows)  # 2 tasks x 2
    # Parallel mode: episode (task b, copy k) is row b*K+k of turn 0 and row B*K + b*K+k of turn 1.
    for e, row in enumerate(rows):
        for a, agent in enumerate(("agent_0", "agent_1")):
            assert row["messages"][agent] == rollout.samples[a].completions[e][:200]
            assert row["answers"][agent] == rollout.samples[a].completions[4 + e]
        assert set(row["used_partner_info"]) == {"agent_0", "agent_1"}
        assert row["returns"]["agent_0"] == pytest.approx(float(rollout.rewards[0, 4 + e]))


def test_a_task_without_the_flag_logs_neither_the_rate_nor_episode_rows(tiny_dir, tmp_path):
    data = Dataset.from_list([{"prompt": f"Question {i}:"} for i in range(2)])
    learner = MAGRPO(agent_model=tiny_dir, num_agents=2, train_dataset=data,
                     reward_func=lambda a, b: [0.0] * len(a), args=MAGRPOConfig(**FAST, output_dir=str(tmp_path)))
    summary = learner.learn()
    assert learner.last_rollout.episodes is None and "train/used_partner_info_rate" not in summary
    assert not (tmp_path / "episodes.jsonl").exists()


# ----- what the critics read ----------------------------------------------------------------------------------


@pytest.fixture
def critic_inputs(monkeypatch):
    """Every (model, input_ids, attention_mask) a value head reads from, in call order."""
    seen = []
    original = CausalLMWithValueHead.hidden_states

    def recording(model, input_ids, attention_mask):
        seen.append((model, input_ids.cpu(), attention_mask.cpu()))
        return original(model, input_ids, attention_mask)

    monkeypatch.setattr(CausalLMWithValueHead, "hidden_states", staticmethod(recording))
    return seen


def one_episode(learner):
    """One sampled episode of task 1 (blue / dog): rows 0 (message turn) and 1 (answer turn)."""
    roots = reset_roots(learner.env, [(7, 1)])
    return learner.collect(roots, num_generations=1)


def read(ids: torch.Tensor, mask: torch.Tensor) -> list[list[int]]:
    return [row[m.bool()].tolist() for row, m in zip(ids, mask)]


AC_FAST = dict(num_train_epochs=1, max_new_tokens=4, temperature=1.0, top_p=1.0, eval_interval=0, verbose=False)


def test_maac_critic_reads_every_agents_observation_with_the_messages_received(tiny_dir, critic_inputs):
    learner = MAAC(env=Whisper(), agent_model=tiny_dir, num_agents=2, critic_model=tiny_dir,
                   args=MAACConfig(**AC_FAST))
    rollout = one_episode(learner)
    msg = [rollout.samples[a].completions[0] for a in range(2)]  # what each agent sent at turn 0
    critic_inputs.clear()
    learner.critic_values(rollout)
    ((model, ids, mask),) = critic_inputs
    assert model is learner.critics[0]
    turn0 = "[agent_0]\nYour word: blue. Message your partner:\n\n[agent_1]\nYour word: dog. Message your partner:"
    turn1 = joint_text(f"[agent_0]\nYour word: blue. Partner says: {msg[1]} Answer:\n\n"
                       f"[agent_1]\nYour word: dog. Partner says: {msg[0]} Answer:", {"agent_0": msg[0], "agent_1": msg[1]})
    tok = AutoTokenizer.from_pretrained(tiny_dir)
    assert rollout.states == [turn0, turn1]
    assert read(ids, mask) == [tok(turn0)["input_ids"], tok(turn1)["input_ids"]]


@pytest.mark.parametrize("separate", [True, False])
def test_iac_critic_reads_its_own_agents_observation_only(tiny_dir, critic_inputs, separate):
    learner = IAC(env=Whisper(), agent_model=tiny_dir, num_agents=2, critic_model=tiny_dir if separate else None,
                  args=IACConfig(**AC_FAST, use_separate_critic=separate))
    rollout = one_episode(learner)
    msg = [rollout.samples[a].completions[0] for a in range(2)]
    critic_inputs.clear()
    learner.critic_values(rollout)
    assert len(critic_inputs) == 2
    tok = AutoTokenizer.from_pretrained(tiny_dir)
    expected = {0: ["Your word: blue. Message your partner:", f"Your word: blue. Partner says: {msg[1]} Answer:"],
                1: ["Your word: dog. Message your partner:", f"Your word: dog. Partner says: {msg[0]} Answer:"]}
    for a, (model, ids, mask) in enumerate(critic_inputs):
        assert model is (learner.critics[a] if separate else learner.agents[a])
        P = rollout.samples[a].prompt_ids.shape[1]  # a V critic is read at the last prompt token
        assert read(ids[:, :P], mask[:, :P]) == [tok(text)["input_ids"] for text in expected[a]]


def test_tree_rollouts_log_one_row_per_leaf_with_its_paths_return(tiny_dir):
    learner = MAGRPO(env=Whisper(), agent_model=tiny_dir, num_agents=2,
                     args=MAGRPOConfig(**FAST, episodes_per_epoch=2, rollout_mode="tree"))
    rollout = learner.collect(reset_roots(learner.env, [(3, 0), (4, 1)]), num_generations=2, rollout_mode="tree")
    rows = rollout.episodes
    assert len(rows) == 8  # 2 tasks x 2 messages x 2 answers
    assert [r["task_index"] for r in rows] == [0] * 4 + [1] * 4
    turn0 = rollout.turn == 0
    for a, agent in enumerate(("agent_0", "agent_1")):
        sent = [c for c, first in zip(rollout.samples[a].completions, turn0.tolist()) if first]
        assert [r["messages"][agent] for r in rows] == [m[:200] for m in sent for _ in range(2)]
    leaf = rollout.joint_returns[-8:]  # the answer turn's joint actions; the message turn pays 0
    assert [r["returns"]["agent_0"] for r in rows] == pytest.approx(leaf[:, 0].tolist())


def test_comlrl_bench_records_the_episodes_of_a_message_task(tiny_dir, tmp_path):
    from comlrl_env import register
    from learners.cli import main

    register("test/Whisper-v0", entry_point=Whisper)
    saved = tmp_path / "agents"
    saved.mkdir()
    for i in range(2):
        (saved / f"agent_{i}").symlink_to(tiny_dir)
    out = tmp_path / "bench"
    assert main(["--env", "test/Whisper-v0", "--agents", f"team={saved}", "--episodes", "2", "--out", str(out),
                 "--max-new-tokens", "4", "--record-episodes"]) == 0
    rows = [json.loads(line) for line in (out / "episodes" / "test_Whisper-v0__team.jsonl").read_text().splitlines()]
    assert [r["task_index"] for r in rows] == [2, 0] and set(rows[0]["messages"]) == {"agent_0", "agent_1"}
    assert "used_partner_info_rate" in (out / "results.md").read_text()


# ----- the coop/ private-information tasks -------------------------------------------------------------------


@pytest.mark.parametrize("task", ["coop/SecretPair-v1", "coop/SharedPick-v1"])
def test_the_coop_tasks_report_the_flow_in_the_team_view_only(task):
    from comlrl_env import make

    team = evaluate_policy(make(task), lambda obs, envs: [e.canonical_actions() for e in envs], episodes=6)
    assert team["used_partner_info_rate"] == 1.0 and team["reward_mean"] == 1.0
    silent = evaluate_policy(make(task), lambda obs, envs: [dict.fromkeys(o, "") for o in obs], episodes=6)
    assert silent["used_partner_info_rate"] == 0.0
    rows = play_episodes(make(task), lambda obs, envs: [e.canonical_actions() for e in envs], 2).records
    env = make(task)
    env.reset(options={"task_index": rows[1]["task_index"]})
    assert rows[1]["messages"] == env.canonical_actions()  # what each agent sent at the message turn
    for view in ("full", "own"):
        lone = evaluate_policy(make(task, view=view), lambda obs, envs: [e.canonical_actions() for e in envs], 2)
        assert "used_partner_info_rate" not in lone


def test_maac_critic_on_secret_pair_reads_both_secrets_and_both_messages(tiny_dir):
    learner = MAAC(env="coop/SecretPair-v1", agent_model=tiny_dir, num_agents=2, critic_model=tiny_dir,
                   args=MAACConfig(**AC_FAST))
    rollout = learner.collect(reset_roots(learner.env, [(0, 13)]), num_generations=1)  # colour 1, animal 1
    env = learner.env
    env.reset(options={"task_index": 13})
    colour, animal = env.task["parts"]
    sent = {a: rollout.samples[i].completions[0] for i, a in enumerate(("agent_0", "agent_1"))}
    env.step(sent)
    turn1 = learner.joint_texts(rollout, torch.tensor([1]))[0]
    assert turn1 == env.state()
    assert colour in turn1 and animal in turn1
    iac_view = rollout.samples[0].prompt_ids[1][rollout.samples[0].prompt_mask[1].bool()]
    own = AutoTokenizer.from_pretrained(tiny_dir).decode(iac_view)
    assert own == env.observe("agent_0") and animal not in own.replace(sent["agent_1"][:200], "")


def silent_guess(obs, envs):
    """No message; then each agent answers its own part with a fixed guess at its partner's: SecretPair's (and
    Picnic's) part-0 holder "<its word> <the first part-1 word>", part-1 holder the other way; SharedPick's
    the first listed item with its own attribute; GridPick's colour holder "small <colour>", size holder
    "<size> <first listed colour>"."""
    actions = []
    for o, env in zip(obs, envs):
        if env.turn == 0:
            actions.append(dict.fromkeys(o, ""))
            continue
        parts = env.task["parts"]
        if env.metadata["name"] == "coop/GridPick-v1":
            first_colour = next(iter(env.task["items"].values()))[0]
            actions.append({"agent_0": f"small {parts[0]}", "agent_1": f"{parts[1]} {first_colour}"})
        elif "items" in env.task:
            pick = {p: next(n for n, attrs in env.task["items"].items() if attrs[p] == parts[p]) for p in (0, 1)}
            actions.append({"agent_0": pick[0], "agent_1": pick[1]})
        else:
            first = [vocabulary[0] for vocabulary in env.VOCABULARIES]
            actions.append({"agent_0": f"{parts[0]} {first[1]}", "agent_1": f"{first[0]} {parts[1]}"})
    return actions


@pytest.mark.parametrize("task, chance", [("coop/SecretPair-v1", 1 / 12), ("coop/Picnic-v1", 1 / 12),
                                          ("coop/SharedPick-v1", 1 / 3), ("coop/GridPick-v1", 1 / 3)])
def test_the_rate_comes_with_its_chance_level_which_silent_guessing_reaches_exactly(task, chance):
    from comlrl_env import make

    env = make(task)
    metrics = evaluate_policy(env, silent_guess, episodes=env.num_tasks)  # every instance once
    assert metrics["used_partner_info_chance"] == pytest.approx(chance)
    # no message, so every answer that got the partner's part right was a lucky guess: exactly the chance level
    assert metrics["used_partner_info_rate"] == pytest.approx(chance, abs=1e-12)
    assert markdown_table([{"env": task, "team": "silent", **metrics}]).splitlines()[0].endswith(
        "| used_partner_info_rate | used_partner_info_chance |")
    assert "used_partner_info_chance" not in evaluate_policy(Whisper(), sharing_team(), episodes=2)  # none stated
