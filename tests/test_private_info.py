"""coop/SecretPair-v1, coop/Picnic-v1, coop/SharedPick-v1 and coop/GridPick-v1: hand-scored answers, the three
views, the info-flow fields, and a tiny model playing a team episode (its message reaches the partner; both
answers count)."""

from __future__ import annotations

import itertools
from collections import Counter

import pytest

import comlrl_env
from comlrl_env import make
from comlrl_env.benchmark import evaluate_policy
from comlrl_env.suites import suites
from comlrl_env.tasks.private_info import ANIMALS, COLOURS, VIEWS, credit
from comlrl_env.testing import check_env, check_task
from learners.models.policy import AgentPolicy

IDS = ["coop/SecretPair-v1", "coop/Picnic-v1", "coop/SharedPick-v1", "coop/GridPick-v1"]


def answer_step(env_id: str, task_index: int, first: str, second: str, messages=("hi", "hello")):
    """Play the team's message turn with `messages`, then answer with `first` and `second`: the answer step."""
    env = make(env_id)
    env.reset(seed=0, options={"task_index": task_index})
    _, rewards, terminations, _, _ = env.step(dict(zip(env.agents, messages)))
    assert rewards == {"agent_0": 0.0, "agent_1": 0.0} and not any(terminations.values())
    return env, env.step({"agent_0": first, "agent_1": second})


# Task 0 of SecretPair: agent_0 holds red, agent_1 holds cat. Each answer's credit: 1 for the pair, 0.5 for the
# partner's part alone, 0 otherwise; the team gets the mean. Flags: which answers are invalid_action.
SECRET_PAIR = [
    # both right
    ("red cat", "red cat", 1.0, set()),
    # case, punctuation, brackets and prose do not matter; grey reads as gray (not in this pair)
    ("Red, CAT!", "The answer is <red> <cat>.", 1.0, set()),
    # nothing
    ("", "", 0.0, {"agent_0", "agent_1"}),
    # each repeats its own part only
    ("red", "cat", 0.0, set()),
    # each names only its partner's part: half credit
    ("cat", "red", 0.5, set()),
    # own part right, partner's part wrong: nothing
    ("red dog", "blue cat", 0.0, set()),
    # agent_0 gets the partner's part but misnames its own (0.5), agent_1 both (1)
    ("blue cat", "red cat", 0.75, set()),
    # listing candidates voids the answer, even with the right pair inside
    ("red blue cat", "red cat dog", 0.0, {"agent_0", "agent_1"}),
    (" ".join(COLOURS + ANIMALS), "red cat", 0.5, {"agent_0"}),
    # random words
    ("qzx plor wum", "red cat", 0.5, {"agent_0"}),
]


@pytest.mark.parametrize("first, second, expected, flagged", SECRET_PAIR)
def test_secret_pair_answers(first, second, expected, flagged):
    _, (_, rewards, terminations, _, infos) = answer_step("coop/SecretPair-v1", 0, first, second)
    assert rewards == {"agent_0": pytest.approx(expected), "agent_1": pytest.approx(expected)}
    assert all(terminations.values())
    assert {a for a in infos if "invalid_action" in infos[a]} == flagged


# Task 14 of Picnic: agent_0 knows the fruit (pear), agent_1 the place (station). Read as SecretPair's pairs.
PICNIC = [
    ("pear station", "Bring the PEAR to the station.", 1.0, set()),
    # each repeats its own part only, or keeps it and guesses the other wrong
    ("pear", "station", 0.0, set()),
    ("pear zoo", "apple station", 0.0, set()),
    # each names only its partner's part: half credit
    ("station", "pear", 0.5, set()),
    # a colour or an animal is no fruit or place here
    ("red cat", "pear station", 0.5, {"agent_0"}),
    # two fruits or two places void the answer, even with the right pair inside
    ("pear plum station", "pear station park", 0.0, {"agent_0", "agent_1"}),
    ("", "qzx plor wum", 0.0, {"agent_0", "agent_1"}),
]


