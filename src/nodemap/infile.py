"""The one way nodemap reads a file the user named: the reading side of outfile.py.

Site files (--expect), saved documents (report, check --fleet --from),
watch timelines and topology inputs are opened non-blocking and checked on
the open descriptor: only a regular file is read (after following links,
so a link to a file is fine and a link to /dev/zero is not), and never
more than a limit that depends on what the file holds. A FIFO must not
hang the reader and a device must not be read whole; every refusal is one
line naming the file.
"""

from __future__ import annotations

import os
import stat
TYPE_CHECKING = False  # typing costs ~2 ms of every `nodemap topo` (tests/test_topology_record.py)
if TYPE_CHECKING:
    from typing import Any

from .errors import InputError

MAX_DOCUMENT = 64 << 20  # bytes of a saved JSON document: a check.json of a 16k-PU node is a few MB

_OPEN_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | getattr(os, "O_CLOEXEC", 0)


def open_regular(path: str, limit: int, what: str = "file") -> int:
    """A descriptor open on `path` for reading, refused (InputError naming
    the path) unless it is a regular file of at most `limit` bytes."""
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except FileNotFoundError:
        raise InputError(path, f"no such file; give the path of a {what}") from None
    except IsADirectoryError:
        raise InputError(path, f"is a folder; give the path of a {what}") from None
    except OSError as e:  # ELOOP, EACCES, ENXIO (a socket)...
        raise InputError(path, f"cannot open it ({e.strerror or e}); give a readable {what}") from None
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise InputError(path, f"is a folder; give the path of a {what}")
        if not stat.S_ISREG(st.st_mode):
            raise InputError(path, f"is a FIFO, device or socket, not a file; give the path of a {what}")
        if st.st_size > limit:
            from .units import format_size

            raise InputError(path, f"is {format_size(st.st_size)}, more than any {what} "
                                   f"(nodemap reads at most {format_size(limit)})")
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_fd(fd: int, limit: int) -> bytes:
    """Up to `limit` bytes, to the end of the file (sysfs attributes come in
    one read; /proc/cpuinfo of a big node in several)."""
    data = os.read(fd, min(limit, 1 << 16))
    if not data or len(data) >= limit:
        return data
    chunks = [data]
    size = len(data)
    while size < limit:
        more = os.read(fd, min(limit - size, 1 << 16))
        if not more:
            break
        chunks.append(more)
        size += len(more)
    return b"".join(chunks)


def read(path: str, limit: int, what: str = "file") -> bytes:
    """The whole of a regular file of at most `limit` bytes (a file still
    growing past the limit while read is refused too, not cut)."""
    fd = open_regular(path, limit, what)
    try:
        data = read_fd(fd, limit + 1)
    except OSError as e:
        raise InputError(path, f"cannot read it ({e.strerror or e})") from None
    finally:
        os.close(fd)
    if len(data) > limit:
        from .units import format_size

        raise InputError(path, f"grew past {format_size(limit)} while read; give a {what} nothing is writing to")
    return data


def read_text(path: str, limit: int, what: str = "file") -> str:
    """A regular file's UTF-8 text (see `read`)."""
    return decode(path, read(path, limit, what), what)


def decode(path: str, data: bytes, what: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        at = f"line {line}: " if b"\n" in data.rstrip(b"\n") else ""  # one line: its name says which
        raise InputError(path, f"{at}byte {data[e.start]:#04x} is not UTF-8 text; give a {what} "
                               "as nodemap wrote it") from None


def parse_json(path: str, text: str, what: str) -> Any:
    """JSON text as Python objects; any damage is one InputError naming the
    file (and line), never a traceback: nesting past the parser's recursion,
    an integer of more than 4300 digits, a syntax error."""
    import json  # here: json imports re, which `nodemap topo` does without

    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        at = f"line {e.lineno}: " if "\n" in text.strip() else ""  # one line (of a .jsonl): its name says which
        raise InputError(path, f"{at}not JSON ({e.msg}); give a {what} as nodemap wrote it") from None
    except RecursionError:
        raise InputError(path, f"nested too deep to be a {what}; give one as nodemap wrote it") from None
    except (ValueError, MemoryError) as e:  # "Exceeds the limit (4300 digits) for integer string conversion"
        reason = str(e).split(";")[0][:120] or type(e).__name__
        raise InputError(path, f"not a {what} ({reason}); give one as nodemap wrote it") from None
