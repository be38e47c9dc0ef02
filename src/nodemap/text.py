"""Text in and out: numbers read from outside, and the tables and numbers nodemap prints.

In: numbers in text from outside (files, variables, names) are ASCII digits only.

"²".isdigit() is true, yet int("²") raises; "٣".isdecimal() is true and
int("٣") is 3, a number no Linux file or launcher writes; and int() raises
on more than 4300 digits. So every check before an int() of outside text
is `is_decimal`, and names sort by `natural_key`.

Out: `table` is the one renderer of terminal tables (bench results, plans,
the topology matrix, check and watch summaries); `matrix`, `number` and
`percent` are built on it. Sizes print through nodemap.units. Here, at the
base of the package, because every layer prints tables (topology, mapping,
bench, check, watch, report).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence  # not typing: env imports this on the launch path

__all__ = ["is_decimal", "decoded", "natural_key", "table", "matrix", "number", "percent"]

_RUNS = re.compile(r"([0-9]+)")


def is_decimal(text: str, digits: int | None = 18) -> bool:
    """Whether `text` is 1 to `digits` ASCII digits 0-9 (None: any number of them)."""
    return bool(text) and (digits is None or len(text) <= digits) and text.isascii() and text.isdigit()


def decoded(v: object) -> str:
    """A name or id a GPU library gives as bytes (older NVML and CUDA bindings) or str, as text."""
    return v.decode(errors="replace") if isinstance(v, bytes) else str(v)


def natural_key(name: str) -> tuple:
    """Sort key: "mlx5_10" after "mlx5_9" (runs of 0-9 compare as numbers;
    text and numbers alternate, text first, so any two keys compare)."""
    return tuple(int(p) if i % 2 else p for i, p in enumerate(_RUNS.split(name)))


def table(headers: Sequence[str], rows: Iterable[Sequence[object]], right: Sequence[bool] | bool | None = None,
          rule: bool = True) -> str:
    """Columns padded to their widest cell, two spaces apart; numbers right-aligned by default (right=False:
    every column left-aligned); a rule of dashes under the headers unless rule=False."""
    body = [[str(c) for c in r] for r in rows]
    widths = [max([len(h)] + [len(r[i]) for r in body]) for i, h in enumerate(headers)]
    if right is None:
        right = [bool(body) and all(_numeric(r[i]) for r in body) for i in range(len(headers))]
    elif isinstance(right, bool):
        right = [right] * len(headers)

    def line(cells: Sequence[str]) -> str:
        return "  ".join(c.rjust(w) if r else c.ljust(w) for c, w, r in zip(cells, widths, right)).rstrip()

    out = [line(list(headers))] + ([line(["-" * w for w in widths])] if rule else [])
    out += [line(r) for r in body]
    return "\n".join(out)


def _numeric(cell: str) -> bool:
    s = cell.strip().rstrip("%x").replace(",", "")
    if s in ("", "-"):
        return True
    try:
        float(s)
        return True
    except ValueError:
        return False


def number(v: float | None, digits: int = 3) -> str:
    """Significant digits without exponent noise: 1234.5 -> '1234', 0.01234 -> '0.0123'."""
    if v is None:
        return "-"
    a = abs(v)
    if a >= 10 ** (digits - 1):
        return f"{v:.0f}"
    if a == 0:
        return "0"
    dec = digits - 1 - int(f"{a:e}".split("e")[1])
    return f"{v:.{max(0, dec)}f}"


def percent(frac: float | None) -> str:
    return "-" if frac is None else f"{100 * frac:.0f}%"


def matrix(
    corner: str,
    rows: Sequence[object],
    cols: Sequence[object],
    cell: Callable[[object, object], str],
) -> str:
    """A labelled matrix: cell(row, col) for every pair, '-' where empty."""
    body = [[str(r)] + [cell(r, c) or "-" for c in cols] for r in rows]
    return table([corner] + [str(c) for c in cols], body, right=[False] + [True] * len(cols))
