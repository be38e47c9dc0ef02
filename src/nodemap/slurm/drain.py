"""Acting on a check's verdict in Slurm: drain a node that failed for a
hardware cause, resume it once it passes again, but only if nodemap drained
it (the NHC convention: a reason that does not start with "nodemap:" was
written by a person or another tool, and is theirs to clear).

Everything goes through `scontrol` with a deadline; a missing, failing or
slow scontrol is one line (`SlurmError`, exit 2) and nothing is drained. A
lock per node (a flock on a file in a private runtime folder) keeps two
checks of one node from acting at once: the second says who holds it.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
from dataclasses import dataclass
from typing import Mapping

from ..errors import NodemapError

PREFIX = "nodemap:"
# Slurm stores any length, but sinfo -R, the logs and the admins read it in
# one line: NHC and Slurm's own messages stay within this.
MAX_REASON = 100
TIMEOUT = 10.0  # seconds per scontrol call: a slurmctld that does not answer in that is down


class SlurmError(NodemapError):
    """scontrol missing, failing or slow; a lock held by another check."""


@dataclass(frozen=True)
class Node:
    name: str
    state: str  # "IDLE+DRAIN", "MIXED", "DOWN+DRAIN"...
    reason: str  # without Slurm's "[user@time]" suffix; "" when none

    @property
    def drained(self) -> bool:
        return "DRAIN" in self.state.upper()

    @property
    def ours(self) -> bool:
        return self.reason.startswith(PREFIX)


def reason(area: str, figure: str, measured: str, limit: str) -> str:
    """'nodemap: <area>: <figure> <measured> (limit <limit>)', on one line
    and cut at MAX_REASON characters (the limit kept when it fits). Its
    parts come from the node (device and model names): a control character
    would reach sinfo's terminal, a NUL would stop scontrol from starting."""
    clean = lambda s: " ".join(  # noqa: E731  (one line of printable characters, no key=value)
        "".join(c if c.isprintable() else " " for c in str(s)).replace("=", ":").split())
    head = f"{PREFIX} {clean(area)}: {clean(figure)} {clean(measured)}"
    tail = f" (limit {clean(limit)})" if clean(limit) else ""
    text = head + tail
    if len(text) <= MAX_REASON:
        return text
    room = MAX_REASON - len(tail) - 3
    if room < len(PREFIX) + 10:  # a limit too long to keep whole: cut the line's end, not a complete head
        return text[:MAX_REASON - 3].rstrip() + "..."
    return head[:room].rstrip() + "..." + tail


def scontrol(args: list[str], timeout: float | None = None) -> str:
    """stdout of `scontrol ARGS`, or SlurmError saying why not."""
    from ..proc import run_group

    timeout = TIMEOUT if timeout is None else timeout

    exe = shutil.which("scontrol")
    if exe is None:
        raise SlurmError("scontrol is not on PATH, nothing was drained: install slurm-client (or run where Slurm is), "
                         "or leave out --slurm-drain")
    try:
        code, out, err = run_group([exe, *args], None, timeout)
    except subprocess.TimeoutExpired:
        raise SlurmError(f"scontrol {args[0]} did not answer within {timeout:g} s (slurmctld down or slow?): "
                         "nothing was drained") from None
    except OSError as e:
        raise SlurmError(f"scontrol does not start ({e.strerror or e}): nothing was drained") from None
    if code != 0:
        last = (err.strip() or out.strip()).splitlines()[-1:] or ["no message"]
        raise SlurmError(f"scontrol {' '.join(args[:2])} exited {code}: {last[0][:200]}; nothing was drained "
                         "(is slurmctld up and this a Slurm node? else leave out --slurm-drain)")
    return out


_FIELD = re.compile(r"(?:^|\s)(State|Reason)=(.*?)(?=\s[A-Z][A-Za-z]*=|$)")


def show(name: str, timeout: float | None = None) -> Node:
    """The node's state and reason from `scontrol show node -o NAME`."""
    out = scontrol(["show", "node", "-o", name], timeout).strip()
    line = next((ln for ln in out.splitlines() if ln.startswith(f"NodeName={name} ")), None)
    if line is None:
        raise SlurmError(f"scontrol show node {name}: no such node in Slurm (is SLURMD_NODENAME the NodeName?)")
    fields = dict(_FIELD.findall(line))
    why = re.sub(r"\s*\[[^\]]*@[^\]]*\]\s*$", "", fields.get("Reason", "")).strip()
    return Node(name, fields.get("State", ""), "" if why in ("(null)", "none") else why)


def drain_command(name: str, why: str) -> list[str]:
    return ["scontrol", "update", f"NodeName={name}", "State=DRAIN", f"Reason={why}"]


def resume_command(name: str) -> list[str]:
    return ["scontrol", "update", f"NodeName={name}", "State=RESUME"]


