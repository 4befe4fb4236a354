"""mkdocs hooks: the site's front page is the README, and math is rendered to MathML when the site is built.

`pymdownx.arithmatex` (generic mode) marks each formula of a page as `<span class="arithmatex">\\(...\\)</span>`
or `<div class="arithmatex">\\[...\\]</div>`; `on_page_content` turns them into MathML with `latex2mathml`, which
browsers draw without a script, so the pages need no JavaScript and no network to show their equations.
"""

import html
import pathlib
import re

from latex2mathml.converter import convert

README = pathlib.Path(__file__).resolve().parent.parent / "README.md"
MATH = re.compile(r'<(span|div) class="arithmatex">\s*(?:\\\(|\\\[)(.*?)(?:\\\)|\\\])\s*</\1>', re.S)


def on_page_markdown(markdown, page, config, files):
    """Replace docs/index.md's placeholder text with README.md, whose links point into docs/."""
    if page.file.src_uri != "index.md":
        return markdown
    return re.sub(r"\]\(docs/", "](", README.read_text(encoding="utf-8"))


def on_page_content(content, page, config, files):
    """Every formula arithmatex marked, as MathML: inline in a span, display in a div of its own."""

    def mathml(match: re.Match) -> str:
        tag, tex = match.group(1), html.unescape(match.group(2))
        display = "block" if tag == "div" else "inline"
        return f'<{tag} class="arithmatex">{convert(tex.strip(), display=display)}</{tag}>'

    return MATH.sub(mathml, content)