@pytest.mark.parametrize("first, second, expected, flagged", PICNIC)
def test_picnic_answers(first, second, expected, flagged):
    env, (_, rewards, _, _, infos) = answer_step("coop/Picnic-v1", 14, first, second)
    assert env.task["parts"] == ("pear", "station") and env.answer_text() == "pear station"
    assert env.prompt_history["agent_0"][1] == (
        'You know the fruit to bring: pear.\nYour partner\'s message: "hello"\n'
        "Name the fruit to bring and the meeting place. Answer with two words, like: <fruit> <place>\n")
    assert rewards == {"agent_0": pytest.approx(expected), "agent_1": pytest.approx(expected)}
    assert {a for a in infos if "invalid_action" in infos[a]} == flagged


# Task 4 of SharedPick: catalogue 0 (small red box, small blue jar, small green lamp, medium red pen, medium blue
# ring, medium green bag, large red bell, large blue cup, large green ball); the target is the ring: agent_0 knows
# it is blue, agent_1 that it is medium.
SHARED_PICK = [
    ("ring", "ring", 1.0, set()),
    ("The medium blue RING.", "ring!", 1.0, set()),
    # each names an item that fits only its own attribute: jar is blue, pen is medium
    ("jar", "pen", 0.0, set()),
    # each names an item that fits only its partner's attribute: half credit
    ("pen", "jar", 0.5, set()),
    # an item of neither attribute, and the right one
    ("box", "ring", 0.5, set()),
    # a name that is not in this catalogue is wrong, not invalid
    ("key", "ring", 0.5, set()),
    # the own attribute alone names no item
    ("blue", "medium", 0.0, {"agent_0", "agent_1"}),
    # two names void the answer; so does the whole catalogue
    ("ring jar", "small red box, small blue jar, small green lamp, medium red pen, medium blue ring, medium green "
     "bag, large red bell, large blue cup, large green ball", 0.0, {"agent_0", "agent_1"}),
    ("", "qzx plor wum", 0.0, {"agent_0", "agent_1"}),
]


@pytest.mark.parametrize("first, second, expected, flagged", SHARED_PICK)
def test_shared_pick_answers(first, second, expected, flagged):
    env, (_, rewards, _, _, infos) = answer_step("coop/SharedPick-v1", 4, first, second)
    assert env.task["target"] == "ring" and env.task["parts"] == ("blue", "medium")
    assert rewards == {"agent_0": pytest.approx(expected), "agent_1": pytest.approx(expected)}
    assert {a for a in infos if "invalid_action" in infos[a]} == flagged


# Task 4 of GridPick: SharedPick's task 4 without names. The grid is small, medium, large by red, blue, green;
# agent_0 knows the target is blue, agent_1 that it is medium.
GRID_PICK = [
    ("medium blue", "Medium, BLUE!", 1.0, set()),
    ("The target is a <medium> <blue> one.", "blue medium", 1.0, set()),
    # each repeats its own part only, or keeps its own part and guesses the other wrong
    ("blue", "medium", 0.0, set()),
    ("small blue", "medium red", 0.0, set()),
    # each names only its partner's part: half credit
    ("medium", "blue", 0.5, set()),
    ("medium green", "large blue", 0.5, set()),
    # a colour outside this grid is wrong, not invalid (nor is a colour word it does not read)
    ("medium white", "purple blue", 0.5, set()),
    # two sizes or two colours void the answer; so does the whole grid
    ("medium large blue", "small, medium, large; red, blue, green", 0.0, {"agent_0", "agent_1"}),
    ("", "qzx plor wum", 0.0, {"agent_0", "agent_1"}),
]


@pytest.mark.parametrize("first, second, expected, flagged", GRID_PICK)
def test_grid_pick_answers(first, second, expected, flagged):
    env, (_, rewards, _, _, infos) = answer_step("coop/GridPick-v1", 4, first, second)
    assert env.task["parts"] == ("blue", "medium") and env.answer_text() == "medium blue"
    assert env.prompt_history["agent_0"][1].startswith("Sizes: small, medium, large. Colours: red, blue, green.\n")
    assert rewards == {"agent_0": pytest.approx(expected), "agent_1": pytest.approx(expected)}
    assert {a for a in infos if "invalid_action" in infos[a]} == flagged


