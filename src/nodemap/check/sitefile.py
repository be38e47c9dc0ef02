"""The one reader of a site file (TOML: `check --expect`, `report --expect`,
the fleet's [fleet] table), the same file reaching every rank of a fleet check.

tomllib is not bounded: a dotted key of 20,000 parts costs it O(N^2) time
and memory (a 40 KB file: 1.6 GB), 100,000 nested arrays overflow its
recursion, and a 5000-digit integer raises ValueError from int(). So the
file is read through infile (a regular file of at most MAX_BYTES) and its
text scanned once, in linear time, before tomllib sees it: nesting depth,
parts of one dotted key and the length of a bare word (a key or number)
are capped far above what any site file holds. Every refusal and parse
error is one SiteError line naming the file (and line).
"""

from __future__ import annotations

import re
from typing import Any

from .. import infile
from ..errors import NodemapError

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the same parser as the tomli package
    import tomli as tomllib  # type: ignore[no-redef]

MAX_BYTES = 256 << 10  # the shipped table is 10 KB
MAX_DEPTH = 16  # [ and { open at once: [[limit]] is 2, an array of inline tables 3
MAX_KEY_PARTS = 16  # a.b.c: 3
MAX_WORD = 64  # characters of a bare key or a number: an int64 has 19 digits, a float 17 significant ones

WHAT = "site file (TOML)"


class SiteError(NodemapError):
    """A site file that cannot be used: file, line and key named."""


def load(path: str, option: str = "--expect") -> tuple[str, dict[str, Any]]:
    """(text, table) of a site file; SiteError on any problem."""
    try:
        text = infile.read_text(path, MAX_BYTES, WHAT)
    except NodemapError as e:
        raise SiteError(f"{option} {e}") from None
    return text, parse(text, path)


def parse(text: str, name: str) -> dict[str, Any]:
    """A TOML text (scanned first, see the module's doc) as a table."""
    refusal = scan(text)
    if refusal:
        raise SiteError(f"{name}, {refusal}")
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise SiteError(syntax_error(name, str(e))) from None
    except (RecursionError, ValueError, MemoryError) as e:  # beyond the scan's caps: still one line
        raise SiteError(f"{name}: cannot be read as TOML ({type(e).__name__}: {str(e)[:100]})") from None


# A string (any of TOML's four kinds, unterminated ones to the end of the
# line), a comment, or one character of structure; the rest are words.
_TOKEN = re.compile(r'"""(?:[^"\\]|\\.|"(?!""))*(?:"""|$)|\'\'\'(?:[^\']|\'(?!\'\'))*(?:\'\'\'|$)'
                    r'|"(?:[^"\\\n]|\\.)*"?|\'[^\'\n]*\'?|#[^\n]*|\n|[ \t\r]+|[\[\]{}.,=]|[^\s"\'#\[\]{}.,=]+')
_FIX = "a site file holds a few tables of short keys and numbers (docs/check.md)"


def scan(text: str) -> str:
    """'' when the text is within the caps, else "line N: why; fix"."""
    line, depth, parts = 1, 0, 1
    for m in _TOKEN.finditer(text):
        tok = m.group()
        c = tok[0]
        if c in "[{":
            depth += 1
            if depth > MAX_DEPTH:
                return f"line {line}: more than {MAX_DEPTH} brackets open at once; {_FIX}"
        elif c in "]}":
            depth -= 1
        if c == ".":
            parts += 1
            if parts > MAX_KEY_PARTS:
                return f"line {line}: a dotted key of more than {MAX_KEY_PARTS} parts; {_FIX}"
        elif c not in " \t\r" and c not in "\"'" and not (c.isalnum() or c in "_-+:"):
            parts = 1  # structure ends a dotted key; strings and words continue one
        if len(tok) > MAX_WORD and c not in "\"'#" and not c.isspace():
            return f"line {line}: a bare key or number of {len(tok)} characters (at most {MAX_WORD}); {_FIX}"
        line += tok.count("\n")
    return ""


def syntax_error(name: str, reason: str) -> str:
    """tomllib's "(at line 3, column 5)" / "(at end of document)" as a place
    first, the way every other message names it."""
    m = re.search(r"\s*\(at line (\d+), column (\d+)\)$", reason)
    if m:
        return f"{name}, line {m.group(1)}, column {m.group(2)}: not valid TOML: {reason[:m.start()]}"
    if reason.endswith("(at end of document)"):
        reason = reason.removesuffix("(at end of document)").strip()
        return (f"{name}, at end of file: not valid TOML: {reason}; something opened earlier ([, {{ or a quote) "
                "is never closed, or the last key has no value")
    return f"{name}: not valid TOML: {reason}"
