"""sysfs snapshots given as a directory or a tarball (.tar.bz2, .tar.gz, .tar.xz, .tar).

hwloc's tests/hwloc/linux tarballs unpack to NAME/ holding sys/ and proc/;
that single top-level directory is found, whatever its name. A tarball is
unpacked safely into a temporary directory: no absolute or '..' member
names, no member below a symlink member, no device files, fifos or hard
links, and limits on the total size and member count (a small compressed
file can hold a huge tree). Symlinks are kept as written: the sysfs reader
resolves them inside the snapshot root.
"""

from __future__ import annotations

import os
import shutil
import tarfile

from ..errors import InputError, NodemapError
from ..scratch import scratch_dir
from .model import Topology, replace

__all__ = ["open_input", "read_tarball", "read_dir", "unpack", "find_root"]

MAX_BYTES = 256 << 20  # sysfs snapshots are a few MB at most
# Members and headers of one tarball. The largest hwloc test snapshot has
# 10,669 headers (9,384 members, 40 PUs); a snapshot holds 30-110 members per
# PU. Unpacking costs ~1 ms a member on a busy machine (creating and removing
# it), so the headers are counted first (_precount).
MAX_MEMBERS = 50_000
MAX_NAME = 4096  # bytes of a member name or link target (Linux's PATH_MAX)
MAX_PAX = 64 << 10  # bytes of one pax extended header
MAX_EXTENDED = 32 << 20  # bytes of all long-name and pax headers: tarfile keeps every member's name


class _Refused(Exception):
    """A header over the limits, raised while tarfile reads it."""


class _Counted(tarfile.TarInfo):
    """TarInfo that counts every header, extension headers included, against
    the limits before tarfile reads what they announce: a GNU long-name
    header is read whole into memory by tarfile (a 64 MB name) and chains of
    them never reach the member loop that counts members and bytes."""

    @classmethod
    def fromtarfile(cls, tar):
        n = getattr(tar, "_nodemap_headers", 0) + 1
        tar._nodemap_headers = n
        if n > MAX_MEMBERS:
            raise _too_many()
        return super().fromtarfile(tar)

    def _proc_gnulong(self, tar):
        if self.size > MAX_NAME:
            raise _Refused(f"a long-name header of {self.size} bytes (over {MAX_NAME}): not a sysfs snapshot")
        self._count(tar)
        return super()._proc_gnulong(tar)

    def _proc_pax(self, tar):
        if self.size > MAX_PAX:
            raise _Refused(f"a pax header of {self.size} bytes (over {MAX_PAX}): not a sysfs snapshot")
        self._count(tar)
        return super()._proc_pax(tar)

    def _count(self, tar) -> None:
        total = getattr(tar, "_nodemap_extended", 0) + self.size
        tar._nodemap_extended = total
        if total > MAX_EXTENDED:
            raise _Refused(f"more than {MAX_EXTENDED >> 20} MiB of long names and pax headers: not a sysfs snapshot")


def open_input(path: str | os.PathLike) -> Topology:
    """A Topology from a snapshot directory or tarball."""
    path = os.fspath(path)
    return read_dir(path) if os.path.isdir(path) else read_tarball(path)


def read_dir(path: str | os.PathLike) -> Topology:
    from . import sysfs

    return sysfs.read(find_root(os.fspath(path)))


def read_tarball(path: str | os.PathLike) -> Topology:
    path = os.fspath(path)
    with scratch_dir("nodemap-snapshot-") as tmp:  # SIGTERM while unpacking removes it too
        unpack(path, tmp)
        try:
            topo = read_dir(tmp)
        except InputError as e:  # name the tarball, not the temporary folder that is about to go
            text = str(e).removeprefix(tmp + ": ")
            raise InputError(path, text.replace(tmp + "/", "").replace(tmp, "the snapshot")) from None
    return _sourced(topo, path)


def find_root(path: str) -> str:
    """The directory holding sys/: `path` itself or its single subdirectory."""
    if os.path.isdir(os.path.join(path, "sys")):
        return path
    subs = [e.path for e in os.scandir(path) if e.is_dir(follow_symlinks=False)
            and os.path.isdir(os.path.join(e.path, "sys"))]
    if len(subs) != 1:
        what = "is empty" if not os.listdir(path) else "holds no sys/ directory" if not subs else \
            f"holds {len(subs)} snapshots ({', '.join(sorted(os.path.basename(s) for s in subs))})"
        raise InputError(path, f"not a sysfs snapshot: it {what} (give the directory holding sys/ and proc/)")
    return subs[0]


