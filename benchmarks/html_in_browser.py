"""Open a `nodemap check` HTML report in a real headless browser, offline.

  python3 benchmarks/html_in_browser.py REPORT.html [--screenshot PNG] [--window 1400x900] [--at ID] [--no-install]

Debian's chromium (installed with apt-get when absent, unless --no-install)
loads the file with networking disabled (a separate network namespace
where `unshare -n` works, and a dead proxy and host resolver either way).
Checks: no console message at error level, no blocked or failed load, and
every plot the document promises (`<div class='plot' id=...>`) present in
the rendered DOM with its SVG. Saves a screenshot at the window size, of
the first screen or of the page from the section `--at ID` on (e.g.
inventory: headless chromium does not scroll a screenshot to a fragment),
and (with Pillow) fails when anything is drawn in the screenshot's right
margin: a table wider than the page's column. Exit 0 when all hold,
1 with the reasons otherwise, 77 when no browser can be had.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

BROWSERS = ("chromium", "chromium-browser", "google-chrome")
OFFLINE = ["--proxy-server=127.0.0.1:9", "--host-resolver-rules=MAP * ~NOTFOUND", "--no-proxy-server=false"]


def browser(install: bool) -> str | None:
    for name in BROWSERS:
        path = shutil.which(name)
        if path:
            return path
    if install and os.geteuid() == 0 and shutil.which("apt-get"):
        subprocess.run(["apt-get", "install", "-y", "-q", "chromium"], check=False,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return shutil.which("chromium")
    return None


def _offline_prefix() -> list[str]:
    """`unshare -n` when it works here (root or user namespaces)."""
    if shutil.which("unshare") and subprocess.run(["unshare", "-n", "true"], capture_output=True).returncode == 0:
        return ["unshare", "-n"]
    return []


def run(exe: str, html: str, extra: list[str], profile: str) -> subprocess.CompletedProcess:
    cmd = _offline_prefix() + [exe, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                               "--enable-logging=stderr", "--v=0", f"--user-data-dir={profile}", *OFFLINE,
                               *extra, "file://" + os.path.abspath(html)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def console_errors(stderr: str) -> list[str]:
    """Every console message (chromium logs them all at INFO, whatever
    their level; the report has no script, so any is an error or a CSP
    refusal), refused and failed loads. Messages of chromium's own pages
    (`source: chrome://...`, e.g. its new-tab "Slow network is detected"
    in chromium 156 run offline) are not the report's."""
    return [line.strip() for line in stderr.splitlines()
            if (":CONSOLE" in line and "source: chrome://" not in line) or "Refused to" in line or "net::ERR_" in line]


def check(html: str, screenshot: str | None, install: bool = True,
          window: str = "1200x2600", at: str = "") -> tuple[int, list[str]]:
    exe = browser(install)
    if exe is None:
        return 77, ["no chromium here (apt-get install chromium)"]
    text = open(html, encoding="utf-8").read()
    promised = re.findall(r"<div class='plot' id='([\w-]+)'>", text)
    problems = []
    with tempfile.TemporaryDirectory(prefix="nodemap-chromium-") as profile:
        dom = run(exe, html, ["--dump-dom", "--virtual-time-budget=5000"], profile)
        if dom.returncode != 0:
            problems.append(f"chromium --dump-dom exit {dom.returncode}: {dom.stderr[-400:]}")
        problems += console_errors(dom.stderr)
        for pid in promised:
            m = re.search(rf"<div class=\"plot\" id=\"{pid}\">(.*?)</div>", dom.stdout, re.S)
            if not m or "<svg" not in m.group(1):
                problems.append(f"plot {pid} missing or without SVG in the rendered page")
        if screenshot:
            page = from_section(html, at, profile) if at else html
            shot = run(exe, page, [f"--screenshot={os.path.abspath(screenshot)}", f"--window-size={window.replace('x', ',')}",
                                   "--hide-scrollbars"], profile)
            problems += console_errors(shot.stderr)
            if not os.path.exists(screenshot) or os.path.getsize(screenshot) < 10000:
                problems.append(f"no screenshot written ({shot.stderr[-300:]})")
            else:
                problems += right_margin(screenshot)
    lines = [f"{exe}: {len(promised)} plots promised ({', '.join(promised) or 'none'})"]
    return (1 if problems else 0), lines + problems


def from_section(html: str, at: str, folder: str) -> str:
    """A copy of the page with the body starting at `<h2 id='AT'>` (same
    head and style: the section lays out as in the full page)."""
    text = open(html, encoding="utf-8").read()
    start = text.find(f"<h2 id='{at}'>")
    if start < 0:
        raise SystemExit(f"{html}: no section with id {at!r}")
    out = os.path.join(folder, "section.html")
    with open(out, "w", encoding="utf-8") as f:
        f.write(text[:text.index("<body>") + len("<body>")] + text[start:])
    return out


def right_margin(png: str, margin: int = 8) -> list[str]:
    """Anything drawn in the last `margin` pixels of the width: the page
    keeps a blank margin there, so a mark is content cut at the window."""
    try:
        from PIL import Image
    except ImportError:
        return []
    img = Image.open(png).convert("L")
    w, h = img.size
    dark = sum(1 for x in range(w - margin, w) for y in range(h) if img.getpixel((x, y)) < 245)
    return [f"{dark} dark pixels in the right {margin} px: content wider than the window"] if dark else []


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("html")
    p.add_argument("--screenshot", metavar="PNG")
    p.add_argument("--no-install", action="store_true", help="do not apt-get install chromium when absent")
    p.add_argument("--window", default="1200x2600", metavar="WxH", help="window size of the screenshot")
    p.add_argument("--at", default="", metavar="ID", help="scroll the screenshot to this element id")
    a = p.parse_args(argv)
    rc, lines = check(a.html, a.screenshot, not a.no_install, a.window, a.at)
    print("\n".join(lines))
    print("ok: no console errors, every plot present" if rc == 0 else "FAILED" if rc == 1 else "skipped")
    return rc


if __name__ == "__main__":
    sys.exit(main())
