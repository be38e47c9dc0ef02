"""The SPANK plugin's plan cache: written here, read in C by the plugin.

`srun --nodemap` takes each node's plan from this cache when it holds the
plan of exactly the same `nodemap plan` command line, environment and node
state (slurm/cache.h says what its key holds), so a step costs no Python.
On a miss the plugin runs `nodemap plan --emit tasks` with the key in
$NODEMAP_SPANK_KEY, and `save` publishes what was printed under it, with
every nodemap module that made it (an upgrade or an edit of one misses).

The entry goes into plancache's private folder (a real directory of this
user, mode 0700, reached with O_NOFOLLOW: plancache.open_folder), written
atomically (plancache.publish). Format, text the C side parses without a
library: "nodemap.spankcache/1\\n" "made SECONDS\\n" "key BYTES\\n" KEY "\\n"
"deps COUNT\\n" COUNT x "DEV INO SIZE MTIME_NS CTIME_NS PATH\\n"
"plan BYTES\\n" PLAN "\\n" "crc XXXXXXXX\\n", the CRC-32 of everything before.
Stdlib only.
"""

from __future__ import annotations

import os
import sys
import time
import zlib

from . import plancache

SCHEMA = b"nodemap.spankcache/1"
KEY_VAR = "NODEMAP_SPANK_KEY"  # slurm/cache.h: NM_CACHE_KEY_VAR


def key_from_env() -> bytes | None:
    """The key the plugin passed, as the bytes it computed."""
    return os.environb.get(KEY_VAR.encode()) if hasattr(os, "environb") else None


def save(key: bytes, plan: str) -> bool:
    """Publish `plan` (the task lines as printed) under `key`; False when it
    was not cached (the folder is not trusted, a module path cannot be
    written, a write failed): the plugin then plans again next time."""
    try:
        text = plan.encode(sys.stdout.encoding or "utf-8", sys.stdout.errors or "strict")
    except (UnicodeError, LookupError):
        return False
    deps = _modules()
    if deps is None:
        return False
    now = time.time()
    try:
        dfd = plancache.open_folder()
    except plancache.Refused:
        return False
    try:
        saved = plancache.publish(dfd, plancache.entry_name(key, "spank-"), entry(key, text, deps, int(now)))
        plancache.prune(dfd, now)
        return saved
    finally:
        os.close(dfd)


def entry(key: bytes, plan: bytes, deps: list[bytes], made: int) -> bytes:
    """An entry's bytes: `deps` are whole lines (DEV INO SIZE MTIME_NS CTIME_NS PATH\\n)."""
    body = b"".join([SCHEMA, b"\n", b"made %d\n" % made, b"key %d\n" % len(key), key, b"\n",
                     b"deps %d\n" % len(deps), *deps, b"plan %d\n" % len(plan), plan, b"\n"])
    return body + b"crc %08x\n" % zlib.crc32(body)


def _modules() -> list[bytes] | None:
    """One line per nodemap module loaded (what made the plan): its identity."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
    lines = []
    for m in list(sys.modules.values()):
        path = getattr(m, "__file__", None)
        if not path or not os.path.abspath(path).startswith(root):
            continue
        path = os.path.abspath(path)
        try:
            st = os.stat(path)
        except OSError:
            return None
        p = os.fsencode(path)
        if b"\n" in p:
            return None
        lines.append(b"%d %d %d %d %d %s\n" % (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, p))
    return sorted(lines)
