"""`rewards.calling.call_reward_function`: every calling convention, return type and user error."""

from __future__ import annotations

import functools
import inspect
import math
import re

import numpy as np
import pytest
import torch

from rewards.calling import RewardFunctionError, call_reward_function

# A batch of B=2 joint actions: one list per agent, one prompt and one dataset row per joint action.
C0, C1, C2 = ["a0", "a1"], ["b0", "b1"], ["c0", "c1"]
PROMPTS = ["p0", "p1"]
ITEMS = [{"id": 0}, {"id": 1}]


def recorded(fn):
    """Wrap `fn` so each call stores its arguments, bound to `fn`'s parameter names, in `wrapper.calls`.

    `functools.wraps` sets `__wrapped__`, so `inspect.signature` (and therefore the dispatch under test)
    sees `fn`'s own signature.
    """
    signature = inspect.signature(fn)

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        wrapper.calls.append(dict(signature.bind(*args, **kwargs).arguments))
        return fn(*args, **kwargs)

    wrapper.calls = []
    return wrapper


# ----- signatures: what each one receives -------------------------------------------------------------


def two_lists(c0, c1):
    return [1.0] * len(c0)


def three_lists(c0, c1, c2):
    return [1.0] * len(c0)


def prompts_first(prompts, c0, c1):
    return [1.0] * len(c0)


def unnamed_first(texts, c0, c1):
    return [1.0] * len(c0)


def one_list_of_lists(completions):
    return [1.0] * len(completions[0])


def star_args(*lists):
    return [1.0] * len(lists[0])


def star_args_and_keywords(*lists, prompts=None, batch_items=None):
    return [1.0] * len(lists[0])


def prompts_then_star_args(prompts, *lists):
    return [1.0] * len(lists[0])


def single(completions):
    return [1.0] * len(completions)


def single_with_prompts(prompts, completions):
    return [1.0] * len(completions)


def single_prompts_last(completions, prompts):
    return [1.0] * len(completions)


def keyword_only_prompts(c0, c1, *, prompts):
    return [1.0] * len(c0)


def batch_items_param(c0, c1, batch_items):
    return [1.0] * len(c0)


def both_keywords(c0, c1, prompts=None, batch_items=None):
    return [1.0] * len(c0)


def prompts_with_default(c0, c1, prompts=None):
    return [1.0] * len(c0)


def required_prompts_last(c0, c1, prompts):
    return [1.0] * len(c0)


def var_keywords(c0, c1, **kwargs):
    return [1.0] * len(c0)


def extra_default(c0, c1, target=2.0):
    return [1.0] * len(c0)


def list_of_lists_and_keywords(completions, **kwargs):
    return [1.0] * len(completions[0])


class Scorer:
    """A callable class instance: its signature is `__call__`'s without `self`."""

    def __call__(self, c0, c1, prompts=None):
        return [1.0] * len(c0)


def scaled(c0, c1, scale):
    return [scale] * len(c0)


