"""The opening of every HTML page nodemap writes (check report, watch, fleet).

Pages open offline and from mail: no scripts, no outside resources, and no
form may post anywhere (default-src does not cover form-action), so even
markup that slipped past escaping cannot run or collect a password.
"""

from __future__ import annotations

from html import escape

CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; form-action 'none'; base-uri 'none'"


def head(title: str, css: str) -> str:
    """Doctype, the policy above, the escaped title and the page's style, up to <body>."""
    return (f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
            f"<meta http-equiv='Content-Security-Policy' content=\"{CSP}\">"
            f"<title>{escape(title)}</title><style>{css}</style></head><body>")