@pytest.mark.parametrize("env_id", IDS)
def test_echoing_any_prompt_earns_nothing_even_when_it_holds_the_answer(env_id):
    env = make(env_id)
    first, _ = env.reset(seed=0, options={"task_index": 4})
    # each agent sends its whole prompt: the partner's answer prompt then quotes both parts
    observations, _, _, _, _ = env.step(dict(first))
    right = env.canonical_actions()["agent_0"]
    # the answer prompt holds the right answer's words; restating it (or the first prompt) is no answer
    _, rewards, _, _, infos = env.step({"agent_0": observations["agent_0"], "agent_1": first["agent_1"] + right})
    assert rewards["agent_0"] == 0.0
    assert infos["agent_0"]["invalid_action"] == infos["agent_1"]["invalid_action"] == "the answer restates the prompt"


def test_credit_is_monotone_in_the_parts_it_gets_right():
    subsets = [set(s) for n in range(3) for s in itertools.combinations((0, 1), n)]
    for held in [(0,), (1,), (0, 1)]:
        for smaller, larger in itertools.product(subsets, subsets):
            if smaller <= larger:
                assert credit(smaller, held) <= credit(larger, held), (smaller, larger, held)
        assert credit({0, 1}, held) == 1.0 and credit(set(), held) == 0.0
    assert credit({0}, (0,)) == credit({1}, (1,)) == 0.0  # its own part only: nothing
    assert credit({1}, (0,)) == credit({0}, (1,)) == 0.5 and credit({0}, (0, 1)) == 0.0


# ----- views ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("env_id", IDS)
def test_views_share_instances_and_the_own_view_shows_each_part_of_each(env_id):
    team, full, own = (make(env_id, view=v) for v in VIEWS)
    assert (len(team.possible_agents), team.num_turns) == (2, 2)
    assert all((len(e.possible_agents), e.num_turns) == (1, 1) for e in (full, own))
    assert team.num_tasks == full.num_tasks and own.num_tasks == 2 * team.num_tasks
    for index in range(team.num_tasks):
        first, _ = team.reset(options={"task_index": index})
        whole = full.reset(options={"task_index": index})[0]["agent_0"]
        assert team.task["parts"] == full.task["parts"] and team.task["index"] == full.task["index"] == index
        # the full view is shown what both team members are, the own view what one of them is
        said = [team.known(0), team.known(1)]
        assert said[0] in first["agent_0"] and said[1] not in first["agent_0"]
        assert said[1] in first["agent_1"] and said[0] not in first["agent_1"]
        assert said[0] in whole and said[1] in whole
        for holder in (0, 1):  # own index 2i + p: instance i, part p shown
            half = own.reset(options={"task_index": 2 * index + holder})[0]["agent_0"]
            assert own.task["parts"] == team.task["parts"] and own.task["index"] == index
            assert own.task["own_part"] == holder and own.held_parts("agent_0") == (holder,)
            assert said[holder] in half and said[1 - holder] not in half and "is hidden from you" in half
    again, _ = make(env_id, view="own").reset(options={"task_index": 7})
    assert again == own.reset(options={"task_index": 7})[0]  # deterministic


def best_guess_rate(env_id: str) -> float:
    """The own view's reward for the best guess any lone agent can make from its prompt.

    By enumeration over every own-view instance: the instances are grouped by their prompt (all a policy sees);
    in each group the policy answers with the group's most frequent hidden value (a parity guess is one such
    policy, and no policy does better). It is played through the env over all instances, so the rate is exact.
    """
    own = make(env_id, view="own")
    groups: dict[str, Counter] = {}
    answers: dict[tuple[str, str], str] = {}
    for index in range(own.num_tasks):
        prompt = own.reset(options={"task_index": index})[0]["agent_0"]
        hidden = own.task["parts"][1 - own.task["own_part"]]
        groups.setdefault(prompt, Counter())[hidden] += 1
        answers[prompt, hidden] = own.canonical_actions()["agent_0"]  # shown part right, this hidden value
    guess = {prompt: answers[prompt, counts.most_common(1)[0][0]] for prompt, counts in groups.items()}
    metrics = evaluate_policy(own, lambda obs, envs: [{"agent_0": guess[o["agent_0"]]} for o in obs],
                              episodes=own.num_tasks)
    assert metrics["tasks"] == own.num_tasks  # every instance once
    return metrics["reward_mean"]


