"""Tiny random-weight causal LMs with a real BPE tokenizer, built offline for tests.

``tiny_model(dir)`` writes a folder that ``AutoTokenizer.from_pretrained(dir)`` and
``AutoModelForCausalLM.from_pretrained(dir)`` load like any hub checkpoint, so tests
and examples exercise the same code paths as a real model without a download:

```python
from transformers import AutoModelForCausalLM, AutoTokenizer
from comlrl_env.testing import tiny_model

path = tiny_model(tmp_path / "agent", arch="qwen2")
tokenizer = AutoTokenizer.from_pretrained(path)
model = AutoModelForCausalLM.from_pretrained(path)
```

What the folder holds:

- A byte-level BPE tokenizer trained with the ``tokenizers`` library on about 1 MB of
  the Python standard library's ``.py`` files (the first files in sorted order), so
  every byte string encodes without an unknown token. Special tokens ``<|endoftext|>``
  (pad and bos, id 0), ``<|im_start|>`` (id 1) and ``<|im_end|>`` (eos, id 2); left
  padding; a ChatML chat template. No special token is added by ``encode``.
- A causal LM (Qwen2, Llama or GPT-2) with random weights drawn from ``seed``, tied
  input/output embeddings, float32, a 2048-token context, and ``bos``/``eos``/``pad``
  ids in its config and generation config equal to the tokenizer's.

The tokenizer uses Qwen2's pipeline for every architecture: NFC normalization, Qwen2's
split regex, then byte-level mapping without a regex. With transformers 5 a folder whose
config says ``model_type: qwen2`` reloads as ``Qwen2Tokenizer``, which rebuilds exactly
that pipeline and ignores the one in ``tokenizer.json``; training with any other
pipeline would change the ids after a reload. Llama and GPT-2 folders reload
``tokenizer.json`` as written.

Builds are deterministic: the same arguments give byte-identical files on a given
machine (the corpus is this Python's standard library, so other Python versions give
other vocabularies). The default model (0.2 M parameters) builds in about a second on
two CPU cores. Nothing is cached: the caller picks the folder, and files of the same
names already in it are overwritten.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import sysconfig

import torch
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
from transformers import (
    AutoModelForCausalLM,
    GenerationConfig,
    GPT2Config,
    LlamaConfig,
    PretrainedConfig,
    PreTrainedTokenizerFast,
    Qwen2Config,
)

__all__ = ["tiny_model"]

ARCHS = ("qwen2", "llama", "gpt2")

PAD_TOKEN = "<|endoftext|>"
IM_START = "<|im_start|>"
EOS_TOKEN = "<|im_end|>"
# Order fixes the ids: pad/bos 0, im_start 1, eos 2.
SPECIAL_TOKENS = (PAD_TOKEN, IM_START, EOS_TOKEN)
NUM_BYTES = 256
MIN_VOCAB_SIZE = NUM_BYTES + len(SPECIAL_TOKENS)

MAX_POSITIONS = 2048
CORPUS_CHARS = 1_000_000

# Qwen2's pre-tokenizer split pattern, as Qwen2Tokenizer rebuilds it on load.
QWEN2_SPLIT_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)"
    r"|[^\r\n\p{L}\p{N}]?\p{L}+"
    r"|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+"
    r"|\s+(?!\S)"
    r"|\s+"
)

CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def tiny_model(
    dir: str | os.PathLike,  # noqa: A002 (public name fixed by the API)
    arch: str = "qwen2",
    vocab_size: int = 2048,
    hidden_size: int = 64,
    num_layers: int = 2,
    num_heads: int = 4,
    num_kv_heads: int = 2,
    intermediate_size: int = 128,
    seed: int = 0,
) -> pathlib.Path:
    """Build a tiny random causal LM and its BPE tokenizer into ``dir``, offline.

    Args:
        dir: Folder to write; created if missing. Files of the same names are overwritten.
        arch: Model architecture, one of ``"qwen2"``, ``"llama"``, ``"gpt2"``.
        vocab_size: Rows of the embedding and target size of the tokenizer, counting the
            256 byte tokens and 3 special tokens. If the corpus runs out of merges first,
            the tokenizer is smaller and the extra rows are never produced.
        hidden_size: Width of the model; must be divisible by ``num_heads``.
        num_layers: Number of transformer blocks.
        num_heads: Attention heads per layer.
        num_kv_heads: Key/value heads for grouped-query attention (Qwen2 and Llama);
            must divide ``num_heads``. Ignored for GPT-2.
        intermediate_size: Width of the feed-forward layer.
        seed: Seed for the random weights; the caller's torch RNG state is left untouched.

    Returns:
        The folder, as a ``pathlib.Path``, ready for ``from_pretrained``.

    Raises:
        TypeError: An integer argument is not an ``int``.
        ValueError: An argument is out of range or the arguments don't fit together;
            the message names the value and the fix.
    """
    path = pathlib.Path(dir)
    shape = _Shape(vocab_size, hidden_size, num_layers, num_heads, num_kv_heads, intermediate_size)
    _validate(path, arch, shape, seed)

    tokenizer = _build_tokenizer(vocab_size)
    # The model's config, its generation config and the tokenizer agree on these ids.
    token_ids = {
        "bos_token_id": tokenizer.bos_token_id,
        "eos_token_id": tokenizer.eos_token_id,
        "pad_token_id": tokenizer.pad_token_id,
    }
    config = _model_config(arch, shape, token_ids)
    # A private RNG stream: the weights depend on `seed` only, and the caller's
    # global torch RNG state survives the build.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.generation_config = GenerationConfig(**token_ids)

    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@dataclasses.dataclass(frozen=True)
class _Shape:
    """The size arguments of `tiny_model`, in its order (error messages follow it)."""

    vocab_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    intermediate_size: int


def _validate(path: pathlib.Path, arch: str, shape: _Shape, seed: int) -> None:
    """Raise a clear error for arguments that would fail later or build a broken model."""
    if arch not in ARCHS:
        raise ValueError(f"Unknown arch {arch!r}. Use one of {', '.join(repr(a) for a in ARCHS)}.")
    ints = {**dataclasses.asdict(shape), "seed": seed}
    for name, value in ints.items():
        # bool is an int subclass; True as a size is a mistake, not a 1.
        if not isinstance(value, int) or isinstance(value, bool):
            raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}.")
    for name, value in ints.items():
        if name != "seed" and value < 1:
            raise ValueError(f"{name} must be >= 1, got {value}. Pass a positive int.")
    vocab_size, hidden_size, num_heads, num_kv_heads = (
        shape.vocab_size, shape.hidden_size, shape.num_heads, shape.num_kv_heads
    )
    if vocab_size < MIN_VOCAB_SIZE:
        raise ValueError(
            f"vocab_size must be >= {MIN_VOCAB_SIZE} to hold the {NUM_BYTES} byte tokens plus "
            f"{len(SPECIAL_TOKENS)} special tokens, got {vocab_size}. Use e.g. vocab_size=512 or more."
        )
    if hidden_size % num_heads != 0:
        raise ValueError(
            f"hidden_size must be divisible by num_heads, got hidden_size={hidden_size} and "
            f"num_heads={num_heads}. Use e.g. hidden_size={_next_multiple(hidden_size, num_heads)}."
        )
    if arch != "gpt2":
        head_dim = hidden_size // num_heads
        if head_dim % 2 != 0:
            raise ValueError(
                f"hidden_size // num_heads must be even for rotary embeddings in {arch}, got "
                f"{hidden_size} // {num_heads} = {head_dim}. "
                f"Use e.g. hidden_size={_next_multiple(hidden_size + 1, 2 * num_heads)}."
            )
        if num_heads % num_kv_heads != 0:
            raise ValueError(
                f"num_heads must be a multiple of num_kv_heads for grouped-query attention, got "
                f"num_heads={num_heads} and num_kv_heads={num_kv_heads}. "
                f"Use a num_kv_heads that divides {num_heads}, e.g. num_kv_heads=1."
            )
    if not 0 <= seed < 2**63:
        raise ValueError(f"seed must be in [0, 2**63), got {seed}. Pass a non-negative int.")
    if path.exists() and not path.is_dir():
        raise ValueError(f"dir must be a folder, but {str(path)!r} is an existing file. Pass a folder path.")


def _next_multiple(value: int, factor: int) -> int:
    """The smallest multiple of ``factor`` that is >= ``value``."""
    return -(-value // factor) * factor


def _corpus(max_chars: int = CORPUS_CHARS) -> list[str]:
    """About ``max_chars`` characters of the standard library's top-level ``.py`` files.

    Sorted paths make the choice, and so the trained vocabulary, deterministic.
    """
    stdlib = pathlib.Path(sysconfig.get_paths()["stdlib"])
    texts: list[str] = []
    total = 0
    for file in sorted(stdlib.glob("*.py")):
        try:
            text = file.read_bytes().decode("utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        texts.append(text)
        total += len(text)
        if total >= max_chars:
            break
    if total == 0:
        raise RuntimeError(
            f"Found no readable .py files in the standard library at {str(stdlib)!r}; "
            "tiny_model trains its tokenizer on them. Use a Python install with its source files."
        )
    return texts


def _build_tokenizer(vocab_size: int) -> PreTrainedTokenizerFast:
    """Train a byte-level BPE with Qwen2's pipeline and wrap it as a fast tokenizer."""
    backend = Tokenizer(models.BPE(unk_token=None, fuse_unk=False, byte_fallback=False))
    backend.normalizer = normalizers.NFC()
    backend.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN2_SPLIT_PATTERN), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        # All 256 byte symbols, even those absent from the corpus: nothing is unknown.
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    backend.train_from_iterator(_corpus(), trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token=PAD_TOKEN,
        eos_token=EOS_TOKEN,
        pad_token=PAD_TOKEN,
        # Qwen2Tokenizer defaults unk to <|endoftext|> on reload; set it here so every
        # arch and the in-memory tokenizer agree. Byte-level BPE never emits it.
        unk_token=PAD_TOKEN,
        additional_special_tokens=[IM_START],
        padding_side="left",
        model_max_length=MAX_POSITIONS,
        chat_template=CHATML_TEMPLATE,
    )


def _model_config(arch: str, shape: _Shape, token_ids: dict[str, int]) -> PretrainedConfig:
    """The ``transformers`` config for ``arch`` with the given shape and token ids."""
    if arch == "gpt2":
        return GPT2Config(
            vocab_size=shape.vocab_size,
            n_positions=MAX_POSITIONS,
            n_embd=shape.hidden_size,
            n_layer=shape.num_layers,
            n_head=shape.num_heads,
            n_inner=shape.intermediate_size,
            tie_word_embeddings=True,
            **token_ids,
        )
    config_class = Qwen2Config if arch == "qwen2" else LlamaConfig
    return config_class(
        vocab_size=shape.vocab_size,
        hidden_size=shape.hidden_size,
        intermediate_size=shape.intermediate_size,
        num_hidden_layers=shape.num_layers,
        num_attention_heads=shape.num_heads,
        num_key_value_heads=shape.num_kv_heads,
        max_position_embeddings=MAX_POSITIONS,
        tie_word_embeddings=True,
        **token_ids,
    )
