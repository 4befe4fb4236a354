"""The learner behind `tests/fixtures/magrpo-v1/`: a MAGRPO checkpoint written by the library as of
commit 7c3828e (before the learner-core redesign), kept to prove that older checkpoints still resume.

`python tests/old_checkpoint.py` rewrites the fixture; do that only when the checkpoint format changes
on purpose (and then bump `FORMAT_VERSION` and keep a reader for the old one).
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURE = os.path.join(HERE, "fixtures", "magrpo-v1")
MODEL = dict(arch="qwen2", vocab_size=512, hidden_size=32, num_layers=1, num_heads=2, num_kv_heads=1,
             intermediate_size=64, seed=11)
PROMPTS = [{"prompt": p} for p in ("Say hi.", "Count to three.", "Name a colour.", "Write one word.")]


def space_reward(first, second):
    """The share of whitespace in the joint answer."""
    return [sum(ch.isspace() for ch in a + b) / max(len(a + b), 1) for a, b in zip(first, second)]


class Counter:
    """A stateful callback: counts rollouts."""

    def __init__(self):
        self.steps = 0

    def on_step_end(self, learner, metrics):
        self.steps += 1

    def state_dict(self):
        return {"steps": self.steps}

    def load_state_dict(self, state):
        self.steps = state["steps"]


def build(model_dir: str, num_train_epochs: int, callback: Counter | None = None):
    """The fixture's MAGRPO learner: two agents from one tiny model, 4 prompts, 2 rollouts per epoch."""
    from learners.reinforce import MAGRPO, MAGRPOConfig

    args = MAGRPOConfig(num_train_epochs=num_train_epochs, num_generations=2, max_new_tokens=4, temperature=1.0,
                        top_p=1.0, top_k=None, eval_interval=0, verbose=False, rollout_buffer_size=2,
                        train_batch_size=1, agent_learning_rate=1e-2, lr_scheduler_type="linear", seed=3)
    return MAGRPO(agent_model=model_dir, num_agents=2, train_dataset=PROMPTS, reward_func=space_reward,
                  callbacks=[callback or Counter()], args=args)


def main() -> None:
    import torch

    from comlrl_env.testing import tiny_model

    torch.set_num_threads(1)  # as the test process runs
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = str(tiny_model(os.path.join(tmp, "model"), **MODEL))
        learner = build(model_dir, num_train_epochs=1)
        learner.learn(checkpoint_dir=os.path.join(tmp, "ckpt"))
        shutil.rmtree(FIXTURE, ignore_errors=True)
        shutil.copytree(os.path.join(tmp, "ckpt", "checkpoint-1"), FIXTURE)
    print("wrote", FIXTURE, file=sys.stderr)


if __name__ == "__main__":
    main()