SIGNATURE_CASES = [
    # one positional list per agent, N=2; prompts/batch_items not declared, so not passed
    pytest.param(two_lists, [C0, C1], {"c0": C0, "c1": C1}, id="N=2 positional lists"),
    # one positional list per agent, N=3
    pytest.param(three_lists, [C0, C1, C2], {"c0": C0, "c1": C1, "c2": C2}, id="N=3 positional lists"),
    # N+1 positionals: prompts first, then one list per agent
    pytest.param(prompts_first, [C0, C1], {"prompts": PROMPTS, "c0": C0, "c1": C1}, id="N+1 prompts first"),
    # N+1 positionals: the first gets the prompts whatever its name
    pytest.param(unnamed_first, [C0, C1], {"texts": PROMPTS, "c0": C0, "c1": C1}, id="N+1 any first name"),
    # N+1 positionals with N=3
    pytest.param(
        lambda prompts, x, y, z: [1.0, 1.0], [C0, C1, C2], {"prompts": PROMPTS, "x": C0, "y": C1, "z": C2},
        id="N=3 N+1 prompts first",
    ),
    # one positional and N>1: a single list of the N lists
    pytest.param(one_list_of_lists, [C0, C1], {"completions": [C0, C1]}, id="one positional list of lists"),
    # *args: one list per agent, nothing else (no keywords declared)
    pytest.param(star_args, [C0, C1, C2], {"lists": (C0, C1, C2)}, id="*args"),
    # *args plus declared keywords: both keywords passed
    pytest.param(
        star_args_and_keywords, [C0, C1],
        {"lists": (C0, C1), "prompts": PROMPTS, "batch_items": ITEMS}, id="*args with keywords",
    ),
    # a positional named prompts before *args gets the prompts
    pytest.param(
        prompts_then_star_args, [C0, C1], {"prompts": PROMPTS, "lists": (C0, C1)}, id="prompts then *args",
    ),
    # a single agent, one positional: its list
    pytest.param(single, [C0], {"completions": C0}, id="N=1 one positional"),
    # a single agent, two positionals: prompts then its list
    pytest.param(single_with_prompts, [C0], {"prompts": PROMPTS, "completions": C0}, id="N=1 two positionals"),
    # a single agent whose second positional is named prompts: by keyword, not swapped
    pytest.param(single_prompts_last, [C0], {"completions": C0, "prompts": PROMPTS}, id="N=1 prompts last"),
    # keyword-only prompts: passed by keyword
    pytest.param(keyword_only_prompts, [C0, C1], {"c0": C0, "c1": C1, "prompts": PROMPTS}, id="kw-only prompts"),
    # a batch_items parameter (even without a default) is a keyword, not a completion list
    pytest.param(batch_items_param, [C0, C1], {"c0": C0, "c1": C1, "batch_items": ITEMS}, id="batch_items param"),
    # both keywords declared with defaults: both passed by keyword
    pytest.param(
        both_keywords, [C0, C1], {"c0": C0, "c1": C1, "prompts": PROMPTS, "batch_items": ITEMS},
        id="prompts and batch_items keywords",
    ),
    # a prompts parameter with a default is a keyword, not the N+1-th positional
    pytest.param(
        prompts_with_default, [C0, C1], {"c0": C0, "c1": C1, "prompts": PROMPTS}, id="prompts with default",
    ),
    # a required prompts parameter after the lists is filled by keyword, not given the first list
    pytest.param(
        required_prompts_last, [C0, C1], {"c0": C0, "c1": C1, "prompts": PROMPTS}, id="required prompts last",
    ),
    # **kwargs receives both keywords
    pytest.param(
        var_keywords, [C0, C1], {"c0": C0, "c1": C1, "kwargs": {"prompts": PROMPTS, "batch_items": ITEMS}},
        id="**kwargs",
    ),
    # an unrelated parameter with a default is left to its default
    pytest.param(extra_default, [C0, C1], {"c0": C0, "c1": C1}, id="extra parameter with default"),
    # one positional plus **kwargs: a list of lists and both keywords
    pytest.param(
        list_of_lists_and_keywords, [C0, C1],
        {"completions": [C0, C1], "kwargs": {"prompts": PROMPTS, "batch_items": ITEMS}},
        id="list of lists with **kwargs",
    ),
    # a callable class instance: dispatch on __call__ without self
    pytest.param(Scorer(), [C0, C1], {"c0": C0, "c1": C1, "prompts": PROMPTS}, id="callable instance"),
    # functools.partial binding a keyword: the remaining two positionals are the lists
    # (the record shows the partial's own parameters; the bound ones are not recorded)
    pytest.param(functools.partial(scaled, scale=0.5), [C0, C1], {"c0": C0, "c1": C1}, id="partial keyword"),
    # functools.partial binding the first positional: prompts_first minus prompts takes N lists
    pytest.param(functools.partial(prompts_first, ["fixed"]), [C0, C1], {"c0": C0, "c1": C1}, id="partial positional"),
]


