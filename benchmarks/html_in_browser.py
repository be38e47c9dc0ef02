"""Open a `nodemap check` HTML report in a real headless browser, offline.

  python3 benchmarks/html_in_browser.py REPORT.html [--screenshot PNG] [--no-install]

Debian's chromium (installed with apt-get when absent, unless --no-install)
loads the file with networking disabled (a separate network namespace
where `unshare -n` works, and a dead proxy and host resolver either way).
Checks: no console message at error level, no blocked or failed load, and
every plot the document promises (`<div class='plot' id=...>`) present in
the rendered DOM with its SVG. Saves a screenshot. Exit 0 when all hold,
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
    refusal), refused and failed loads."""
    return [line.strip() for line in stderr.splitlines()
            if ":CONSOLE" in line or "Refused to" in line or "net::ERR_" in line]


def check(html: str, screenshot: str | None, install: bool = True) -> tuple[int, list[str]]:
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
            shot = run(exe, html, [f"--screenshot={os.path.abspath(screenshot)}", "--window-size=1200,2600",
                                   "--hide-scrollbars"], profile)
            problems += console_errors(shot.stderr)
            if not os.path.exists(screenshot) or os.path.getsize(screenshot) < 10000:
                problems.append(f"no screenshot written ({shot.stderr[-300:]})")
    lines = [f"{exe}: {len(promised)} plots promised ({', '.join(promised) or 'none'})"]
    return (1 if problems else 0), lines + problems


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("html")
    p.add_argument("--screenshot", metavar="PNG")
    p.add_argument("--no-install", action="store_true", help="do not apt-get install chromium when absent")
    a = p.parse_args(argv)
    rc, lines = check(a.html, a.screenshot, not a.no_install)
    print("\n".join(lines))
    print("ok: no console errors, every plot present" if rc == 0 else "FAILED" if rc == 1 else "skipped")
    return rc


if __name__ == "__main__":
    sys.exit(main())
