"""Acting on a check's verdict in Slurm: drain a node that failed for a
hardware cause, resume it once a check that judged what the drain names
passes, but only if nodemap drained it (the NHC convention: a reason that
does not start with "nodemap:" was written by a person or another tool,
and is theirs to clear).

Everything goes through `scontrol` with a deadline; a missing, failing or
slow scontrol is one line (`SlurmError`, exit 2) and nothing is drained. A
lock per node (a flock on a file in a private runtime folder) lets the
passive health checks of one node run side by side and a measuring check
run alone; a check that cannot have it in time says who holds it.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
from dataclasses import dataclass
from typing import Mapping, Protocol

from ..errors import NodemapError

PREFIX = "nodemap:"
# Slurm stores any length, but sinfo -R, the logs and the admins read it in
# one line: NHC and Slurm's own messages stay within this.
MAX_REASON = 100
TIMEOUT = 10.0  # seconds per scontrol call: a slurmctld that does not answer in that is down
# What is read of scontrol's output: one node's line is a few KB (`show node -o`); a
# reason of 300 MB, read whole, took 903 MB and 26 s.
MAX_OUTPUT = 1 << 20


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


def _clean(s: object) -> str:
    """One line of printable characters, no key=value: a reason's parts come
    from the node (device and model names), and a control character would
    reach sinfo's terminal, a NUL would stop scontrol from starting."""
    return " ".join("".join(c if c.isprintable() else " " for c in str(s)).replace("=", ":").split())


def head(area: str, figure: str) -> str:
    """'nodemap: <area>: <figure> ': how every reason about that item starts."""
    return f"{PREFIX} {_clean(area)}: {_clean(figure)} "


def reason(area: str, figure: str, measured: str, limit: str) -> str:
    """'nodemap: <area>: <figure> <measured> (limit <limit>)', on one line
    and cut at MAX_REASON characters (the limit kept when it fits)."""
    start = head(area, figure) + _clean(measured)
    tail = f" (limit {_clean(limit)})" if _clean(limit) else ""
    text = start.rstrip() + tail
    if len(text) <= MAX_REASON:
        return text
    room = MAX_REASON - len(tail) - 3
    if room < len(PREFIX) + 10:  # a limit too long to keep whole: cut the line's end, not a complete head
        return text[:MAX_REASON - 3].rstrip() + "..."
    return start[:room].rstrip() + "..." + tail


def names(why: str, item_head: str) -> bool:
    """Whether the drain reason `why` is about the item whose reasons start
    with `item_head` (head()), also when `why` was cut before its end."""
    if why.startswith(item_head) or why == item_head.rstrip():
        return True
    cut = why.find("...")
    return cut > len(PREFIX) + 1 and item_head.startswith(why[:cut]) and ": " in why[len(PREFIX):cut]


