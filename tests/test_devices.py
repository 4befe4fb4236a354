"""Device placement on a CPU machine: device specs, "auto", critic devices, and the per-agent thread helper."""

from __future__ import annotations

import threading

import pytest
import torch
from datasets import Dataset

from learners import IAC, MAGRPO, IACConfig, MAGRPOConfig
from learners.parallel.placement import distinct_accelerators, per_agent, resolve_devices

FAST = dict(num_train_epochs=1, num_generations=2, max_new_tokens=2, eval_interval=0, verbose=False)
data = Dataset.from_list([{"prompt": "q"}, {"prompt": "r"}])


def zero(a, b):
    return [0.0] * len(a)


@pytest.mark.parametrize("spec, expected", [
    (None, ["cpu", "cpu"]),  # no GPU here: the default is the CPU
    ("auto", ["cpu", "cpu"]),
    ("cpu", ["cpu", "cpu"]),  # one string for every agent
    (["cpu"], ["cpu", "cpu"]),  # a one-element list is broadcast
    (["cpu", "cpu"], ["cpu", "cpu"]),
])
def test_device_specs(spec, expected):
    assert [str(d) for d in resolve_devices(spec, 2)] == expected


def test_wrong_device_list_length_is_refused():
    with pytest.raises(ValueError, match="agent_devices has 3 entries for 2 agents"):
        resolve_devices(["cpu"] * 3, 2)


def test_learners_place_agents_and_critics(tiny_dir):
    learner = MAGRPO(agent_model=tiny_dir, num_agents=2, reward_func=zero, train_dataset=data,
                     args=MAGRPOConfig(agent_devices=["cpu", "cpu"], **FAST))
    assert all(a.device.type == "cpu" for a in learner.agents)
    iac = IAC(agent_model=tiny_dir, num_agents=2, critic_model=tiny_dir, reward_func=zero, train_dataset=data,
              args=IACConfig(agent_devices="auto", critic_devices=["cpu"], **{**FAST, "num_generations": 1}))
    assert all(c.device.type == "cpu" for c in iac.critics)
    with pytest.raises(ValueError, match="critic_devices has 3 entries for 2 critics"):
        IAC(agent_model=tiny_dir, num_agents=2, critic_model=tiny_dir, reward_func=zero, train_dataset=data,
            args=IACConfig(critic_devices=["cpu"] * 3, **{**FAST, "num_generations": 1}))


def test_only_distinct_accelerators_run_concurrently():
    assert not distinct_accelerators([torch.device("cpu"), torch.device("cpu")])
    assert not distinct_accelerators(["cuda:0", "cuda:0"])  # one GPU: agents take turns
    assert not distinct_accelerators(["cuda:0"])
    assert distinct_accelerators(["cuda:0", "cuda:1"])


def test_per_agent_keeps_agent_order_in_threads():
    seen = set()

    def work(a):
        seen.add(threading.get_ident())
        return a * 10

    assert per_agent(work, 4, concurrent=True) == [0, 10, 20, 30]
    assert per_agent(work, 3, concurrent=False) == [0, 10, 20]


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error of a CPU-only machine")
def test_a_cuda_device_on_a_cpu_only_machine_fails_at_construction(tiny_dir):
    """The seed's reward_model_device="cuda:1" used to fail deep inside train() with an AssertionError."""
    from learners import MARLHF, MARLHFConfig

    with pytest.raises(ValueError, match="reward_model_device='cuda:1' but CUDA is not available on this machine"):
        MARLHF(agent_model="/no/model/needed/yet", num_agents=2, reward_func=zero, train_dataset=data,
               args=MARLHFConfig(reward_model_device="cuda:1", **FAST))
    with pytest.raises(ValueError, match="agent_devices='cuda:0' but CUDA is not available"):
        MAGRPO(agent_model=tiny_dir, num_agents=2, reward_func=zero, train_dataset=data,
               args=MAGRPOConfig(agent_devices="cuda:0", **FAST))
    with pytest.raises(ValueError, match="agent_devices='gpu' is not a device"):
        resolve_devices("gpu", 2)