@pytest.mark.parametrize("fn, lists, expected", SIGNATURE_CASES)
def test_calling_convention(fn, lists, expected):
    spy = recorded(fn)
    out = call_reward_function(spy, lists, prompts=PROMPTS, batch_items=ITEMS, where="test")
    assert spy.calls == [expected]
    assert len(out) == len(lists[0]) and all(len(row) == len(lists) for row in out)


def test_partial_bound_values_reach_the_function():
    # the partial's bound keyword is what the function returns
    assert call_reward_function(functools.partial(scaled, scale=0.5), [C0, C1]) == [[0.5, 0.5], [0.5, 0.5]]


def test_keywords_left_out_when_not_given():
    # prompts / batch_items are only passed when the caller has them
    spy = recorded(both_keywords)
    call_reward_function(spy, [C0, C1])
    assert spy.calls == [{"c0": C0, "c1": C1}]
    spy = recorded(var_keywords)
    call_reward_function(spy, [C0, C1], prompts=PROMPTS)
    assert spy.calls == [{"c0": C0, "c1": C1, "kwargs": {"prompts": PROMPTS}}]


def test_lists_are_copies():
    # the function may mutate what it gets without touching the caller's lists
    lists = [["x"], ["y"]]

    def mutate(c0, c1):
        c0.append("z")
        return 1.0

    call_reward_function(mutate, lists)
    assert lists == [["x"], ["y"]]


def test_callable_without_signature():
    # a callable inspect cannot read gets one positional list per agent
    class NoSignature:
        __signature__ = property(lambda self: (_ for _ in ()).throw(ValueError("no signature")))

        def __call__(self, *lists):
            return [float(len(lists))] * len(lists[0])

    assert call_reward_function(NoSignature(), [["a"], ["b"], ["c"]], prompts=["p"]) == [[3.0, 3.0, 3.0]]


def test_unequal_list_lengths_rejected():
    with pytest.raises(ValueError, match=r"agent_completions.*same length.*\[2, 1\]"):
        call_reward_function(two_lists, [["a", "b"], ["c"]])


# ----- return values ----------------------------------------------------------------------------------


