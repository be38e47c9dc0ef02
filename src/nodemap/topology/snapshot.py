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

import os
import tarfile
import zlib

from ..errors import InputError, NodemapError
from .model import Topology, replace
from .root import Root
from ..text import shown

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
        with tarfile.open(path, "r:*", tarinfo=_Counted) as tar:
            tree = _walk(tar.fileobj, path)
        if tree is None:  # an unusual header: tarfile reads it all again (no seeking back in a compressed stream)
            with tarfile.open(path, "r:*", tarinfo=_Counted) as tar:
                tree = _members(tar, path)
        return tree
    except NodemapError:
        raise
    except _Refused as e:
        raise InputError(path, str(e)) from None
    except RecursionError:
        raise InputError(path, "extension headers chained without end: not a sysfs snapshot") from None
    except (tarfile.TarError, EOFError, OSError, ValueError) as e:
        raise InputError(path, f"cannot unpack the snapshot ({type(e).__name__}: {e}); "
                         "give an intact .tar/.tar.gz/.tar.xz/.tar.bz2") from None


def unpack(path: str, dest: str) -> None:
    """The tarball `path` unpacked into the directory `dest` (tests that edit a snapshot)."""
    load(path).write(dest)


def _too_many() -> _Refused:
    return _Refused(f"more than {MAX_MEMBERS} members and headers: not a sysfs snapshot of a node nodemap reads "
                    "(for a larger node give its hwloc XML: lstopo-no-graphics --of xml)")


def _too_big() -> _Refused:
    return _Refused(f"unpacks to more than {MAX_BYTES >> 20} MiB: not a sysfs snapshot")


class _Stream:
    """A decompressed tar stream read ahead in 1 MiB pieces and kept whole:
    the tree's files are (offset, size) in it."""

    def __init__(self, f) -> None:
        f.seek(0)
        self.f, self.data, self.pos = f, bytearray(), 0

    def take(self, n: int) -> bytearray:
        """The next `n` bytes (fewer at the end of the stream)."""
        start = self.pos
        if start + n <= len(self.data):  # (the usual case, without skip's call: ~20,000 a snapshot)
            self.pos += n
        else:
            self.skip(n)
        return self.data[start:self.pos]

    def skip(self, n: int) -> bool:
        """Past the next `n` bytes; False when the stream ends first."""
        end = self.pos + n
        while len(self.data) < end and (more := self.f.read(1 << 20)):
            self.data += more
        self.pos = min(end, len(self.data))
        return self.pos == end


# header types read here (file, old file, directory, symlink, GNU long name and link target); tarfile reads the rest
_FILE, _DIR, _SYMLINK, _LONG_NAME, _LONG_LINK = b"0"[0], b"5"[0], b"2"[0], b"L"[0], b"K"[0]
_READ_HERE = frozenset((_FILE, 0, _DIR, _SYMLINK, _LONG_NAME, _LONG_LINK))


def _walk(f, path: str) -> _Tree | None:
    """The members of the (decompressed) tar stream `f` in one pass, GNU
    and ustar headers read here: ~5 us a header where tarfile's members
    cost ~40 (a 3,700-member snapshot: 20 ms, not 80). None at anything
    else (a pax, sparse, hard-link or device header, a base-256 size, a bad
    checksum, a cut member, a long name for a long name): tarfile reads
    those and refuses what has to be (_members)."""
    stream = _Stream(f)
    tree = _Tree(path, stream.data)
    headers = total = extended = 0
    long: dict[int, str] = {}  # a GNU long name or link target, for the next header
    while True:
        block = stream.take(512)
        if len(block) < 512 or not any(block):  # the end-of-archive block (or the stream's end)
            return None if long else tree
        size, kind = _octal(block[124:136]), block[156]
        if size is None or kind not in _READ_HERE or _octal(block[148:156]) != _checksum(block):
            return None
        headers += 1
        if headers > MAX_MEMBERS:
            raise _too_many()
        padded = (size + 511) & ~511
        if kind in (_LONG_NAME, _LONG_LINK):
            _long_name(size)
            extended = _extended(extended + size)
            at = stream.pos
            if kind in long or not stream.skip(padded):
                return None
            long[kind] = _text(stream.data[at:at + size])
            continue
        if kind == 0 and _text(block[:100]).endswith("/"):
            kind = _DIR  # an old tar's directory: a file whose name ends in a slash
        name = _name(block, kind == _DIR, long.pop(_LONG_NAME, None))
        target = long.pop(_LONG_LINK, None)
        if kind == _DIR:
            tree.member(name, "dir")
        elif kind == _SYMLINK:
            tree.member(name, "symlink", _text(block[157:257]) if target is None else target)
        else:
            total += size
            if total > MAX_BYTES:
                raise _too_big()
            at = stream.pos
            if not stream.skip(padded):
                return None
            tree.member(name, "file", (at, size))


def _name(block: bytearray, is_dir: bool, long: str | None) -> str:
    """A header's member name as tarfile reads it: a GNU long name, else
    the name field after the ustar prefix field where set; a directory's
    trailing slashes dropped (one of a long name)."""
    if long is not None:
        return long.removesuffix("/") if is_dir else long
    name, prefix = _text(block[:100]), _text(block[345:500]) if block[345] else ""
    name = name.rstrip("/") if is_dir else name
    name = f"{prefix}/{name}" if prefix else name
    return name.rstrip("/") if is_dir else name


def _checksum(block: bytearray) -> int:
    """The header checksum `block` should hold: the sum of its bytes, its
    own 8 counted as spaces. Summed by zlib's Adler-32 (its low half is 1 +
    the sum of the bytes, exact up to 257 bytes), not by Python: sum() of
    512 bytes took more than the rest of a header's reading."""
    return (zlib.adler32(block[:256]) & 0xFFFF) + (zlib.adler32(block[256:]) & 0xFFFF) + 254 - sum(block[148:156])


def _text(field: bytearray) -> str:
    return field.split(b"\0", 1)[0].decode(tarfile.ENCODING, "surrogateescape")


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
    parts = name.split("/")
    if name.startswith("/") or ".." in parts:
        raise InputError(path, f"member {shown(name, 80)} would unpack outside the target directory: refused")
    return "/".join(p for p in parts if p not in ("", ".")) if "" in parts or "." in parts else name