def scontrol(args: list[str], timeout: float | None = None) -> str:
    """stdout of `scontrol ARGS`, or SlurmError saying why not. Bytes that
    are not UTF-8 (a reason someone wrote in another encoding) are replaced,
    not fatal: nodemap's own reasons are printable UTF-8, so a replaced byte
    never makes a reason look like nodemap's or change one that is."""
    from ..proc import TooMuchOutput, run_group

    timeout = TIMEOUT if timeout is None else timeout

    exe = shutil.which("scontrol")
    if exe is None:
        raise SlurmError("scontrol is not on PATH, nothing was drained: install slurm-client (or run where Slurm is), "
                         "or leave out --slurm-drain")
    try:
        code, raw, raw_err = run_group([exe, *args], None, timeout, text=False, limit=MAX_OUTPUT)
    except subprocess.TimeoutExpired:
        raise SlurmError(f"scontrol {args[0]} did not answer within {timeout:g} s (slurmctld down or slow?): "
                         "nothing was drained") from None
    except TooMuchOutput as e:
        raise SlurmError(f"scontrol {' '.join(args[:2])} printed more than {MAX_OUTPUT >> 20} MiB on {e.stream} "
                         "(a node's line is a few KB; a runaway reason or comment?): nothing was drained") from None
    except OSError as e:
        raise SlurmError(f"scontrol does not start ({e.strerror or e}): nothing was drained") from None
    out, err = raw.decode(errors="replace"), raw_err.decode(errors="replace")
    if code != 0:
        last = (err.strip() or out.strip()).splitlines()[-1:] or ["no message"]
        raise SlurmError(f"scontrol {' '.join(args[:2])} exited {code}: {_clean(last[0])[:200]}; nothing was drained "
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
    # Slurm's "[user@time]" suffix: the last bracket, not from a '[' the reason holds
    why = re.sub(r"\s*\[[^\[\]]*@[^\[\]]*\]\s*$", "", fields.get("Reason", "")).strip()
    return Node(name, fields.get("State", ""), "" if why in ("(null)", "none") else why)


def drain_command(name: str, why: str) -> list[str]:
    return ["scontrol", "update", f"NodeName={name}", "State=DRAIN", f"Reason={why}"]


def resume_command(name: str) -> list[str]:
    return ["scontrol", "update", f"NodeName={name}", "State=RESUME"]


class Scope(Protocol):
    """What a check judged (slurm/verdict.py scope): a passing check resumes,
    and a failing one replaces, only a nodemap drain whose reason it covers."""
    level: str

    def covers(self, why: str) -> bool: ...


def decide(node: Node, healthy: bool | None, why: str, scope: Scope) -> tuple[list[str] | None, str]:
    """(the scontrol command to run or None, what and why, one line).
    healthy: True passed (configuration failures included: the job's, not
    the node's), False failed for a hardware cause, None could not judge
    (`why` says why: busy, interrupted, nothing measured): neither drained
    nor resumed. A nodemap drain the check did not judge (a health check
    and a drain for a measured figure, a budget that left that step out)
    stays as it is: only a check that judged it again may clear it."""
    if healthy is None:
        return None, f"{node.name}: left as it is, neither drained nor resumed: {why or 'could not judge'}"
    judged = not (node.drained and node.ours) or scope.covers(node.reason)
    if healthy:
        if node.drained and node.ours:
            if judged:
                return resume_command(node.name), f"{node.name}: resumed (nodemap had drained it: {node.reason})"
            return None, (f"{node.name}: healthy as far as --level {scope.level} judged it, left drained: this check "
                          f"did not judge what nodemap drained it for ({node.reason}); a check that does resumes it")
        return None, f"{node.name}: healthy" + (f", left drained (not nodemap's reason: {node.reason})"
                                                 if node.drained else "")
    if node.drained and not node.ours:
        return None, f"{node.name}: already drained by someone else ({node.reason}), reason kept; nodemap: {why}"
    if node.drained and node.reason == why:
        return None, f"{node.name}: already drained for {why}"
    if not judged:
        return None, (f"{node.name}: already drained by nodemap for what this check did not judge ({node.reason}), "
                      f"reason kept; it also fails: {why}")
    return drain_command(node.name, why), f"{node.name}: drained: {why}"


def act(name: str, healthy: bool | None, why: str, scope: Scope, dry_run: bool = False,
        timeout: float | None = None) -> str:
    """Read the node, decide, and run the command (or, `dry_run`, print it
    instead). Returns the one line saying what was done."""
    if healthy is None:
        return decide(Node(name, "", ""), None, why, scope)[1]
    cmd, said = decide(show(name, timeout), healthy, why, scope)
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


class LockBusy(SlurmError):
    """Another check held the node's lock for longer than this one waits."""


class NodeLock:
    """`with NodeLock(folder, name, shared, wait, level):` the node's lock,
    a flock on `check-NAME.lock`. The passive health level takes it shared
    (health checks from HealthCheckProgram, prolog and epilog run side by
    side: they measure nothing and act alike); a measuring level takes it
    exclusive (its figures and its drain are its own). A check waits up to
    `wait` seconds for the lock, then raises LockBusy naming the holder's
    pid and level. The kernel drops a hold when its holder dies (killed by
    Slurm's timeout): no stale lock, and a pid left in the file (reused
    after a reboot by a live process) holds nothing. The file stays: a
    check that unlinked it while a shared holder still held it would let
    the next exclusive one in beside that holder."""

    RECORD = 32  # bytes of the holder's "PID LEVEL" record (31 and a newline), fixed: shared holders overwrite it whole

    def __init__(self, folder: str, name: str, shared: bool = False, wait: float = 0.0, level: str = "") -> None:
        self.path = os.path.join(folder, f"check-{name}.lock")
        self.shared, self.wait, self.level = shared, max(0.0, wait), level
        self.fd = -1

    def __enter__(self) -> "NodeLock":
        import fcntl
        import time

        flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
        try:
            fd = os.open(self.path, flags, 0o600)
        except OSError as e:  # ELOOP: a link planted there, never followed
            raise SlurmError(f"{self.path}: cannot open the node's lock ({e.strerror or e}): remove it, or set "
                             "NODEMAP_RUNTIME_DIR to a private folder") from None
        mode = (fcntl.LOCK_SH if self.shared else fcntl.LOCK_EX) | fcntl.LOCK_NB
        end = time.monotonic() + self.wait
        while True:
            try:
                fcntl.flock(fd, mode)
                break
            except BlockingIOError:
                left = end - time.monotonic()
                if left > 0:
                    time.sleep(min(0.1, left))  # polled: a blocking flock could not be bounded without a signal
                    continue
                holder = os.pread(fd, self.RECORD, 0).decode(errors="replace").split()
                os.close(fd)
                who = f"pid {holder[0]}" + (f", --level {holder[1]}" if len(holder) > 1 else "") if holder else "pid ?"
                raise LockBusy(f"another nodemap check ({who}) of this node holds {self.path} "
                               f"(waited {self.wait:g} s, --lock-wait)") from None
        if not self.shared:
            os.ftruncate(fd, 0)
        os.pwrite(fd, f"{f'{os.getpid()} {self.level}':<31.31}\n".encode(), 0)  # RECORD bytes, whole
        self.fd = fd
        return self

    def __exit__(self, *exc: object) -> None:
        if self.fd >= 0:
            os.close(self.fd)  # the hold ends with the descriptor
            self.fd = -1
