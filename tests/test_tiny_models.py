"""Tiny offline models: they reload through the Auto classes with the same ids, and build deterministically."""

from __future__ import annotations

import pathlib
import unicodedata

import pytest
import torch
from tokenizers import Tokenizer
from transformers import AutoModelForCausalLM, AutoTokenizer

from comlrl_env.testing.tiny_models import tiny_model

ARCHS = ["qwen2", "llama", "gpt2"]
VOCAB_SIZE = 1024
MODEL_CLASS = {"qwen2": "Qwen2ForCausalLM", "llama": "LlamaForCausalLM", "gpt2": "GPT2LMHeadModel"}
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]

TEXTS = [
    "",  # empty
    "Hello, world!",  # plain ASCII
    "def add(a, b):\n    return a + b  # sum\n\n\tclass X: pass\r\n",  # code, tabs, CRLF
    "I'LL say we've   three   spaces and trailing   ",  # contractions (case-insensitive), runs of spaces
    "π ≈ 3.14159, 1234567890, 0x1F",  # digits split one by one
    "naïve café Æsir Ωmega straße",  # Latin-1 and Greek
    "e\u0301 vs \u00e9",  # decomposed vs composed: NFC makes them equal
    "日本語のテキスト、中文文本，한국어",  # CJK
    "مرحبا بالعالم שלום",  # right-to-left scripts
    "emoji 😀👍🏽 👨‍👩‍👧 🇫🇷",  # skin tone, ZWJ family, flag
    "control \x00\x07\x1b[0m and \u200b zero width",  # control bytes, ANSI, zero-width space
    "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n",  # ChatML turns
    "a<|endoftext|>b<|im_end|><|im_start|>",  # specials glued to text
    "<|im_end <|im_end| im_end|> <|unknown|>",  # near-misses are plain text
    "x" * 300,  # long run
]


@pytest.fixture(scope="module", params=ARCHS)
def built(request, tmp_path_factory) -> tuple[str, pathlib.Path]:
    arch = request.param
    path = tiny_model(tmp_path_factory.mktemp(arch), arch=arch, vocab_size=VOCAB_SIZE)
    return arch, path


@pytest.fixture(scope="module")
def loaded(built):
    arch, path = built
    return arch, path, AutoTokenizer.from_pretrained(path), AutoModelForCausalLM.from_pretrained(path)


def test_files_and_model_class(loaded):
    arch, path, tokenizer, model = loaded
    for name in ["config.json", "generation_config.json", "model.safetensors", "tokenizer.json"]:
        assert (path / name).is_file(), name
    assert type(model).__name__ == MODEL_CLASS[arch]
    assert model.config.vocab_size == VOCAB_SIZE
    assert len(tokenizer) <= VOCAB_SIZE
    assert next(model.parameters()).dtype == torch.float32


def test_reloaded_ids_match_written_tokenizer(loaded):
    # tokenizer.json is the trained tokenizer as built in memory; for qwen2 the reload
    # rebuilds the pre-tokenizer, so equal ids prove the training pipeline matches it.
    _, path, tokenizer, _ = loaded
    written = Tokenizer.from_file(str(path / "tokenizer.json"))
    for text in TEXTS:
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        assert ids == written.encode(text, add_special_tokens=False).ids, text
        assert tokenizer(text)["input_ids"] == ids, f"special tokens added to {text!r}"


def test_decode_round_trips(loaded):
    _, _, tokenizer, _ = loaded
    for text in TEXTS:
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        assert tokenizer.decode(ids) == unicodedata.normalize("NFC", text), text


def test_special_tokens_are_single_ids(loaded):
    _, _, tokenizer, _ = loaded
    ids = [tokenizer.convert_tokens_to_ids(token) for token in SPECIAL_TOKENS]
    assert ids == [0, 1, 2]
    for token, token_id in zip(SPECIAL_TOKENS, ids):
        assert tokenizer(token, add_special_tokens=False)["input_ids"] == [token_id]
        assert tokenizer(f"x{token}y", add_special_tokens=False)["input_ids"].count(token_id) == 1
    assert set(ids) <= set(tokenizer.all_special_ids)


def test_pad_eos_bos_agree(loaded):
    _, _, tokenizer, model = loaded
    assert tokenizer.pad_token == "<|endoftext|>"
    assert tokenizer.eos_token == "<|im_end|>"
    assert tokenizer.padding_side == "left"
    for config in (model.config, model.generation_config):
        assert config.pad_token_id == tokenizer.pad_token_id == 0
        assert config.eos_token_id == tokenizer.eos_token_id == 2
        assert config.bos_token_id == tokenizer.bos_token_id == 0


