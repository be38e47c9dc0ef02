"""sysfs snapshots given as a directory or a tarball (.tar.bz2, .tar.gz, .tar.xz, .tar).

hwloc's tests/hwloc/linux tarballs unpack to NAME/ holding sys/ and proc/;
that single top-level directory is found, whatever its name. A tarball is
read into memory, never unpacked to disk (creating and removing its
thousands of members cost 10-40x reading them): no absolute or '..'
member names, no member below a symlink member, no member twice, no device
files, fifos or hard links, and limits on the total size and member count
(a small compressed file can hold a huge tree). Symlinks are kept as
written: the sysfs reader resolves them inside the snapshot root, as in an
unpacked directory (root.py).
"""

from __future__ import annotations

import functools
import os
import struct
import sys
import zlib

from ..errors import InputError, NodemapError
from .model import Topology, replace
from .root import Root
from ..text import shown

TYPE_CHECKING = False
if TYPE_CHECKING:
    import tarfile

__all__ = ["open_input", "read_tarball", "read_dir", "load", "unpack", "find_root"]

MAX_BYTES = 256 << 20  # sysfs snapshots are a few MB at most
# Members and headers of one tarball. The largest hwloc test snapshot has
# 10,669 headers (9,384 members, 40 PUs); a snapshot holds 30-110 members per
# PU.
MAX_MEMBERS = 50_000
MAX_NAME = 4096  # bytes of a member name or link target (Linux's PATH_MAX)
MAX_PAX = 64 << 10  # bytes of one pax extended header
MAX_EXTENDED = 32 << 20  # bytes of all long-name and pax headers: tarfile keeps every member's name


class _Refused(Exception):
    """A header over the limits, raised while the walk or tarfile reads it."""


def _long_name(size: int) -> None:
    if size > MAX_NAME:
        raise _Refused(f"a long-name header of {size} bytes (over {MAX_NAME}): not a sysfs snapshot")


def _extended(total: int) -> int:
    """`total` bytes of extension headers, refused past MAX_EXTENDED."""
    if total > MAX_EXTENDED:
        raise _Refused(f"more than {MAX_EXTENDED >> 20} MiB of long names and pax headers: not a sysfs snapshot")
    return total


def open_input(path: str | os.PathLike) -> Topology:
    """A Topology from a snapshot directory or tarball."""
    path = os.fspath(path)
    return read_dir(path) if os.path.isdir(path) else read_tarball(path)


def read_dir(path: str | os.PathLike) -> Topology:
    from . import sysfs

    return sysfs.read(find_root(os.fspath(path)))


def read_tarball(path: str | os.PathLike) -> Topology:
    from . import sysfs

    path = os.fspath(path)
    tree = load(path)
    return replace(sysfs.read(_TreeRoot(tree, tree.top(path), path)), source=f"sysfs:{path}")


def find_root(path: str) -> str:
    """The directory holding sys/: `path` itself or its single subdirectory."""
    if os.path.isdir(os.path.join(path, "sys")):
        return path
    subs = [e.name for e in os.scandir(path) if e.is_dir(follow_symlinks=False)
            and os.path.isdir(os.path.join(e.path, "sys"))]
    if len(subs) != 1:
        raise _no_snapshot(path, os.listdir(path), subs)
    return os.path.join(path, subs[0])


def _no_snapshot(path: str, entries: list[str], subs: list[str]) -> InputError:
    what = "is empty" if not entries else "holds no sys/ directory" if not subs else \
        f"holds {len(subs)} snapshots ({', '.join(sorted(subs))})"
    return InputError(path, f"not a sysfs snapshot: it {what} (give the directory holding sys/ and proc/)")


def load(path: str) -> _Tree:
    """The members of the tarball `path`, in memory, every rule above checked."""
    try:
        tree = _walked(path)
        if tree is None:  # an unusual header or a damaged stream: tarfile reads it all again, and says what is wrong
            tree = _tarfile_members(path)
        return tree
    except _Refused as e:
        raise InputError(path, str(e)) from None
    except RecursionError:
        raise InputError(path, "extension headers chained without end: not a sysfs snapshot") from None


def _walked(path: str) -> _Tree | None:
    """The members of the tarball `path` as the walk reads them (None where
    it cannot), decompressed by the module its first bytes name: without
    tarfile, whose import alone costs 4-12 ms and its open of a compressed
    file a second decompression of the first block."""
    try:
        with _opened(path) as f:
            return _walk(f, path)
    except (NodemapError, _Refused):
        raise
    except Exception:  # a damaged stream (each module has its own errors): tarfile's message is the one users got
        return None