RETURN_CASES = [
    # a Python float for a batch of one: the joint reward of both agents
    pytest.param(0.5, 1, 2, [[0.5, 0.5]], id="float"),
    # an int is a number too
    pytest.param(3, 1, 2, [[3.0, 3.0]], id="int"),
    # a negative float
    pytest.param(-1.25, 1, 3, [[-1.25, -1.25, -1.25]], id="negative float N=3"),
    # a list of B values: one joint reward per joint action
    pytest.param([0.5, 1.5], 2, 2, [[0.5, 0.5], [1.5, 1.5]], id="list B=2"),
    # a tuple of B values
    pytest.param((0.0, 1.0, 2.0), 3, 2, [[0.0, 0.0], [1.0, 1.0], [2.0, 2.0]], id="tuple B=3"),
    # a numpy array of B values
    pytest.param(np.array([0.25, 0.75]), 2, 2, [[0.25, 0.25], [0.75, 0.75]], id="numpy array"),
    # a numpy int array
    pytest.param(np.array([1, 0], dtype=np.int64), 2, 2, [[1.0, 1.0], [0.0, 0.0]], id="numpy int array"),
    # a (B, 1) numpy array is flattened like a tensor
    pytest.param(np.array([[0.25], [0.75]]), 2, 2, [[0.25, 0.25], [0.75, 0.75]], id="numpy (B,1) array"),
    # a numpy float32 scalar (0.25 is exact in float32)
    pytest.param(np.float32(0.25), 1, 2, [[0.25, 0.25]], id="numpy float32 scalar"),
    # a numpy int64 scalar
    pytest.param(np.int64(2), 1, 2, [[2.0, 2.0]], id="numpy int64 scalar"),
    # a 0-d numpy array
    pytest.param(np.array(0.5), 1, 2, [[0.5, 0.5]], id="numpy 0-d array"),
    # a 0-d torch tensor
    pytest.param(torch.tensor(0.5), 1, 2, [[0.5, 0.5]], id="torch 0-d"),
    # a 1-d torch tensor of B values
    pytest.param(torch.tensor([0.5, 1.5]), 2, 2, [[0.5, 0.5], [1.5, 1.5]], id="torch 1-d"),
    # a tensor that requires grad is detached
    pytest.param(torch.tensor([0.5, 1.5], requires_grad=True) * 1, 2, 2, [[0.5, 0.5], [1.5, 1.5]], id="torch grad"),
    # a bfloat16 tensor (0.5 is exact in bfloat16)
    pytest.param(torch.tensor([0.5], dtype=torch.bfloat16), 1, 2, [[0.5, 0.5]], id="torch bfloat16"),
    # a (B, 1) tensor is flattened
    pytest.param(torch.tensor([[1.0], [2.0]]), 2, 2, [[1.0, 1.0], [2.0, 2.0]], id="torch (B,1)"),
    # a batch of one with N values: one reward per agent
    pytest.param([0.2, 0.8], 1, 2, [[0.2, 0.8]], id="per-agent list N=2"),
    # per-agent values from a numpy array, N=3
    pytest.param(np.array([1.0, 2.0, 3.0]), 1, 3, [[1.0, 2.0, 3.0]], id="per-agent numpy N=3"),
    # per-agent values from a tensor, N=2
    pytest.param(torch.tensor([0.0, 1.0]), 1, 2, [[0.0, 1.0]], id="per-agent tensor"),
    # one list value for a batch of one: the joint reward
    pytest.param([0.7], 1, 2, [[0.7, 0.7]], id="one-element list joint"),
    # B == N: B values are per joint action (the joint reading wins)
    pytest.param([1.0, 2.0], 2, 2, [[1.0, 1.0], [2.0, 2.0]], id="B equals N reads as joint"),
    # a single agent, batch of one
    pytest.param(0.9, 1, 1, [[0.9]], id="single agent"),
    # a fraction is a Real number
    pytest.param(__import__("fractions").Fraction(1, 4), 1, 2, [[0.25, 0.25]], id="Fraction"),
]


@pytest.mark.parametrize("value, batch, num_agents, expected", RETURN_CASES)
def test_return_types(value, batch, num_agents, expected):
    lists = [[f"agent{a}-{b}" for b in range(batch)] for a in range(num_agents)]
    out = call_reward_function(lambda *lists: value, lists)
    assert out == expected
    assert all(type(v) is float for row in out for v in row)


# ----- user errors ------------------------------------------------------------------------------------


def raises_zero_division(c0, c1):
    return 1 / 0


def make_returner(value):
    def returns_bad_value(c0, c1):
        return value

    return returns_bad_value


BAD_RETURNS = [
    # three values for one joint action of two agents: neither 1 nor N
    pytest.param([0.1, 0.2, 0.3], r"returned 3 values.*\[0\.1, 0\.2, 0\.3\]", id="wrong count"),
    # no value at all
    pytest.param([], r"returned 0 values.*\[\]", id="empty list"),
    # NaN
    pytest.param(float("nan"), r"nan.*finite", id="nan"),
    # +inf
    pytest.param(float("inf"), r"inf.*finite", id="inf"),
    # -inf inside a list
    pytest.param([0.5, float("-inf")], r"-inf.*finite", id="-inf in list"),
    # NaN inside a numpy array
    pytest.param(np.array([np.nan]), r"nan.*finite", id="nan numpy"),
    # NaN inside a tensor
    pytest.param(torch.tensor([float("nan")]), r"nan.*finite", id="nan tensor"),
    # a string, even a numeric one
    pytest.param("0.5", r"returned '0\.5'", id="string"),
    # None (a forgotten return)
    pytest.param(None, r"returned None", id="None"),
    # a bool is not a reward
    pytest.param(True, r"returned True", id="bool"),
    # a list of bools
    pytest.param([True, False][:1], r"non-number True", id="list of bool"),
    # a numpy bool
    pytest.param(np.bool_(True), r"True", id="numpy bool"),
    # a nested list
    pytest.param([[1.0, 2.0]], r"non-number \[1\.0, 2\.0\]", id="nested list"),
    # a string inside a list
    pytest.param(["1.0"], r"non-number '1\.0'", id="string in list"),
    # a dict
    pytest.param({"agent_0": 1.0}, r"returned \{'agent_0': 1\.0\}", id="dict"),
    # an int too large for a float
    pytest.param(10**400, r"finite", id="huge int"),
]