def test_left_padding(loaded):
    _, _, tokenizer, _ = loaded
    batch = tokenizer(["a", "a much longer prompt"], padding=True, return_tensors="pt")
    short_len = len(tokenizer("a")["input_ids"])
    pad_len = batch["input_ids"].shape[1] - short_len
    assert pad_len > 0
    assert batch["input_ids"][0, :pad_len].tolist() == [tokenizer.pad_token_id] * pad_len
    assert batch["attention_mask"][0].tolist() == [0] * pad_len + [1] * short_len


def test_chat_template(loaded):
    _, _, tokenizer, _ = loaded
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert text == ("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")
    assert not tokenizer.apply_chat_template(messages, tokenize=False).endswith("assistant\n")


def test_batched_generate(loaded):
    _, _, tokenizer, model = loaded
    prompts = [
        tokenizer.apply_chat_template([{"role": "user", "content": c}], tokenize=False, add_generation_prompt=True)
        for c in ["Hi", "Write a haiku about the sea, please.", "2+2?"]
    ]
    batch = tokenizer(prompts, padding=True, return_tensors="pt")
    with torch.no_grad():
        out = model.generate(**batch, max_new_tokens=4, do_sample=False)
    width = batch["input_ids"].shape[1]
    assert out.shape[0] == 3 and width < out.shape[1] <= width + 4
    assert torch.equal(out[:, :width], batch["input_ids"])
    assert int(out.max()) < model.config.vocab_size


def test_same_seed_same_bytes(built, tmp_path):
    arch, path = built
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    again = tiny_model(tmp_path / "again", arch=arch, vocab_size=VOCAB_SIZE)
    assert torch.equal(torch.rand(3), expected), "tiny_model changed the caller's RNG state"
    for name in ["model.safetensors", "tokenizer.json", "config.json", "tokenizer_config.json"]:
        assert (again / name).read_bytes() == (path / name).read_bytes(), name


def test_other_seed_other_weights(tmp_path):
    a = tiny_model(tmp_path / "a", arch="llama", vocab_size=512, seed=0)
    b = tiny_model(tmp_path / "b", arch="llama", vocab_size=512, seed=1)
    assert (a / "model.safetensors").read_bytes() != (b / "model.safetensors").read_bytes()
    assert (a / "tokenizer.json").read_bytes() == (b / "tokenizer.json").read_bytes()


def test_shape_arguments(tmp_path):
    path = tiny_model(
        tmp_path / "m",
        arch="llama",
        vocab_size=512,
        hidden_size=48,
        num_layers=3,
        num_heads=6,
        num_kv_heads=3,
        intermediate_size=96,
    )
    config = AutoModelForCausalLM.from_pretrained(path).config
    assert (config.hidden_size, config.num_hidden_layers) == (48, 3)
    assert (config.num_attention_heads, config.num_key_value_heads, config.intermediate_size) == (6, 3, 96)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"arch": "mistral"}, ValueError, r"Unknown arch 'mistral'\. Use one of 'qwen2', 'llama', 'gpt2'"),
        ({"vocab_size": 258}, ValueError, r"vocab_size must be >= 259 .* got 258"),
        ({"hidden_size": 66}, ValueError, r"divisible by num_heads, got hidden_size=66 .* hidden_size=68"),
        ({"hidden_size": 12, "num_heads": 4}, ValueError, r"must be even for rotary .* got 12 // 4 = 3"),
        ({"num_kv_heads": 3}, ValueError, r"multiple of num_kv_heads .* num_kv_heads=3"),
        ({"num_layers": 0}, ValueError, r"num_layers must be >= 1, got 0"),
        ({"seed": -1}, ValueError, r"seed must be in \[0, 2\*\*63\), got -1"),
        ({"hidden_size": 64.0}, TypeError, r"hidden_size must be an int, got float 64\.0"),
        ({"num_heads": True}, TypeError, r"num_heads must be an int, got bool"),
    ],
)
def test_invalid_arguments(tmp_path, kwargs, error, match):
    with pytest.raises(error, match=match):
        tiny_model(tmp_path / "m", **kwargs)
    assert not (tmp_path / "m").exists()


def test_gpt2_ignores_kv_heads_and_odd_head_dim(tmp_path):
    # GPT-2 has neither grouped-query attention nor rotary embeddings.
    path = tiny_model(tmp_path / "m", arch="gpt2", vocab_size=512, hidden_size=12, num_heads=4, num_kv_heads=3)
    assert AutoModelForCausalLM.from_pretrained(path).config.n_head == 4


def test_dir_that_is_a_file(tmp_path):
    file = tmp_path / "model"
    file.write_text("")
    with pytest.raises(ValueError, match="is an existing file"):
        tiny_model(file)