@pytest.mark.parametrize("env_id, chance", [("coop/SecretPair-v1", 1 / 12), ("coop/Picnic-v1", 1 / 12),
                                            ("coop/SharedPick-v1", 1 / 3), ("coop/GridPick-v1", 1 / 3)])
def test_the_own_views_prompt_tells_nothing_about_the_hidden_part(env_id, chance):
    # v0 showed part index % 2: a parity guess earned 0.125 on SecretPair and 0.667 on SharedPick
    assert best_guess_rate(env_id) == pytest.approx(chance, abs=1e-12)  # the best guess is a uniform one's
    assert make(env_id, view="own").metadata["partner_info_chance"] == chance


def test_lone_views_are_scored_like_a_team_member_shown_the_same_parts():
    own = make("coop/SecretPair-v1", view="own")
    own.reset(options={"task_index": 0})  # instance 0, red cat; shown part 0 (red)
    for answer, expected in [("red", 0.0), ("cat", 0.5), ("red cat", 1.0), ("red dog", 0.0), ("", 0.0)]:
        twin = own.clone()
        assert twin.step({"agent_0": answer})[1] == {"agent_0": expected}, answer
    own.reset(options={"task_index": 3})  # instance 1, red dog; shown part 1 (dog)
    assert own.task["parts"] == ("red", "dog") and own.held_parts("agent_0") == (1,)
    assert own.step({"agent_0": "red"})[1] == {"agent_0": 0.5}
    full = make("coop/SecretPair-v1", view="full")
    full.reset(options={"task_index": 0})
    for answer, expected in [("red", 0.0), ("cat", 0.0), ("red cat", 1.0)]:  # nothing is hidden from it
        assert full.clone().step({"agent_0": answer})[1] == {"agent_0": expected}, answer


@pytest.mark.parametrize("env_id", IDS)
def test_bad_views_and_fixed_settings_are_refused(env_id):
    with pytest.raises(ValueError, match="view must be one of"):
        make(env_id, view="solo")
    with pytest.raises(ValueError, match=r"\['num_agents'\] are set by the view"):
        make(env_id, num_agents=3)


# ----- information flow --------------------------------------------------------------------------------------


def test_infos_at_the_answer_step_say_what_was_sent_and_whether_the_partner_part_was_used():
    env = make("coop/SecretPair-v1")
    env.reset(options={"task_index": 0})  # red cat
    long = "My colour is red. " + "x" * 300
    _, _, _, _, infos = env.step({"agent_0": long, "agent_1": "cat"})
    assert not any("message_sent" in info for info in infos.values())  # only at the answer step
    observations = env.observations
    assert f'"{long[:200]}"' in observations["agent_1"] and "x" * 183 not in observations["agent_1"]
    cases = [("red cat", "red cat", True, True), ("red", "cat", False, False), ("dog", "blue red", False, False),
             ("red cat", "pink cat", True, False), (observations["agent_0"], "red", False, True)]
    for first, second, used_0, used_1 in cases:
        _, _, _, _, infos = env.clone().step({"agent_0": first, "agent_1": second})
        assert infos["agent_0"]["message_sent"] == long[:200] and infos["agent_1"]["message_sent"] == "cat"
        assert (infos["agent_0"]["used_partner_info"], infos["agent_1"]["used_partner_info"]) == (used_0, used_1)
    pick = make("coop/SharedPick-v1")
    pick.reset(options={"task_index": 4})  # the ring, blue and medium
    pick.step({"agent_0": "", "agent_1": "medium"})
    _, _, _, _, infos = pick.step({"agent_0": "pen", "agent_1": "jar ring"})  # pen is medium; two names
    assert infos["agent_0"]["used_partner_info"] is True and infos["agent_1"]["used_partner_info"] is False
    assert infos["agent_0"]["message_sent"] == ""
    for view in ("full", "own"):
        lone = make("coop/SharedPick-v1", view=view)
        lone.reset(options={"task_index": 4})
        info = lone.step({"agent_0": "ring"})[4]["agent_0"]
        assert "used_partner_info" not in info and "message_sent" not in info