def decide(node: Node, healthy: bool | None, why: str) -> tuple[list[str] | None, str]:
    """(the scontrol command to run or None, what and why, one line).
    healthy: True passed (configuration failures included: the job's, not
    the node's), False failed for a hardware cause, None could not judge
    (`why` says why: busy, interrupted, nothing measured): neither drained
    nor resumed."""
    if healthy is None:
        return None, f"{node.name}: left as it is, neither drained nor resumed: {why or 'could not judge'}"
    if healthy:
        if node.drained and node.ours:
            return resume_command(node.name), f"{node.name}: resumed (nodemap had drained it: {node.reason})"
        return None, f"{node.name}: healthy" + (f", left drained (not nodemap's reason: {node.reason})"
                                                 if node.drained else "")
    if node.drained and not node.ours:
        return None, f"{node.name}: already drained by someone else ({node.reason}), reason kept; nodemap: {why}"
    if node.drained and node.reason == why:
        return None, f"{node.name}: already drained for {why}"
    return drain_command(node.name, why), f"{node.name}: drained: {why}"


def act(name: str, healthy: bool | None, why: str, dry_run: bool = False, timeout: float | None = None) -> str:
    """Read the node, decide, and run the command (or, `dry_run`, print it
    instead). Returns the one line saying what was done."""
    if healthy is None:
        return decide(Node(name, "", ""), None, why)[1]
    cmd, said = decide(show(name, timeout), healthy, why)
    if cmd is None:
        return said
    if dry_run:
        return f"{said} (dry run, not run: {shlex.join(cmd)})"
    scontrol(cmd[1:], timeout)
    return said


# --- one check per node at a time -------------------------------------------------------


def runtime_dir(env: Mapping[str, str]) -> str:
    """A folder only this user can write: NODEMAP_RUNTIME_DIR, else
    $XDG_RUNTIME_DIR/nodemap, else /run/nodemap for root, else
    /tmp/nodemap-UID; created 0700, refused when it is a link or someone
    else's (another user must not be able to plant the lock)."""
    base = env.get("NODEMAP_RUNTIME_DIR")
    if not base:
        xdg = env.get("XDG_RUNTIME_DIR")
        base = (os.path.join(xdg, "nodemap") if xdg else "/run/nodemap" if os.geteuid() == 0 and os.path.isdir("/run")
                else f"/tmp/nodemap-{os.geteuid()}")
    try:
        os.makedirs(base, mode=0o700, exist_ok=True)
        st = os.lstat(base)
    except OSError as e:
        raise SlurmError(f"runtime folder {base}: {e.strerror or e}; set NODEMAP_RUNTIME_DIR to a private folder")
    import stat

    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o022:
        raise SlurmError(f"runtime folder {base} is not a private folder of this user (a link, someone else's, or "
                         "writable by others): set NODEMAP_RUNTIME_DIR to a private folder")
    return base


class NodeLock:
    """`with NodeLock(folder, name):` one holder per node; the second gets a
    SlurmError naming the first's pid. The hold is a flock on the file, so
    the kernel drops it when its holder dies (killed by Slurm's timeout):
    no stale lock, and a pid in a file left behind (reused after a reboot
    by a live process) holds nothing."""

    def __init__(self, folder: str, name: str) -> None:
        self.path = os.path.join(folder, f"check-{name}.lock")
        self.fd = -1

    def __enter__(self) -> "NodeLock":
        import fcntl

        flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
        for _ in range(3):
            try:
                fd = os.open(self.path, flags, 0o600)
            except OSError as e:  # ELOOP: a link planted there, never followed
                raise SlurmError(f"{self.path}: cannot open the node's lock ({e.strerror or e}): remove it, or set "
                                 "NODEMAP_RUNTIME_DIR to a private folder") from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.read(fd, 32).decode(errors="replace").strip()
                os.close(fd)
                raise SlurmError(f"another nodemap check (pid {holder or '?'}) of this node holds {self.path}: "
                                 "this one stops without judging (exit 2); it runs again at the next interval"
                                 ) from None
            if _same_file(fd, self.path):
                os.ftruncate(fd, 0)
                os.write(fd, f"{os.getpid()}\n".encode())
                self.fd = fd
                return self
            os.close(fd)  # its last holder removed it between our open and our lock: take the new one
        raise SlurmError(f"{self.path}: could not take the lock (another check is racing for it); try again")

    def __exit__(self, *exc: object) -> None:
        if self.fd >= 0:
            try:
                os.unlink(self.path)  # still held: a check that opened it meanwhile sees it is gone and retries
            except FileNotFoundError:
                pass
            os.close(self.fd)
            self.fd = -1


def _same_file(fd: int, path: str) -> bool:
    """Whether `path` still names the open file `fd`."""
    try:
        st = os.stat(path, follow_symlinks=False)
    except FileNotFoundError:
        return False
    own = os.fstat(fd)
    return (st.st_dev, st.st_ino) == (own.st_dev, own.st_ino)
