"""mkdocs hook: the site's front page is the README, with its `docs/` links made relative to the site."""

import pathlib
import re

README = pathlib.Path(__file__).resolve().parent.parent / "README.md"


def on_page_markdown(markdown, page, config, files):
    """Replace docs/index.md's placeholder text with README.md, whose links point into docs/."""
    if page.file.src_uri != "index.md":
        return markdown
    return re.sub(r"\]\(docs/", "](", README.read_text(encoding="utf-8"))
