"""The opening of every HTML page nodemap writes (check report, watch, fleet).

Pages open offline and from mail: no scripts, no outside resources, and no
form may post anywhere (default-src does not cover form-action), so even
markup that slipped past escaping cannot run or collect a password.
"""

from __future__ import annotations

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