def _opened(path: str):
    """`path` opened as a tar stream, decompressed as its first bytes say (as tarfile's "r:*" does)."""
    with open(path, "rb") as f:
        head = f.read(6)
    if head[:3] == b"BZh":
        import bz2

        return bz2.open(path)
    if head[:2] == b"\x1f\x8b":
        import gzip

        return gzip.open(path)
    if head == b"\xfd7zXZ\x00":
        import lzma

        return lzma.open(path)
    return open(path, "rb")


def unpack(path: str, dest: str) -> None:
    """The tarball `path` unpacked into the directory `dest` (tests that edit a snapshot)."""
    load(path).write(dest)


def _too_many() -> _Refused:
    return _Refused(f"more than {MAX_MEMBERS} members and headers: not a sysfs snapshot of a node nodemap reads "
                    "(for a larger node give its hwloc XML: lstopo-no-graphics --of xml)")


def _too_big() -> _Refused:
    return _Refused(f"unpacks to more than {MAX_BYTES >> 20} MiB: not a sysfs snapshot")


class _Stream:
    """A decompressed tar stream read ahead in 64 KiB pieces and kept whole:
    the tree's files are (offset, size) in it. Pieces below malloc's mmap
    threshold (128 KiB) reuse the same memory: 1 MiB pieces were each fresh
    pages, 8,300 page faults reading 32em64t-2n8c+dax+nvme+mic+dimms (9.4 MB)
    where 64 KiB pieces take 4,300."""

    def __init__(self, f) -> None:
        f.seek(0)
        self.f, self.data = f, bytearray()

    def holds(self, end: int) -> bool:
        """Whether the stream reaches `end`, reading on as far as needed."""
        data = self.data
        while len(data) < end and (more := self.f.read(1 << 16)):
            data += more
        return len(data) >= end


_ENCODING = sys.getfilesystemencoding()  # tarfile's ENCODING: member names decoded as tarfile does
# header types read here (file, old file, directory, symlink, GNU long name and link target); tarfile reads the rest
_FILE, _OLD_FILE, _DIR, _SYMLINK, _LONG_NAME, _LONG_LINK = b"0", b"\0", b"5", b"2", b"L", b"K"
_READ_HERE = frozenset((_FILE, _OLD_FILE, _DIR, _SYMLINK, _LONG_NAME, _LONG_LINK))
# A header's fields read here, as bytes: name, size, checksum, type, link target, ustar prefix
_HEADER = struct.Struct("100s24x12s12x8sc100s88x155s")


def _walk(f, path: str) -> _Tree | None:
    """The members of the (decompressed) tar stream `f` in one pass, GNU
    and ustar headers read here: ~4 us a header on the loaded 2-vCPU VM
    where tarfile's members cost ~40 (32em64t's 10,668 headers: 39 ms, 48
    before header fields came from one struct and names' checks, sizes and
    checksums took the usual case's short cut). None at anything
    else (a pax, sparse, hard-link or device header, a base-256 size, a bad
    checksum, a cut member, a long name for a long name): tarfile reads
    those and refuses what has to be (_members)."""
    stream = _Stream(f)
    data = stream.data
    tree = _Tree(path, data)
    pos = headers = total = extended = 0
    long: dict[bytes, str] = {}  # a GNU long name or link target, for the next header
    while True:
        if (pos + 512 > len(data) and not stream.holds(pos + 512)) or (not data[pos] and not any(data[pos:pos + 512])):
            return None if long else tree  # the end-of-archive block (or the stream's end)
        name, size, check, kind, target, prefix = _HEADER.unpack_from(data, pos)
        size = _octal(size)
        if size is None or kind not in _READ_HERE or _sum_of(check) != _checksum(data, pos):
            return None
        headers += 1
        if headers > MAX_MEMBERS:
            raise _too_many()
        at = pos = pos + 512
        if kind == _LONG_NAME or kind == _LONG_LINK:
            _long_name(size)
            extended = _extended(extended + size)
            pos += (size + 511) & ~511
            if kind in long or not stream.holds(pos):
                return None
            long[kind] = _text(data[at:at + size])
            continue
        name = _text(name)
        if kind == _OLD_FILE and name.endswith("/"):
            kind = _DIR  # an old tar's directory: a file whose name ends in a slash
        name = _name(name, prefix, kind == _DIR, long.pop(_LONG_NAME, None))
        link = long.pop(_LONG_LINK, None)
        if kind == _DIR:
            tree.member(name, "dir")
        elif kind == _SYMLINK:
            tree.member(name, "symlink", _text(target) if link is None else link)
        else:  # a file's data follows its header (a directory's or symlink's size is not read: tarfile's way)
            total += size
            if total > MAX_BYTES:
                raise _too_big()
            pos += (size + 511) & ~511
            if pos > len(data) and not stream.holds(pos):
                return None  # a cut member
            tree.member(name, "file", (at, size))


