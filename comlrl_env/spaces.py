"""Text spaces that honestly contain what a language model writes.

`gymnasium.spaces.Text` defaults to an alphanumeric charset, so a model's
answer ("Hello, world!") is not in the space. `TextSpace` keeps gymnasium's
class (wrappers and `parallel_api_test` see a normal `Text`) but accepts every
Unicode string within its character limits; sampling draws from `CHARSET`, a
mix of printable ASCII, whitespace, accented letters, CJK and emoji, so random
actions look like the hostile text a model may produce.
"""

from __future__ import annotations

import string
from typing import Any

from gymnasium.spaces import Text

__all__ = ["CHARSET", "TextSpace"]

CHARSET: str = (
    string.ascii_letters
    + string.digits
    + string.punctuation
    + " \n\t"
    + "éèàüößñçøÅ"
    + "你好世界"
    + "αβγδλπ"
    + "🙂🚀"
)
"""The characters `TextSpace.sample` draws from: ASCII, punctuation, whitespace, accents, CJK, Greek and emoji,
so sampled actions exercise hostile text; `contains` accepts any `str` within the length limits."""


class TextSpace(Text):
    """A `gymnasium.spaces.Text` whose `contains()` accepts any `str` of allowed length.

    Args:
        max_length: Maximum number of characters (inclusive).
        min_length: Minimum number of characters (inclusive); 0 allows the empty string.
        seed: Seed for `sample()`.
    """

    def __init__(self, max_length: int, *, min_length: int = 0, seed: Any = None) -> None:
        super().__init__(max_length, min_length=min_length, charset=CHARSET, seed=seed)

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and self.min_length <= len(x) <= self.max_length

    def __repr__(self) -> str:
        return f"TextSpace({self.min_length}, {self.max_length}, charset=<any unicode>)"