def test_a_tiny_model_team_its_message_reaches_the_partner_and_both_answers_count(tiny_dir):
    team = AgentPolicy([tiny_dir], seed=0, max_new_tokens=8, temperature=1.0, top_p=1.0)
    envs = [make("coop/SecretPair-v1") for _ in range(4)]
    observations = [env.reset(seed=i, options={"task_index": 12 * i + 3})[0] for i, env in enumerate(envs)]
    messages = team(observations, envs)
    assert any(m["agent_0"].strip() for m in messages)
    answer_prompts = [env.step(sent)[0] for env, sent in zip(envs, messages)]
    for sent, prompts, env in zip(messages, answer_prompts, envs):
        for agent, partner in (("agent_0", "agent_1"), ("agent_1", "agent_0")):
            # the partner's answer-turn prompt quotes what this agent sent; its own prompt does not
            assert f'Your partner\'s message: "{sent[agent][:200]}"' in prompts[partner]
            assert prompts[partner] != env.prompt_history[partner][0]
    answers = team(answer_prompts, envs)
    for env, answer in zip(envs, answers):
        right = env.canonical_actions()
        joint = {}
        for label, actions in {"model": answer, "agent_0 right": {**answer, "agent_0": right["agent_0"]},
                               "agent_1 right": {**answer, "agent_1": right["agent_1"]}, "both right": right}.items():
            _, rewards, terminations, _, infos = env.clone().step(actions)
            assert all(terminations.values()) and rewards["agent_0"] == rewards["agent_1"]
            joint[label] = rewards["agent_0"]
        # random text earns nothing; each right answer adds its half of the team's reward
        assert joint == {"model": 0.0, "agent_0 right": 0.5, "agent_1 right": 0.5, "both right": 1.0}
    metrics = evaluate_policy("coop/SharedPick-v1", team, episodes=2)
    assert metrics["reward_mean"] == 0.0 and metrics["episodes"] == 2.0


# ----- the checks every task passes ------------------------------------------------------------------------


@pytest.mark.parametrize("view", VIEWS)
@pytest.mark.parametrize("env_id", IDS)
def test_check_env_and_check_task_on_every_view(env_id, view):
    check_env(make(env_id, view=view))
    means = check_task(make(env_id, view=view), good_policy=lambda env, obs: env.canonical_actions(), episodes=4)
    assert max(v for p, v in means.items() if p != "good") == 0.0 and means["good"] == 1.0


@pytest.mark.parametrize("view", VIEWS)
@pytest.mark.parametrize("env_id", IDS)
def test_select_tasks_and_seeded_resets(env_id, view):
    env = make(env_id, view=view).select_tasks(range(40, 60))
    assert env.num_tasks == 20
    env.reset(options={"task_index": 3})  # index 43 of the view's set: the own view's is instance 21, part 1
    assert env.task["index"] == (21 if view == "own" else 43) and (view != "own" or env.held_parts("agent_0") == (1,))
    first, _ = env.reset(seed=5)
    assert (20 <= env.task["index"] < 30) if view == "own" else (40 <= env.task["index"] < 60)
    assert make(env_id, view=view).select_tasks(range(40, 60)).reset(seed=5)[0] == first


@pytest.mark.parametrize("env_id", IDS)
def test_prompts_are_short_and_registered_in_a_suite(env_id):
    env = make(env_id)
    longest = 0
    for index in range(env.num_tasks):
        first, _ = env.reset(options={"task_index": index})
        second = env.step(env.canonical_actions())[0]
        longest = max(longest, *(len(text.split()) for text in [*first.values(), *second.values()]))
    assert longest <= 60
    assert env_id in suites["private_info"] and env_id in comlrl_env.registry
