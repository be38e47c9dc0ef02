"""Numbers in text from outside (files, variables, names): ASCII digits only.

"²".isdigit() is true, yet int("²") raises; "٣".isdecimal() is true and
int("٣") is 3, a number no Linux file or launcher writes; and int() raises
on more than 4300 digits. So every check before an int() of outside text
is `is_decimal`, and names sort by `natural_key`.
"""

from __future__ import annotations

import re

__all__ = ["is_decimal", "natural_key"]

_RUNS = re.compile(r"([0-9]+)")


def is_decimal(text: str, digits: int | None = 18) -> bool:
    """Whether `text` is 1 to `digits` ASCII digits 0-9 (None: any number of them)."""
    return bool(text) and (digits is None or len(text) <= digits) and text.isascii() and text.isdigit()


def natural_key(name: str) -> tuple:
    """Sort key: "mlx5_10" after "mlx5_9" (runs of 0-9 compare as numbers;
    text and numbers alternate, text first, so any two keys compare)."""
    return tuple(int(p) if i % 2 else p for i, p in enumerate(_RUNS.split(name)))
