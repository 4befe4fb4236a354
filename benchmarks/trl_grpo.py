"""The TRL side of the single-agent comparison: Hugging Face TRL's GRPOTrainer.

Run with the TRL venv (bash benchmarks/setup_trl_venv.sh):

    benchmarks/.venv-trl/bin/python benchmarks/trl_grpo.py --model benchmarks/_work/tiny [--wait-quiet 60]

The single-agent form of the shared workload (`workload.py`), the same work as
`ours.py --num-agents 1`: the 16 workload prompts (plain text, no chat template) x 4
samples (`num_generations=4`) x 32 new tokens (`max_completion_length=32`),
one epoch, temperature 1.0, top_p 1.0, no top_k; fp32 on CPU, no vLLM,
`beta=0` (no reference model), gradient checkpointing off.
`per_device_train_batch_size=8`, `gradient_accumulation_steps=1`,
`steps_per_generation=1`: TRL's `generation_batch_size` is then
8 x 1 process x 1 = 8 completions (2 prompts x 4 samples) per generate call,
and each generation batch is one optimizer step -> 8 optimizer steps, 64
completions. The reward is the one-agent reward of `ours.py --num-agents 1`
(completion length / 100). Times `trainer.train()` only, counts optimizer
steps (wrapped `optimizer.step`, cross-checked with `state.global_step`) and
completions (reward-function calls), and prints one JSON line
(`workload.emit_result(side="trl", ...)`).
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
import tempfile
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import workload  # noqa: E402

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("WANDB_DISABLED", "true")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
# transformers 5 renames gradient_checkpointing; the FutureWarning is noise here.
warnings.filterwarnings("ignore", category=FutureWarning)

PER_STEP = 8  # completions per optimizer step (2 prompts x 4 samples)


def run_one(model_dir: str, wait_quiet: float = 0.0) -> dict:
    import datasets
    import torch
    import transformers
    import trl
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    torch.manual_seed(workload.SEED)
    torch.set_num_threads(int(os.environ.get("BENCH_THREADS", workload.NUM_THREADS)))
    transformers.utils.logging.disable_progress_bar()
    datasets.disable_progress_bars()

    n_completions = [0]
    reward_calls = [0]

    def length_reward(prompts, completions, **kwargs):
        """One-agent reward: completion length / 100. TRL calls it by keyword as
        f(prompts=..., completions=..., completion_ids=..., ...)."""
        n_completions[0] += len(completions)
        reward_calls[0] += 1
        return [len(c) / 100 for c in completions]

    class StepCounter(TrainerCallback):
        def __init__(self):
            self.global_steps = 0
            self.wrapped = False

        def on_step_begin(self, args, state, control, optimizer=None, **kw):
            # Wrap the optimizer's step once it exists (created inside train()).
            if not self.wrapped and optimizer is not None:
                _wrap(optimizer)
                self.wrapped = True

        def on_step_end(self, args, state, control, **kw):
            self.global_steps = state.global_step

    opt_steps = [0]

    def _wrap(optimizer):
        original = optimizer.step

        # functools.wraps keeps the LR scheduler's marker on step(), so the
        # scheduler does not warn that step() was overridden.
        @functools.wraps(original)
        def counted(*a, **kw):
            opt_steps[0] += 1
            return original(*a, **kw)

        optimizer.step = counted

    out_dir = tempfile.mkdtemp(prefix="trl_grpo_bench_")
    cfg_kwargs = dict(
        output_dir=out_dir,
        num_generations=workload.NUM_GENERATIONS,
        max_completion_length=workload.MAX_NEW_TOKENS,
        temperature=workload.TEMPERATURE,
        top_p=workload.TOP_P,
        top_k=0 if workload.TOP_K is None else workload.TOP_K,
        per_device_train_batch_size=PER_STEP,
        gradient_accumulation_steps=1,
        steps_per_generation=1,
        num_train_epochs=workload.NUM_TRAIN_EPOCHS,
        beta=0.0,
        use_vllm=False,
        gradient_checkpointing=False,
        bf16=False,
        fp16=False,
        use_cpu=True,
        report_to="none",
        logging_strategy="no",
        save_strategy="no",
        eval_strategy="no",
        disable_tqdm=True,
        seed=workload.SEED,
        dataloader_num_workers=0,
        shuffle_dataset=False,
    )
    cfg = GRPOConfig(**cfg_kwargs)

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    counter = StepCounter()
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=length_reward,
        args=cfg,
        train_dataset=datasets.Dataset.from_dict({"prompt": list(workload.PROMPTS)}),
        processing_class=tokenizer,
        callbacks=[counter],
    )

    timing = workload.timed(trainer.train, wait_quiet)

    return workload.emit_result(
        side="trl",
        learner="GRPOTrainer",
        model=os.path.basename(os.path.normpath(model_dir)),
        optimizer_steps_per_agent=opt_steps[0],
        completions_per_agent=n_completions[0],
        num_agents=1,
        global_step=trainer.state.global_step,
        generation_batch_size=getattr(cfg, "generation_batch_size", None),
        reward_calls=reward_calls[0],
        model_dir=os.path.abspath(model_dir),
        params=sum(p.numel() for p in trainer.model.parameters()),
        library=f"trl {trl.__version__}",
        torch=torch.__version__,
        transformers=transformers.__version__,
        threads=torch.get_num_threads(),
        **timing,
    )


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True, help="local HF model dir")
    p.add_argument("--wait-quiet", type=float, default=0.0, metavar="SECONDS")
    a = p.parse_args(argv)
    run_one(a.model, wait_quiet=a.wait_quiet)
    return 0


if __name__ == "__main__":
    sys.exit(main())
