"""The user pages speak to a user: README.md and every page under docs/ (the design record, DESIGN.md, is held
to the first two rules too).

Checked by reading files, without mkdocs:

- no issue numbers ("issue 42", "#42"), which mean nothing to a reader of the site;
- no absolute machine paths (`/work/...`, `/home/...`, `C:\\...`); URLs are fine;
- exactly one H1 per page (the page title), outside code blocks;
- no fenced code line wider than 85 characters: at 1280 px the content column shows no more, and a cut line
  usually loses its comment.
"""

from __future__ import annotations

import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
NOT_USER_PAGES = {"docs/DESIGN.md"}  # the design record: a contributor's page, organised by component
NARROW = ("README.md", "docs/")  # pages whose code lines must fit the content column: every user page
MAX_CODE_LINE = 85  # at 1280 px the content column's code box shows 85 characters

ISSUE = re.compile(r"(?i)\bissues?[ -]\d+|(?<![\w&/(.#-])#\d{2,}\b")
URL = re.compile(r"https?://\S+")
ABSOLUTE = re.compile(r"(?<![\w.~-])(?:/work/|/root/|/home/|/tmp/|/Users/)|\b[A-Z]:\\")
FENCE = re.compile(r"^\s*(`{3,}|~{3,})")


def user_pages() -> list[str]:
    """README.md and every markdown page under docs/ except the design record, relative to the root."""
    found = ["README.md"] + [p.relative_to(ROOT).as_posix() for p in sorted(DOCS.rglob("*.md"))]
    return [page for page in found if page not in NOT_USER_PAGES]


def split_code(text: str) -> tuple[list[tuple[int, str]], list[tuple[int, str]]]:
    """(prose lines, fenced code lines) of a markdown text, each as (line number, line)."""
    prose, code, fence = [], [], None
    for number, line in enumerate(text.splitlines(), 1):
        m = FENCE.match(line)
        if fence is None and m:
            fence = m.group(1)
        elif fence is not None and m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence):
            fence = None
        elif fence is not None:
            code.append((number, line))
        else:
            prose.append((number, line))
    return prose, code


def issue_refs(text: str) -> list[str]:
    """Each line that cites an issue by number."""
    return [f"line {n}: {line.strip()}" for n, line in enumerate(text.splitlines(), 1) if ISSUE.search(line)]


def absolute_paths(text: str) -> list[str]:
    """Each line that names an absolute machine path outside an http(s) URL."""
    return [f"line {n}: {line.strip()}" for n, line in enumerate(text.splitlines(), 1)
            if ABSOLUTE.search(URL.sub("", line))]


def h1_lines(text: str) -> list[int]:
    """The line numbers of the H1 headings (`# Title`) outside code blocks."""
    prose, _ = split_code(text)
    return [n for n, line in prose if re.match(r"^# \S", line)]


def wide_code_lines(text: str, limit: int = MAX_CODE_LINE) -> list[str]:
    """Each fenced code line longer than `limit` characters."""
    _, code = split_code(text)
    return [f"line {n} ({len(line)} chars): {line.strip()[:60]}" for n, line in code if len(line) > limit]


# ----- the scanners catch what they are for ----------------------------------------------------------------

PLANTED = """# A page

Fixed in issue 42 (see #46); the run is in /work/main/outputs and C:\\Users\\me.

```bash
# a comment, not a heading
make demo   # """ + "x" * 100 + """
```

# A second title
"""


def test_the_scanners_flag_a_planted_bad_page():
    assert [f.split(":")[0] for f in issue_refs(PLANTED)] == ["line 3"]
    assert len(ISSUE.findall(PLANTED)) == 2  # "issue 42" and "#46"
    assert [f.split(":")[0] for f in absolute_paths(PLANTED)] == ["line 3"]
    assert h1_lines(PLANTED) == [1, 10]  # the `# a comment` inside the fence is no heading
    assert [f.split(" ")[1] for f in wide_code_lines(PLANTED)] == ["7"]


def test_the_scanners_leave_good_text_alone():
    good = """# Title

See [the results](results.md#10-results), `benchmarks/_work/learning/`, `/dev/shm`, `outputs/tmp/x`,
<https://example.com/work/tmp/issue/42>, colour `&#39;` and 4 issues in 3 runs.
"""
    assert not issue_refs(good) and not absolute_paths(good) and h1_lines(good) == [1]


# ----- every user page -------------------------------------------------------------------------------------


@pytest.mark.parametrize("page", user_pages() + sorted(NOT_USER_PAGES))
def test_no_issue_numbers(page):
    found = issue_refs((ROOT / page).read_text(encoding="utf-8"))
    assert not found, f"{page} cites issues by number (say what the change does instead): {found}"


@pytest.mark.parametrize("page", user_pages() + sorted(NOT_USER_PAGES))
def test_no_absolute_machine_paths(page):
    found = absolute_paths((ROOT / page).read_text(encoding="utf-8"))
    assert not found, f"{page} names a path on one machine (use a path relative to the clone): {found}"


@pytest.mark.parametrize("page", user_pages())
def test_one_title(page):
    found = h1_lines((ROOT / page).read_text(encoding="utf-8"))
    assert len(found) == 1, f"{page} has {len(found)} H1 headings (lines {found}); a page has one title"


@pytest.mark.parametrize("page", [p for p in user_pages() if p.startswith(NARROW)])
def test_code_lines_fit_the_content_column(page):
    found = wide_code_lines((ROOT / page).read_text(encoding="utf-8"))
    assert not found, (f"{page}: code lines over {MAX_CODE_LINE} characters are cut at 1280 px; put the "
                       f"comment on its own line above the code, or wrap it: {found}")