def _name(name: str, prefix: bytes, is_dir: bool, long: str | None) -> str:
    """A header's member name as tarfile reads it: a GNU long name, else
    the name field after the ustar prefix field where set; a directory's
    trailing slashes dropped (one of a long name)."""
    if long is not None:
        return long.removesuffix("/") if is_dir else long
    name = name.rstrip("/") if is_dir else name
    name = f"{_text(prefix)}/{name}" if prefix[0] else name
    return name.rstrip("/") if is_dir else name


def _checksum(data: bytearray, at: int) -> int:
    """The sum of the header's bytes at `at`, as _sum_of gives it. Summed
    by zlib's Adler-32 (its low half is 1 + the sum of the bytes, exact up
    to 257 bytes), not by Python: sum() of 512 bytes took more than the rest
    of a header's reading."""
    return (zlib.adler32(data[at:at + 256]) & 0xFFFF) + (zlib.adler32(data[at + 256:at + 512]) & 0xFFFF)


@functools.lru_cache(maxsize=4096)  # a snapshot's headers share a few hundred checksums
def _sum_of(field: bytes) -> int | None:
    """What _checksum gives for a header whose checksum field is `field`:
    the checksum counts its own 8 bytes as spaces (256), and Adler-32's two
    halves each add 1; None for a field that is no octal number."""
    check = _octal(field)
    return None if check is None else check - 254 + sum(field)


def _text(field: bytes) -> str:
    return field.split(b"\0", 1)[0].decode(_ENCODING, "surrogateescape")


@functools.lru_cache(maxsize=4096)  # sizes repeat: sysfs attributes are a few bytes, a page at most
def _octal(field: bytes) -> int | None:
    """A header's octal number; None unless it is only digits 0-7 (int()
    would also take "-1000", which would walk backwards without end)."""
    text = field.strip(b"\0 ")
    return None if text.strip(b"01234567") else int(text or b"0", 8)


def _tarfile_members(path: str) -> _Tree:
    """The members of the tarball `path`, as tarfile reads them (any header it knows)."""
    import tarfile

    try:
        with tarfile.open(path, "r:*", tarinfo=_counted()) as tar:
            return _members(tar, path)
    except (tarfile.TarError, EOFError, OSError, ValueError) as e:
        raise InputError(path, f"cannot unpack the snapshot ({type(e).__name__}: {e}); "
                         "give an intact .tar/.tar.gz/.tar.xz/.tar.bz2") from None


@functools.cache
def _counted() -> type:
    """tarfile.TarInfo counting every header against the limits, made on
    first use: tarfile is imported only where the walk leaves a tarball to it."""
    import tarfile

    class Counted(tarfile.TarInfo):
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
            _long_name(self.size)
            self._count(tar)
            return super()._proc_gnulong(tar)

        def _proc_pax(self, tar):
            if self.size > MAX_PAX:
                raise _Refused(f"a pax header of {self.size} bytes (over {MAX_PAX}): not a sysfs snapshot")
            self._count(tar)
            return super()._proc_pax(tar)

        def _count(self, tar) -> None:
            tar._nodemap_extended = _extended(getattr(tar, "_nodemap_extended", 0) + self.size)

    return Counted


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


def _members(tar: tarfile.TarFile, path: str) -> _Tree:
    """The members of `tar`, as tarfile reads them (any header it knows)."""
    tree = _Tree(path, bytearray())
    for m in _limited(tar):
        if m.isdir():
            tree.member(m.name, "dir")
        elif m.issym():
            tree.member(m.name, "symlink", m.linkname)
        elif m.isfile():
            at = len(tree.blob)
            tree.blob += tar.extractfile(m).read()
            tree.member(m.name, "file", (at, m.size))
        else:
            _safe_name(path, m.name)
            kind = "hard link" if m.islnk() else "device file or fifo"
            raise InputError(path, f"member {shown(m.name, 80)} is a {kind}: refused (a sysfs snapshot holds files, "
                             "directories and symlinks only)")
    return tree