@pytest.mark.parametrize("value, pattern", BAD_RETURNS)
def test_bad_return_raises(value, pattern):
    with pytest.raises(RewardFunctionError) as info:
        call_reward_function(make_returner(value), [["x"], ["y"]], where="dataset index 7")
    message = str(info.value)
    assert "make_returner.<locals>.returns_bad_value" in message  # the function
    assert "dataset index 7" in message  # the where context
    assert re.search(pattern, message, re.S), message  # the value


def test_function_that_raises_is_chained():
    with pytest.raises(RewardFunctionError, match=r"raises_zero_division raised ZeroDivisionError.*on dataset index 3"):
        call_reward_function(raises_zero_division, [["x"], ["y"]], where="dataset index 3")
    try:
        call_reward_function(raises_zero_division, [["x"], ["y"]])
    except RewardFunctionError as exc:
        assert isinstance(exc.__cause__, ZeroDivisionError)


def test_signature_mismatch_is_a_reward_function_error():
    # four required positionals for two agents: the call fails and names the function
    def four(a, b, c, d):
        return 1.0

    with pytest.raises(RewardFunctionError, match=r"four raised TypeError") as info:
        call_reward_function(four, [["x"], ["y"]])
    assert isinstance(info.value.__cause__, TypeError)


def test_per_agent_values_need_a_batch_of_one():
    # N values are per agent only for a single joint action; with B=3 they are the wrong count
    with pytest.raises(RewardFunctionError, match=r"returned 2 values.*batch of 3.*2 agents"):
        call_reward_function(lambda c0, c1: [0.0, 1.0], [["a", "b", "c"], ["d", "e", "f"]])


def test_reward_function_error_is_a_value_error():
    assert issubclass(RewardFunctionError, ValueError)


def test_no_where_context():
    with pytest.raises(RewardFunctionError) as info:
        call_reward_function(make_returner(None), [["x"], ["y"]])
    assert " on " not in str(info.value)


@pytest.mark.parametrize(
    "fn, name",
    [
        # a callable instance is named by its class
        (lambda: type("Judge", (), {"__call__": lambda self, c0, c1: None})(), "Judge"),
        # a partial is named by the function it wraps
        (lambda: functools.partial(make_returner(None)), "returns_bad_value"),
    ],
)
def test_error_names_instances_and_partials(fn, name):
    with pytest.raises(RewardFunctionError, match=name):
        call_reward_function(fn(), [["x"], ["y"]], where="w")


def test_nan_check_does_not_swallow_finite_extremes():
    # the largest finite float is a valid (if odd) reward
    assert call_reward_function(lambda c: 1.7976931348623157e308, [["x"]]) == [[1.7976931348623157e308]]
    assert math.isfinite(call_reward_function(lambda c: -1e300, [["x"]])[0][0])


def test_an_ambiguous_first_positional_is_warned_about():
    """f(a, b, c) for two agents silently received the prompts in `a`; now a warning states the rule."""
    def judge(question, first, second):
        return [1.0] * len(first)

    with pytest.warns(UserWarning, match=r"'judge' takes 3 positional parameters for 2 agents, so its first, "
                                         r"'question', receives the prompts"):
        call_reward_function(judge, [C0, C1], prompts=PROMPTS)


def test_a_first_positional_named_prompts_is_not_ambiguous(recwarn):
    call_reward_function(lambda prompts, c0, c1: [1.0] * len(c0), [C0, C1], prompts=PROMPTS)
    assert not [w for w in recwarn if "positional parameters" in str(w.message)]
