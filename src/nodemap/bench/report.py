"""Terminal tables of Results, for every benchmark (host, GPU, MPI).

Reads only Result records; never measures. `table` is the one table
renderer of the bench layer; `matrix` (NUMA and GPU matrices) and every
kind's view (sweeps, latency rows, gpu_common.results_text) are built on it.
"""

from __future__ import annotations

from typing import Callable, Iterable, Sequence


def table(headers: Sequence[str], rows: Iterable[Sequence[object]], right: Sequence[bool] | None = None) -> str:
    """Columns padded to their widest cell; numbers right-aligned by default."""
    body = [[str(c) for c in r] for r in rows]
    widths = [max([len(h)] + [len(r[i]) for r in body]) for i, h in enumerate(headers)]
    if right is None:
        right = [bool(body) and all(_numeric(r[i]) for r in body) for i in range(len(headers))]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(c.rjust(w) if r else c.ljust(w) for c, w, r in zip(cells, widths, right)).rstrip()

    out = [line(list(headers)), line(["-" * w for w in widths])]
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