class _Tree:
    """A tarball's members by name ("NAME/sys/..."), laid out as unpacking
    would: each directory's listing, symlink targets, and files as
    (offset, size) in `blob`, the bytes they were read from."""

    def __init__(self, path: str, blob: bytearray) -> None:
        self.path, self.blob = path, blob
        self.dirs: dict[str, dict[str, bool]] = {"": {}}  # name -> {entry: is a symlink}
        self.files: dict[str, tuple[int, int]] = {}
        self.links: dict[str, str] = {}

    def member(self, name: str, kind: str, value=None) -> None:
        """A member as its header names it: kind "dir", "symlink" (value:
        its target) or "file" (value: (offset, size) in blob)."""
        safe = _safe_name(self.path, name)
        if not safe:
            return
        if kind == "symlink" and len(value) > MAX_NAME:
            raise InputError(self.path, f"member {shown(name, 80)} links to a {len(value)}-character target: refused")
        parent, _, base = safe.rpartition("/")
        entries = self.dirs.get(parent)  # (made already, the usual case: without _dir's call)
        if entries is None:
            entries = self._dir(parent, name)
        if kind == "dir" and safe in self.dirs:
            return  # again, or made for a member below it
        if base in entries:
            raise InputError(self.path, f"member {shown(name, 80)} comes twice: refused")
        if kind == "dir":
            self._dir(safe, name)
            return
        entries[base] = kind == "symlink"
        (self.links if kind == "symlink" else self.files)[safe] = value

    def _dir(self, name: str, member: str) -> dict[str, bool]:
        """The listing of directory `name`, made with its parents where missing."""
        entries = self.dirs.get(name)
        if entries is not None:
            return entries
        entries, at = self.dirs[""], ""
        for part in name.split("/"):
            at = f"{at}/{part}" if at else part
            below = self.dirs.get(at)
            if below is None:
                if at in self.links or at in self.files:
                    what = "symlink" if at in self.links else "file"
                    raise InputError(self.path, f"member {shown(member, 80)} lies below a {what} member: refused")
                entries[part] = False
                below = self.dirs[at] = {}
            entries = below
        return entries

    def data(self, name: str) -> bytes:
        at, size = self.files[name]
        return bytes(self.blob[at:at + size])

    def top(self, path: str) -> str:
        """The member directory holding sys/, as find_root finds it ("" for the top)."""
        if "sys" in self.dirs:
            return ""
        subs = [n for n, link in self.dirs[""].items() if not link and f"{n}/sys" in self.dirs]
        if len(subs) != 1:
            raise _no_snapshot(path, list(self.dirs[""]), subs)
        return subs[0]

    def write(self, dest: str) -> None:
        for name in self.dirs:  # parents before children: made in that order
            os.makedirs(os.path.join(dest, name), exist_ok=True)
        for name in self.files:
            with open(os.path.join(dest, name), "xb") as out:
                out.write(self.data(name))
        for name, target in self.links.items():
            os.symlink(target, os.path.join(dest, name))


class _TreeRoot(Root):
    """The snapshot below member directory `top` of a tarball in memory,
    read as a Root reads an unpacked one; paths are named PATH/TOP/..."""

    def __init__(self, tree: _Tree, top: str, path: str) -> None:
        super().__init__(path)
        self.root = os.path.join(path, top) if top else path  # not made absolute: errors name it as given
        self._tree, self._top = tree, top

    def _key(self, at: str) -> str:
        return f"{self._top}/{at.strip('/')}".strip("/")

    def _scan(self, at: str) -> dict[str, bool]:
        entries = self._tree.dirs.get(self._key(at))
        if entries is None:
            raise NotADirectoryError(at)
        return entries

    def _link(self, at: str) -> str | None:
        return self._tree.links.get(self._key(at))

    def _load(self, at: str, limit: int) -> bytes:
        key = self._key(at)
        if key in self._tree.files:
            return self._tree.data(key)[:limit]
        raise IsADirectoryError(at) if key in self._tree.dirs else FileNotFoundError(at)

    def _is_dir(self, at: str) -> bool:
        return self._key(at) in self._tree.dirs


def _safe_name(path: str, name: str) -> str:
    """`name` without its empty and '.' parts; refused when absolute or when a part is '..'."""
    if name[:1] not in "/." and "/." not in name and "//" not in name and name[-1:] != "/":
        return name  # (no part is empty or starts with '.', the usual case: without splitting)
    parts = name.split("/")
    if name.startswith("/") or ".." in parts:
        raise InputError(path, f"member {shown(name, 80)} would unpack outside the target directory: refused")
    return "/".join(p for p in parts if p not in ("", ".")) if "" in parts or "." in parts else name
