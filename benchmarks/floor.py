"""Distance to the limit: our MAGRPO epoch against a bare floor on the same tokens.

    .venv/bin/python benchmarks/floor.py --model benchmarks/_work/tiny [--repeats 3]

The floor is what any implementation must do for the workload (16 prompts x 4
samples x 32 new tokens, 2 agents): per agent, one batched sampling call over
all 64 sequences and one batched forward/backward + AdamW step over the same
tokens. Two floors: with our sampling loop (`ratio`, the one the regression
test guards) and with a bare `model.generate` (`ratio_to_generate_floor`). Our side is one MAGRPO epoch with 8 optimizer steps per agent (as in
the side-by-side benchmark). Prints the median seconds of both and their
ratio; `tests/test_bench_smoke.py` fails when the ratio grows past twice the one
recorded in `benchmarks/recorded_floor.json`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import workload  # noqa: E402
from datasets import Dataset  # noqa: E402

from learners import MAGRPO, MAGRPOConfig  # noqa: E402
from learners.loop.optim import adamw  # noqa: E402
from learners.models.agents import prepare_tokenizer  # noqa: E402
from learners.rollout import GenerationSettings, RolloutEngine  # noqa: E402
from learners.rollout.scoring import completion_logprobs  # noqa: E402


def floor_seconds(model_dir: str, prompts: list[str], agents: int = 2, sampler: str = "lean") -> float:
    """One batched sampling call and one batched forward/backward/step per agent, on the workload's tokens.

    sampler "lean": our sampling loop (`learners.rollout.backends.sampling`); "generate": a bare `model.generate`.
    """
    models = [AutoModelForCausalLM.from_pretrained(model_dir) for _ in range(agents)]
    tok = AutoTokenizer.from_pretrained(model_dir)
    prepare_tokenizer(tok)
    settings = GenerationSettings(max_new_tokens=workload.MAX_NEW_TOKENS, temperature=1.0, top_p=1.0, top_k=None,
                                  generation_kwargs={} if sampler == "lean" else {"top_k": 0})  # forces generate
    engine = RolloutEngine(models, [tok] * agents, settings)
    optimizers = [adamw(m.parameters(), lr=1e-6) for m in models]
    start = time.perf_counter()
    for a in range(agents):
        batch = engine.generate(a, prompts, workload.NUM_GENERATIONS)
        loss = -completion_logprobs(models[a], batch).sum(-1).mean()
        optimizers[a].zero_grad()
        loss.backward()
        optimizers[a].step()
    return time.perf_counter() - start


def ours_seconds(model_dir: str, prompts: list[str]) -> float:
    cfg = MAGRPOConfig(num_train_epochs=1, num_generations=workload.NUM_GENERATIONS,
                       max_new_tokens=workload.MAX_NEW_TOKENS, temperature=1.0, top_p=1.0, top_k=None,
                       rollout_buffer_size=len(prompts), train_batch_size=workload.ROLLOUT_BUFFER_SIZE,
                       shuffle=False, eval_interval=0, verbose=False)
    learner = MAGRPO(agent_model=model_dir, num_agents=2, reward_func=workload.reward_func,
                     train_dataset=Dataset.from_dict({"prompt": prompts}), args=cfg)
    start = time.perf_counter()
    learner.learn()
    return time.perf_counter() - start


def measure(model_dir: str, repeats: int = 3) -> dict[str, float]:
    """Median seconds of ours and of both floors (alternating), and ours / floor for each."""
    prompts = list(workload.PROMPTS)
    ours, lean, bare = [], [], []
    for _ in range(repeats):
        torch.manual_seed(0)
        lean.append(floor_seconds(model_dir, prompts, sampler="lean"))
        torch.manual_seed(0)
        bare.append(floor_seconds(model_dir, prompts, sampler="generate"))
        torch.manual_seed(0)
        ours.append(ours_seconds(model_dir, prompts))
    o, f, g = statistics.median(ours), statistics.median(lean), statistics.median(bare)
    return {"ours_s": round(o, 3), "floor_s": round(f, 3), "ratio": round(o / f, 3),
            "generate_floor_s": round(g, 3), "ratio_to_generate_floor": round(o / g, 3)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True)
    p.add_argument("--repeats", type=int, default=3)
    a = p.parse_args()
    print(json.dumps({"model": os.path.basename(os.path.normpath(a.model)), **measure(a.model, a.repeats)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
