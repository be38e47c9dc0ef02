"""Text in and out: numbers read from outside, and the tables and numbers nodemap prints.

In: numbers in text from outside (files, variables, names) are ASCII digits only.

"²".isdigit() is true, yet int("²") raises; "٣".isdecimal() is true and
int("٣") is 3, a number no Linux file or launcher writes; and int() raises
on more than 4300 digits. So every check before an int() of outside text
is `is_decimal`, and names sort by `natural_key`.

Names: a device name, UUID or bus id from outside is a short word
(`name_problem`), any other text from outside printable (`text_problem`).
Where a text from outside is shown rather than refused (a fleet report
built from saved documents), `printable` escapes what is not printable and
bounds it without two texts ever showing alike; `clipped` cuts a sentence
at a word.

Out: `table` is the one renderer of terminal tables (bench results, plans,
the topology matrix, check and watch summaries); `matrix`, `number` and
`percent` are built on it. Sizes print through nodemap.units. Here, at the
base of the package, because every layer prints tables (topology, mapping,
bench, check, watch, report).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence  # not typing: env imports this on the launch path

__all__ = ["is_decimal", "decoded", "natural_key", "table", "matrix", "number", "percent", "name_problem",
           "text_problem", "shown", "printable", "clipped"]

# No `re` here (nor in units or env): with the `enum` it imports, ~4 ms of every `nodemap topo` and launch
_DIGITS = frozenset("0123456789")
_ALNUM = _DIGITS | frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")


def is_decimal(text: str, digits: int | None = 18) -> bool:
    """Whether `text` is 1 to `digits` ASCII digits 0-9 (None: any number of them)."""
    return bool(text) and (digits is None or len(text) <= digits) and text.isascii() and text.isdigit()


def decoded(v: object) -> str:
    """A name or id a GPU library gives as bytes (older NVML and CUDA bindings) or str, as text."""
    return v.decode(errors="replace") if isinstance(v, bytes) else str(v)


def natural_key(name: str) -> tuple:
    """Sort key: "mlx5_10" after "mlx5_9" (runs of 0-9 compare as numbers;
    text and numbers alternate, text first, so any two keys compare)."""
    key: list[str | int] = []
    text = i = 0  # where the text before the next run starts; where the scan is
    while i < len(name):
        if name[i] in _DIGITS:
            end = i + 1
            while end < len(name) and name[end] in _DIGITS:
                end += 1
            key += [name[text:i], int(name[i:end])]
            text = i = end
        else:
            i += 1
    return (*key, name[text:])


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


def columns(fallback: int = 100) -> int:
    """The terminal's width as shutil.get_terminal_size gives it (COLUMNS, else standard output's terminal,
    else `fallback`), without importing shutil (bz2, lzma: 4% of `nodemap topo`'s instructions)."""
    import os
    import sys

    text = os.environ.get("COLUMNS", "").strip()  # as shutil: a value that is no width is ignored
    if is_decimal(text, 4) and int(text) > 0:
        return int(text)
    try:
        return os.get_terminal_size(sys.__stdout__.fileno()).columns or fallback
    except (AttributeError, ValueError, OSError):
        return fallback


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


# --- names from outside --------------------------------------------------------------
#
# A device's name, UUID or bus id reaches places whose syntax it could rewrite:
# a task's environment (UCX_NET_DEVICES=mlx5_0:1), the Slurm plugin's
# tab-separated task lines, launcher options spliced unquoted into a command,
# gres.conf's key=value lines. The names machines give are short words, so a
# name from outside is one or refused (docs/limits.md, "Names from outside").

NAME_MAX = 64  # characters of a device name, UUID or bus id: IB device names stop at 64, netdevs at 15
TEXT_MAX = 1024  # characters of a descriptive text from outside: a model, a host name, a note
# NIC names, network interfaces, OS device names (mlx5_0, hsn0, enp65s0f0np0, renderD128, opencl0d0)
_DEVICE = _ALNUM | frozenset("_.-")
# ids: UUIDs (GPU-8f3a...), MIG devices (MIG-GPU-.../1/0), PCI bus ids (0000:3b:00.0), device keys
_ID = _DEVICE | frozenset(":/")
NAME_KINDS = {"device": (_DEVICE, "letters, digits, _ . -"), "id": (_ID, "letters, digits, _ . - : /")}


def name_problem(value: str, kind: str = "device") -> str:
    """Why `value` cannot be a device name (kind "device") or an id (kind
    "id": also ':' and '/'); "" when it can. An empty name is no problem
    here: a field that needs one says so itself."""
    chars, allowed = NAME_KINDS[kind]
    if len(value) > NAME_MAX:
        return f"is {len(value)} characters long, over the {NAME_MAX} of any device name"
    bad = next((c for c in value if c not in chars), None)
    return "" if bad is None else f"holds {ascii(bad)} (device names are {allowed})"


def text_problem(value: str, limit: int = TEXT_MAX) -> str:
    """Why `value` cannot be a descriptive text from outside (a character that
    is not printable: control, format such as a bidi override, surrogate;
    or over `limit`); "" when it can."""
    if len(value) > limit:
        return f"is {len(value)} characters long, over nodemap's {limit}"
    if value.isprintable():
        return ""
    bad = next(c for c in value if not c.isprintable())
    return f"holds {ascii(bad)}, a character that is not printable"


def shown(value: str, limit: int = 40) -> str:
    """`value` for an error line: Python's ascii() of its start, so a tab, a
    newline or an escape sequence shows as \\t, \\n, \\x1b."""
    return ascii(value[:limit]) + (f"... ({len(value)} characters)" if len(value) > limit else "")


ELLIPSIS = "\u2026"
_ESCAPED = ("\\", ELLIPSIS)  # printable, yet escaped: the escapes' own mark, and the cut's


def printable(value: object, limit: int = TEXT_MAX) -> str:
    """`value` as one line of printable text: each character that is not
    printable (a control character such as an escape sequence's ESC or a
    newline, a bidi override, a lone surrogate), and the backslash, written
    as Python writes it (\\x1b, \\n, \\u202e, \\\\; and the ellipsis, \\u2026),
    so no two texts show alike; printable ones (accents, CJK) kept. Over `limit` characters: its
    start, an ellipsis and a hash of the whole, still told apart from every
    other text ("node0...#3fa2c1d07b")."""
    text = str(value)
    if not (text.isprintable() and "\\" not in text and ELLIPSIS not in text):
        text = "".join(c if c.isprintable() and c not in _ESCAPED else ascii(c)[1:-1] for c in text)
    if len(text) <= limit:
        return text
    import hashlib

    digest = hashlib.sha256(str(value).encode("utf-8", "surrogatepass")).hexdigest()[:10]
    return text[:max(0, limit - 12)] + ELLIPSIS + "#" + digest


def clipped(text: str, limit: int) -> str:
    """`text` whole when it fits in `limit` characters; else cut at the last
    space within them, with an ellipsis (a first word longer than half of
    them is cut inside it)."""
    if len(text) <= limit:
        return text
    head = text[:max(0, limit - 1)]
    space = head.rfind(" ")
    if space >= limit // 2:
        head = head[:space]
    return head.rstrip(" ,;:") + ELLIPSIS
