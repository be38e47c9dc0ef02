"""The opening of every HTML page nodemap writes (check report, watch, fleet), and its one table.

Pages open offline and from mail: no scripts, no outside resources, and no
form may post anywhere (default-src does not cover form-action), so even
markup that slipped past escaping cannot run or collect a password.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from html import escape

# Every page: long unbroken words in a cell (inventory keys, environment
# variable names, paths, a fix naming MPICH_GPU_SUPPORT_ENABLED=1) may wrap
# anywhere, so a table fits the page's column instead of running past the
# window and cutting its last columns; verdict cells and headings keep whole words.
TABLE_CSS = "td{overflow-wrap:anywhere}th,td.v{overflow-wrap:normal}"

CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; form-action 'none'; base-uri 'none'"


def head(title: str, css: str) -> str:
    """Doctype, the policy above, the escaped title and the page's style
    (after TABLE_CSS, which it may override), up to <body>."""
    return (f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
            f"<meta http-equiv='Content-Security-Policy' content=\"{CSP}\">"
            f"<title>{escape(title)}</title><style>{TABLE_CSS}{css}</style></head><body>")


class Markup(str):
    """HTML already built with escape(): a cell holding it shows it as it is.
    Anything else put in a cell is text and is escaped."""


@dataclass(frozen=True)
class Cell:
    """One cell with more than text: a class (num, verdict), a row heading, or a span over several rows."""
    content: object = ""
    cls: str = ""
    header: bool = False
    rowspan: int = 1


def cell(c: object) -> str:
    """A <td> (or <th>) for c: a Cell, Markup, or any value shown as escaped text."""
    if not isinstance(c, Cell):
        c = Cell(c)
    tag = "th" if c.header else "td"
    attrs = (f" class='{escape(c.cls)}'" if c.cls else "") + (f" rowspan='{c.rowspan}'" if c.rowspan > 1 else "")
    body = c.content if isinstance(c.content, Markup) else escape(str(c.content))
    return f"<{tag}{attrs}>{body}</{tag}>"


def table(headers: Iterable[str], rows: Iterable[Iterable[object]], *, id: str = "") -> str:
    """The one HTML table of every page: a heading row (no row if headers is empty), then a row per item
    of rows, each cell escaped unless it is Markup (cell above)."""
    ident = f" id='{escape(id)}'" if id else ""
    heads = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = "".join(f"<tr>{''.join(cell(c) for c in r)}</tr>" for r in rows)
    return f"<table{ident}>{f'<tr>{heads}</tr>' if heads else ''}{body}</table>"
