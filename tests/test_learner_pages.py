"""The per-learner pages and the command-line reference.

- each learner page's example runs as written, on a tiny offline model in place of the hub id it names, and
  saves what the page says it saves;
- each page has the sections a reader looks for and links the config and reference entries it names;
- what a page's "Can I use it?" table says is refused is refused, with the message it quotes;
- docs/cli.md is what docs/cli_md.py generates from `comlrl-bench`'s parser.
"""

from __future__ import annotations

import ast
import importlib.util
import pathlib
import re

import pytest

from learners import IAC, IACConfig, MARLHFConfig

ROOT = pathlib.Path(__file__).resolve().parent.parent
HUB_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"  # what the examples name; the tests put a tiny model there

# Each page, and what its example's save_model writes under outputs/<name>/agents.
PAGES = {
    "docs/learners/magrpo.md": ["agent_0", "agent_1"],
    "docs/learners/iac.md": ["agent_0", "agent_0/critic", "agent_1", "agent_1/critic"],
    "docs/learners/maac.md": ["agent_0", "agent_1", "critic"],
    "docs/learners/marlhf.md": ["agent_0", "agent_1", "reward_model"],
}
SECTIONS = ["## The method", "## What it optimizes", "## Can I use it?", "## Example", "## Results", "## Config"]
MARK = re.compile(r"^<!-- run by tests/test_learner_pages\.py\b[^\n]*-->\n```python\n(.*?)^```", re.M | re.S)


def example(page: str) -> str:
    blocks = MARK.findall((ROOT / page).read_text(encoding="utf-8"))
    assert len(blocks) == 1, f"{page}: one example marked `<!-- run by tests/test_learner_pages.py -->`"
    return blocks[0]


@pytest.mark.parametrize("page", list(PAGES))
def test_the_example_runs_as_written_on_a_tiny_model(page, tiny_dir, tmp_path, monkeypatch):
    block = example(page)
    assert block.count(f'"{HUB_ID}"') == 1, f"{page}: the example names {HUB_ID} once, where the model goes"
    assert 10 <= len(block.strip().splitlines()) <= 25, f"{page}: a minimal example is 10-25 lines"
    assert max(map(len, block.splitlines())) <= 85, f"{page}: a line wider than the content column shows"
    monkeypatch.chdir(tmp_path)  # it writes outputs/ where it runs
    exec(compile(block.replace(HUB_ID, tiny_dir), page, "exec"), {})
    name = pathlib.Path(page).stem
    saved = tmp_path / "outputs" / name / "agents"
    assert all((saved / part).is_dir() for part in PAGES[page]), sorted(p.name for p in saved.iterdir())
    assert (tmp_path / "outputs" / name / "metrics.jsonl").is_file()


@pytest.mark.parametrize("page", list(PAGES))
def test_each_page_has_its_sections_and_links_its_config_and_reference(page):
    text = (ROOT / page).read_text(encoding="utf-8")
    at = [text.find(s) for s in SECTIONS]
    assert -1 not in at and at == sorted(at), f"{page}: sections {SECTIONS}, in this order"
    assert "../config.md#" in text and "../reference/learners.md#learners." in text
    assert "$$" in text, f"{page}: the objective as an equation"
    matrix = text[text.find("## Can I use it?"):text.find("## Example")]
    for row in ("Turn-taking games", "Mixed teams, fixed seats", "LoRA", "FSDP2", "vLLM generation",
                "Several turns", "Per-agent rewards"):
        assert f"| {row} |" in matrix, f"{page}: the matrix has no row {row!r}"


# What the matrices say is refused, and the words they quote.
REFUSED = [
    ("docs/learners/iac.md", "peft_config needs use_separate_critic=True for IAC",
     lambda model: IAC(env="smoke/FormatAgreement-v1", agent_model=model, num_agents=2,
                       args=IACConfig(use_separate_critic=False, peft_config={"r": 4}))),
    ("docs/learners/iac.md", "self-play (one model in several seats) needs use_separate_critic=True",
     lambda model: IAC(env="smoke/FormatAgreement-v1", agents=[model, model],
                       args=IACConfig(use_separate_critic=False))),
    ("docs/learners/marlhf.md", "sharding='fsdp' needs torchrun, and MARLHF runs as one process",
     lambda model: MARLHFConfig(sharding="fsdp")),
    ("docs/learners/marlhf.md", "num_turns must be 1", lambda model: MARLHFConfig(num_turns=2)),
]


@pytest.mark.parametrize("page, message, build", REFUSED, ids=[m for _, m, _ in REFUSED])
def test_what_a_matrix_says_is_refused_is_refused(page, message, build, tiny_dir):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_dir) if "self-play" in message else tiny_dir
    with pytest.raises(ValueError, match=re.escape(message)):
        build(model)


def code_strings() -> list[str]:
    """Every string literal of the learners' code (adjacent literals joined, as Python joins them)."""
    found = []
    for path in (ROOT / "learners").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                found.append(node.value)
    return found


@pytest.mark.parametrize("page", list(PAGES))
def test_every_message_a_matrix_quotes_is_in_the_code(page):
    """E.g. MARLHF's refusal under torchrun, which needs two processes to raise."""
    text = (ROOT / page).read_text(encoding="utf-8")
    matrix = text[text.find("## Can I use it?"):text.find("## Example")]
    quoted = [q for q in re.findall(r'(?<!`)"([^"`]{20,})"', matrix)]
    strings = code_strings()
    for message in quoted:
        assert any(message.rstrip(".") in s for s in strings), f"{page} quotes {message!r}, which no code raises"


# ----- the command-line reference ------------------------------------------------------------------------


def _cli_md():
    """docs/cli_md.py, which renders docs/cli.md from comlrl-bench's parser."""
    path = ROOT / "docs" / "cli_md.py"
    spec = importlib.util.spec_from_file_location("cli_md", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_command_line_reference_is_current():
    """docs/cli.md is generated from the parser; regenerate it with `python docs/cli_md.py`."""
    cli_md = _cli_md()
    assert cli_md.TARGET.read_text(encoding="utf-8") == cli_md.render(), "run: python docs/cli_md.py"


def test_the_command_line_reference_lists_every_option_with_its_default():
    cli_md = _cli_md()
    text, parser = cli_md.TARGET.read_text(encoding="utf-8"), cli_md.parser()
    for action in parser._actions:  # noqa: SLF001
        row = next(line for line in text.splitlines() if line.startswith(f"| `{action.option_strings[0]}"))
        if isinstance(action.default, int) and not isinstance(action.default, bool):
            assert f"`{action.default}`" in row
    assert "--episodes" in text and "comlrl-bench --suite" in text  # an option and an example
