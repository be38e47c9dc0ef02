"""Files below a root directory, read as a discovery source reads them.

A source reads a node through a Root (hwloc's `root_fd` idea): `Root("/")`
is this machine, `Root(dir)` a snapshot unpacked to `dir`, read exactly the
same way. Every path, symlinks included, is resolved inside the root: an
absolute link in a snapshot ("/sys/devices/...") means the snapshot's own
sys/, never the live one. Only small regular files are read, each under a
size limit. A snapshot tarball is read from memory (snapshot.py): a Root
whose four primitives (_scan, _link, _load, _is_dir) look in its members.
"""

from __future__ import annotations

import errno
import os
import stat

from ..errors import InputError
from ..infile import read_fd
from .cpuset import CpuSet, CpuSetError

_MAX_LINKS = 40  # symlinks followed in one path: more is a loop
_MAX_READ = 1 << 20  # bytes of one file: sysfs attributes are a few bytes, a page at most
_MAX_CPUINFO = 64 << 20  # /proc/cpuinfo: ~1.5 KB per PU, so 1 MiB is only ~700 PUs


class _NotAFile(OSError):
    """A FIFO or device where a snapshot should hold a regular file."""


class Root:
    """Reads files below a root directory, resolving symlinks inside it."""

    def __init__(self, root: str | os.PathLike) -> None:
        self.root = os.path.abspath(os.fspath(root))
        self.live = self.root == "/"
        self._dirs: dict[str, str] = {}
        # resolved dir -> {entry: is a symlink}: one scandir per directory
        # instead of a readlink per file (a 256-CPU snapshot reads ~5000 files)
        self._entries: dict[str, dict[str, bool]] = {}

    def resolve(self, rel: str) -> str:
        """`rel` with every symlink followed, as a path below the root ("/a/b")."""
        if self.live:
            return os.path.realpath("/" + rel)
        head, _, name = rel.strip("/").rpartition("/")
        base = self._dir(head)
        return self._child(base, name) or f"{base.rstrip('/')}/{name}"

    def _dir(self, head: str) -> str:
        """The resolved directory `head`, each parent resolved once."""
        base = self._dirs.get(head)
        if base is None:
            if not head:
                return "/"
            parent, _, name = head.rpartition("/")
            up = self._dir(parent)
            base = self._dirs[head] = self._child(up, name) or f"{up.rstrip('/')}/{name}"
        return base

    def _child(self, base: str, name: str) -> str | None:
        """`name` in the resolved directory `base`, resolved; None when the
        directory's listing does not hold it."""
        if name in (".", ".."):
            return self._walk(base, name)
        link = self._entries_of(base).get(name)
        if link is None:
            return None
        return self._walk(base, name) if link else f"{base.rstrip('/')}/{name}"

    def _entries_of(self, base: str) -> dict[str, bool]:
        entries = self._entries.get(base)
        if entries is None:
            try:
                entries = self._scan(base)
            except PermissionError:  # as the docs say; an empty listing would hide the device
                raise InputError(self.root + base, "cannot list: permission denied (run as a user who may read "
                                 "it, or give a readable snapshot)") from None
            except OSError:
                entries = {}
            self._entries[base] = entries
        return entries

    # --- the primitives: a path `at` is resolved, below the root ("/a/b") ---

    def _scan(self, at: str) -> dict[str, bool]:
        """{entry: is a symlink} of the directory `at` (OSError: none)."""
        with os.scandir(self._real(at)) as it:
            return {e.name: e.is_symlink() for e in it}

    def _link(self, at: str) -> str | None:
        """The target of the symlink `at`; None when `at` is no symlink."""
        try:
            return os.readlink(self._real(at))
        except OSError:  # not a link, or missing: either way a plain component
            return None

    def _load(self, at: str, limit: int) -> bytes:
        """Up to `limit` bytes of the regular file `at` (OSError as open() raises it)."""
        # non-blocking and checked: a FIFO or device planted in a
        # snapshot must not block the reader (sysfs attributes are regular files)
        fd = os.open(self._real(at), os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
        try:
            mode = os.fstat(fd).st_mode
            if stat.S_ISDIR(mode):
                raise IsADirectoryError
            if not self.live and not stat.S_ISREG(mode):
                raise _NotAFile
            return read_fd(fd, limit)
        finally:
            os.close(fd)

    def _is_dir(self, at: str) -> bool:
        return os.path.isdir(self._real(at))

    def _real(self, at: str) -> str:
        return at if self.live else self.root + at

    def _walk(self, start: str, rel: str) -> str:
        done = [p for p in start.split("/") if p]
        todo = [p for p in rel.split("/") if p]
        links = 0
        while todo:
            part = todo.pop(0)
            if part == ".":
                continue
            if part == "..":
                if done:
                    done.pop()
                continue
            target = self._link("/" + "/".join((*done, part)))
            if target is None:
                done.append(part)
                continue
            links += 1
            if links > _MAX_LINKS:
                # name the path from `start`: `rel` alone may be one component
                raise InputError(self.where(f"{start.strip('/')}/{rel.strip('/')}"), "too many levels of symbolic "
                                 "links (a link loop in the snapshot: fix or remove that link)")
            if target.startswith("/"):
                done = []
            todo[:0] = [p for p in target.split("/") if p]
        return "/" + "/".join(done)

    def _at(self, rel: str) -> str:
        """`rel` resolved ("/a/b"). Under "/" the kernel resolves symlinks
        as resolve() would (realpath on every read cost more than all of
        the reading)."""
        return "/" + rel.lstrip("/") if self.live else self.resolve(rel)

    def _existing(self, rel: str) -> str | None:
        """_at(rel), or None where a snapshot's listing shows it missing
        (a missing attribute is common: no open() for it)."""
        if self.live:
            return "/" + rel.lstrip("/")
        head, _, name = rel.strip("/").rpartition("/")
        return self._child(self._dir(head), name)

    def where(self, rel: str) -> str:
        return os.path.join(self.root, rel.strip("/"))

    def read(self, rel: str, limit: int = _MAX_READ) -> str | None:
        """The file's text, stripped; None when it does not exist. A file
        over `limit` bytes is refused: cutting it would read a wrong node.

        Permission errors are the user's to fix (InputError); other errors
        are what sysfs returns for attributes a device does not support
        (EINVAL, EIO, ENODEV...), which is the same as absent.
        """
        at = self._existing(rel)
        if at is None:
            return None
        try:
            data = self._load(at, limit + 1)
            if len(data) > limit:
                from ..units import format_size

                fix = "report it: a kernel that writes this much is new to nodemap" if self.live else \
                    "give an intact snapshot"
                raise InputError(self.where(rel), f"is over {format_size(limit)}: no sysfs or proc file of a node "
                                 f"is that large ({fix})")
        except _NotAFile:
            raise InputError(self.where(rel), "is a FIFO or device, not a file: a sysfs snapshot holds files, "
                             "directories and symlinks only (give an intact snapshot)") from None
        except FileNotFoundError:
            return None
        except PermissionError:
            raise InputError(self.where(rel), "cannot read: permission denied (run as a user who may read it, "
                             "or give a readable snapshot)") from None
        except IsADirectoryError:
            raise InputError(self.where(rel), "is a directory where a file was expected (damaged snapshot?)") from None
        except OSError as e:
            if e.errno in (errno.ENOTDIR, errno.ELOOP):
                raise InputError(self.where(rel), f"cannot read: {e.strerror}") from None
            return None
        # The kernel ends text with a newline; some files (and snapshots of
        # them) end in a NUL byte as well: the text stops there, as in hwloc.
        return data.split(b"\0", 1)[0].decode("utf-8", "replace").strip()

    def read_int(self, rel: str, base: int = 10) -> int | None:
        text = self.read(rel)
        if text is None or text == "":
            return None
        try:
            return int(text.split()[0], base)
        except ValueError:
            raise InputError(self.where(rel), f"expected a number, found {text[:40]!r}") from None

    def read_set(self, rel_list: str, rel_mask: str | None = None) -> CpuSet | None:
        """A CPU/node set from a hex mask file, else a list file ("0-3,8").

        The mask wins, as in hwloc: some snapshots were edited through their
        masks only, leaving stale lists beside them.
        """
        for rel, parse in ((rel_mask, CpuSet.parse_mask), (rel_list, CpuSet.parse)):
            if rel is None:
                continue
            text = self.read(rel)
            if text is None:
                continue
            try:
                return parse(text)
            except CpuSetError as e:
                raise InputError(self.where(rel), f"{e}") from None
        return None

    def listdir(self, rel: str) -> list[str]:
        try:
            return list(self._scan(self._at(rel)))
        except (FileNotFoundError, NotADirectoryError):
            return []
        except PermissionError:
            raise InputError(self.where(rel), "cannot list: permission denied") from None

    def isdir(self, rel: str) -> bool:
        return self._is_dir(self._at(rel))
