"""Peak memory of N homogeneous LoRA agents sharing one base vs one fully fine-tuned agent.

    .venv/bin/python benchmarks/lora_memory.py --model benchmarks/_work/qwen31m [--agents 4]

Each configuration runs in its own process on the shared workload (16 prompts x
4 samples x 32 new tokens, one MAGRPO epoch) and reports its peak RSS; the
goal is N LoRA agents within 1.5x of one full agent.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import workload  # noqa: E402


def run(model: str, agents: int, lora: bool) -> dict:
    import datasets
    import torch

    from learners import MAGRPO, MAGRPOConfig

    torch.manual_seed(0)
    torch.set_num_threads(workload.NUM_THREADS)
    cfg = MAGRPOConfig(num_train_epochs=1, num_generations=workload.NUM_GENERATIONS,
                       max_new_tokens=workload.MAX_NEW_TOKENS, temperature=1.0, top_p=1.0, top_k=None,
                       rollout_buffer_size=len(workload.PROMPTS), train_batch_size=workload.ROLLOUT_BUFFER_SIZE,
                       eval_interval=0, verbose=False,
                       peft_config={"r": 16, "lora_alpha": 32, "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"],
                                    "lora_dropout": 0.0} if lora else None)
    prompts = datasets.Dataset.from_dict({"prompt": list(workload.PROMPTS)})

    def reward(*completions):
        return [sum(len(c) for c in joint) / 100 for joint in zip(*completions)]

    learner = MAGRPO(agent_model=model, num_agents=agents, reward_func=reward, train_dataset=prompts, args=cfg)
    learner.learn()
    return {"agents": agents, "lora": lora, "peak_rss_gb": round(workload.peak_rss_gb(), 3)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True)
    p.add_argument("--agents", type=int, default=4)
    p.add_argument("--child", nargs=2, metavar=("AGENTS", "LORA"))
    a = p.parse_args()
    if a.child:
        print(json.dumps(run(a.model, int(a.child[0]), a.child[1] == "1")))
        return 0
    results = []
    for agents, lora in ((1, False), (a.agents, True)):
        out = subprocess.run([sys.executable, __file__, "--model", a.model, "--child", str(agents), str(int(lora))],
                             capture_output=True, text=True, check=True)
        results.append(json.loads(out.stdout.strip().splitlines()[-1]))
    full, shared = results
    ratio = shared["peak_rss_gb"] / full["peak_rss_gb"]
    print(f"| {os.path.basename(a.model)} | 1 full agent: {full['peak_rss_gb']:.2f} GB | {a.agents} LoRA agents, one "
          f"base: {shared['peak_rss_gb']:.2f} GB | ratio {ratio:.2f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