def unpack(path: str, dest: str) -> None:
    try:
        with tarfile.open(path, "r:*", tarinfo=_Counted) as tar:
            _precount(tar.fileobj)
        with tarfile.open(path, "r:*", tarinfo=_Counted) as tar:  # again: no seeking back in a compressed stream
            _extract(tar, path, dest)
    except NodemapError:
        raise
    except _Refused as e:
        raise InputError(path, str(e)) from None
    except RecursionError:
        raise InputError(path, "extension headers chained without end: not a sysfs snapshot") from None
    except (tarfile.TarError, EOFError, OSError, ValueError) as e:
        raise InputError(path, f"cannot unpack the snapshot ({type(e).__name__}: {e}); "
                         "give an intact .tar/.tar.gz/.tar.bz2/.tar.xz") from None


def _too_many() -> _Refused:
    return _Refused(f"more than {MAX_MEMBERS} members and headers: not a sysfs snapshot of a node nodemap reads "
                    "(for a larger node give its hwloc XML: lstopo-no-graphics --of xml)")


def _too_big() -> _Refused:
    return _Refused(f"unpacks to more than {MAX_BYTES >> 20} MiB: not a sysfs snapshot")


_NO_DATA = frozenset(b"123456")  # tar types whose size field tarfile does not skip: links, devices, dirs, fifos


def _precount(f) -> None:
    """Walk the raw headers of the (decompressed) tar stream `f`, nothing
    written, and refuse past MAX_MEMBERS headers or MAX_BYTES of data. It
    costs ~7 us a header where tarfile's members cost ~40 and creating and
    removing them on disk ~1 ms (250,000 empty folders took 76 s). Anything
    unusual (a bad checksum, a base-256 size) ends the walk refusing
    nothing: the unpacking pass, with its own limits, reads it."""
    f.seek(0)
    headers = total = 0
    while True:
        block = f.read(512)
        if len(block) < 512 or not any(block) or _octal(block[148:156]) != sum(block) - sum(block[148:156]) + 256:
            return
        size = _octal(block[124:136])
        if size is None:
            return
        headers += 1
        if headers > MAX_MEMBERS:
            raise _too_many()
        if size and block[156] not in _NO_DATA:
            total += size
            if total > MAX_BYTES:
                raise _too_big()
            f.seek((size + 511) & ~511, 1)


def _octal(field: bytes) -> int | None:
    """A header's octal number; None unless it is only digits 0-7 (int()
    would also take "-1000", which would walk backwards without end)."""
    text = field.strip(b"\0 ")
    return None if text.strip(b"01234567") else int(text or b"0", 8)


def _limited(tar: tarfile.TarFile):
    """The members of `tar`, refused past MAX_MEMBERS or MAX_BYTES of files."""
    total = 0
    for count, m in enumerate(tar, 1):
        if count > MAX_MEMBERS:
            raise _too_many()
        total += m.size if m.isfile() else 0
        if total > MAX_BYTES:
            raise _too_big()
        yield m


def _extract(tar: tarfile.TarFile, path: str, dest: str) -> None:
    links: set[str] = set()
    for m in _limited(tar):
        name = _safe_name(path, m.name)
        if not name:
            continue
        parents = name.split("/")
        if any("/".join(parents[:k]) in links for k in range(1, len(parents))):
            raise InputError(path, f"member {_cut(m.name)} lies below a symlink member: refused")
        target = os.path.join(dest, *parents)
        if m.isdir():
            os.makedirs(target, exist_ok=True)
        elif m.issym():
            if len(m.linkname) > MAX_NAME:
                raise InputError(path, f"member {_cut(m.name)} links to a {len(m.linkname)}-character target: refused")
            os.makedirs(os.path.dirname(target), exist_ok=True)
            os.symlink(m.linkname, target)
            links.add(name)
        elif m.isfile():
            os.makedirs(os.path.dirname(target), exist_ok=True)
            src = tar.extractfile(m)
            with open(target, "xb") as out:
                shutil.copyfileobj(src, out)
        else:
            kind = "hard link" if m.islnk() else "device file or fifo"
            raise InputError(path, f"member {_cut(m.name)} is a {kind}: refused (a sysfs snapshot holds files, "
                             "directories and symlinks only)")


def _cut(name: str) -> str:
    return repr(name) if len(name) <= 80 else repr(name[:80]) + f"... ({len(name)} characters)"


def _safe_name(path: str, name: str) -> str:
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if name.startswith("/") or ".." in parts:
        raise InputError(path, f"member {_cut(name)} would unpack outside the target directory: refused")
    return "/".join(parts)


def _sourced(topo: Topology, path: str) -> Topology:
    return replace(topo, source=f"sysfs:{path}")
