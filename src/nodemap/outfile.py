"""The one way nodemap writes a file the user named (bench -o, topo --export, place -o).

- `check(path)` runs before any work: the folder exists and is writable and
  the path is absent or a regular file, so a long measurement never ends in
  "cannot write". `-` means standard output.
- `write(path, data)` writes a temporary file in the same folder and renames
  it over the path, so a crash or Ctrl-C never leaves half a file. Only a
  regular file (or nothing) is ever replaced: a device, FIFO, directory or
  symbolic link at the path is refused, never turned into a private file
  (as root, `--export /dev/stdout` must not replace /dev/stdout for the
  whole machine). A new file gets 0666 less the umask, as `>` would give it;
  a replaced file keeps its mode.

In a folder other users may write to (a watch folder, a fleet folder on a
shared file system, /tmp), `make_folder` and `open_append` never follow a
symbolic link planted where nodemap makes a folder or appends a line: the
folder is opened O_NOFOLLOW|O_DIRECTORY, the file reached through that
descriptor, created O_EXCL|O_NOFOLLOW (or an existing one opened
O_NOFOLLOW) and used only when it is a regular file of this user.
`check_folder` refuses such a folder before any work, in one line naming
the first file a later write or append there would refuse, so that a long
run (a fleet measuring every node) never ends in that refusal.
"""

from __future__ import annotations

import errno
import os
import stat
import sys
import tempfile
from typing import BinaryIO, Callable, Iterable, Union

from .errors import NodemapError

STDOUT = "-"
Data = Union[str, bytes, Callable[[BinaryIO], None]]


def json_text(doc: object, indent: int | None = 1, separators: tuple[str, str] | None = None) -> str:
    """A typed document (msgspec Structs, in dicts and lists) as nodemap's JSON: json's, indented by one (None:
    one line), ASCII, NaN as json writes it (as every document was written before it was one class)."""
    import json

    return json.dumps(doc, indent=indent, separators=separators, default=_fields)


def _fields(record: object) -> dict[str, object]:
    """A Struct's or dataclass's fields for json, which walks on into them (less those at their defaults where
    the Struct omits them, and those UNSET: as msgspec writes it)."""
    import dataclasses

    if dataclasses.is_dataclass(record) and not isinstance(record, type):
        return {f.name: getattr(record, f.name) for f in dataclasses.fields(record)}
    import msgspec

    if not isinstance(record, msgspec.Struct):
        raise TypeError(f"{type(record).__name__} in a document")
    fields = msgspec.structs.fields(record)
    omitted = _default if record.__struct_config__.omit_defaults else lambda f: msgspec.UNSET
    return {f.encode_name: v for f in fields if (v := getattr(record, f.name)) != omitted(f)}


def _default(f: object) -> object:
    """A Struct field's default (an empty list for `= []`: msgspec keeps it as a factory)."""
    import msgspec

    return f.default if f.default_factory is msgspec.NODEFAULT else f.default_factory()


def check(path: str, option: str = "--output") -> None:
    """Refuse, in one line, a path that `write` could not fill."""
    if path == STDOUT:
        return
    where = f"{option} {path}"
    if not path or "\0" in path:
        raise NodemapError(f"{option}: give a file name (or - for standard output)")
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise NodemapError(f"{where}: folder {folder} does not exist; create it or pick another path")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise NodemapError(f"{where}: folder {folder} is not writable by you; pick another path")
    _check_target(path, where)


def _check_target(path: str, where: str) -> os.stat_result | None:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise NodemapError(f"{where}: cannot check it ({e.strerror}); pick another path") from None
    what, fix = _not_replaceable(path, st)
    if what:
        raise NodemapError(f"{where}: is {what}; {fix}")
    return st


_ONLY_REGULAR = "nodemap replaces only regular files: give the real path (or - for standard output)"


def _not_replaceable(path: str, st: os.stat_result) -> tuple[str, str]:
    """(what the file at `path` is, the fix) when `write` would not replace it; ("", "") when it would."""
    if stat.S_ISLNK(st.st_mode):
        return "a symbolic link", _ONLY_REGULAR
    if stat.S_ISDIR(st.st_mode):
        return "a folder", "give a file name inside it"
    if not stat.S_ISREG(st.st_mode):
        return "not a regular file (a device, FIFO or socket)", _ONLY_REGULAR.replace("the real path", "a file path")
    if not os.access(path, os.W_OK):
        return "a file not writable by you", "pick another path"
    return "", ""


def write(path: str, data: Data, option: str = "--output") -> None:
    """Write `data` (text, bytes, or a function filling a binary file) to
    `path` atomically; `-` writes it to standard output."""
    if path == STDOUT:
        _to_stdout(data)
        return
    where = f"{option} {path}"
    old = _check_target(path, where)  # again: the path may have changed since check()
    folder = os.path.dirname(os.path.abspath(path))
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=".nodemap-", suffix=".tmp", dir=folder)
        with os.fdopen(fd, "wb") as f:
            _fill(f, data)
            os.fchmod(f.fileno(), stat.S_IMODE(old.st_mode) if old else 0o666 & ~_umask())
        os.replace(tmp, path)
        tmp = None
    except OSError as e:
        raise NodemapError(f"{where}: cannot write ({e.strerror or e}); pick a writable path with free space") from None
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass


def _fill(f: BinaryIO, data: Data) -> None:
    if callable(data):
        data(f)
    else:
        f.write(data.encode() if isinstance(data, str) else data)


def _to_stdout(data: Data) -> None:
    sys.stdout.flush()
    _fill(sys.stdout.buffer, data)
    sys.stdout.buffer.flush()


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


# --- folders others may write to ------------------------------------------------------------

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | _NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
_APPEND_FLAGS = os.O_WRONLY | os.O_APPEND | os.O_NONBLOCK | _NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


def folder_problem(path: str, err: OSError) -> str:
    """Why opening `path` as a folder without following links failed, as
    "is ...": a link (ELOOP), not a folder, or the system's reason (another
    user's 0700 folder is "not open to you", not "not a directory")."""
    try:
        st = os.lstat(path)
    except OSError:
        return f"cannot be opened ({err.strerror or err})"
    if stat.S_ISLNK(st.st_mode):
        return "a symbolic link (another user may have planted it)"
    if not stat.S_ISDIR(st.st_mode):
        return "not a folder"
    return f"a folder not open to you ({err.strerror or err}; it belongs to uid {st.st_uid})"


def open_folder(path: str, where: str) -> int:
    """A descriptor of the folder `path` itself, never of a link's target."""
    try:
        return os.open(path, _DIR_FLAGS)
    except OSError as e:
        raise NodemapError(f"{where}: {path} is {folder_problem(path, e)}; remove it or give another "
                           "folder") from None


def make_folder(path: str, where: str) -> None:
    """Create the folder `path` (and its parents) unless it exists; refused
    when its last part is a symbolic link or not a folder."""
    try:
        os.makedirs(path, exist_ok=True)
    except FileExistsError:
        pass  # not a folder: open_folder says so
    except OSError as e:
        raise NodemapError(f"{where}: cannot create {path} ({e.strerror or e}); give another folder") from None
    os.close(open_folder(path, where))


def writable_folder(path: str, option: str, what: str) -> None:
    """make_folder for a report folder, refused in one line when `path` is a
    file or the folder is not writable (`what`: what the folder is for)."""
    if os.path.exists(path) and not os.path.isdir(path):
        raise NodemapError(f"{option} {path}: exists and is not a folder; give a folder for {what}")
    make_folder(path, option)
    if not os.access(path, os.W_OK | os.X_OK):
        raise NodemapError(f"{option} {path}: not writable; give a folder you can write to")


def open_append(folder: str, name: str, where: str, mode: int = 0o644) -> int:
    """A descriptor appending to `name` in `folder` (see the module's doc)."""
    dfd = open_folder(folder, where)
    path = os.path.join(folder, name)
    try:
        try:
            fd = os.open(name, _APPEND_FLAGS | os.O_CREAT | os.O_EXCL, mode, dir_fd=dfd)
        except FileExistsError:
            fd = os.open(name, _APPEND_FLAGS, dir_fd=dfd)
    except OSError as e:
        problem = ("is a symbolic link (another user may have planted it); remove it" if e.errno == errno.ELOOP
                   else f"cannot be opened for appending ({e.strerror or e})")
        raise NodemapError(f"{where}: {path} {problem}") from None
    finally:
        os.close(dfd)
    what = _not_appendable(os.fstat(fd))
    if what:
        os.close(fd)
        raise NodemapError(f"{where}: {path} is {what}; nodemap appends only to its own files: remove it or "
                           "give another folder")
    os.set_blocking(fd, True)
    return fd


def _not_appendable(st: os.stat_result) -> str:
    """What a file is that `open_append` does not append to ("" when it does)."""
    if stat.S_ISLNK(st.st_mode):
        return "a symbolic link (another user may have planted it)"
    if not stat.S_ISREG(st.st_mode):
        return "not a regular file"
    if st.st_uid != os.geteuid():
        return f"owned by uid {st.st_uid}, not by you"
    return ""


def check_folder(folder: str, where: str, written: Iterable[str] = (), appended: Iterable[str] = ()) -> None:
    """Before any work, what `write` and `open_append` would refuse later in
    the report folder `folder` (made, not through a link): each of `written`
    (names `write` replaces) absent or a regular file you may write, each of
    `appended` absent or a regular file of yours. The first that is not: one
    line naming it and the fix."""
    make_folder(folder, where)
    names = [(n, False) for n in written] + [(n, True) for n in appended]
    for name, appending in names:
        path = os.path.join(folder, name)
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            continue
        except OSError as e:
            raise NodemapError(f"{where}: {path} cannot be checked ({e.strerror or e}); remove it or give another "
                               "folder") from None
        what = _not_appendable(st) if appending else _not_replaceable(path, st)[0]
        if what:
            planted = " (another user may have planted it)" if what == "a symbolic link" else ""
            raise NodemapError(f"{where}: {path} is {what}{planted}; nodemap writes only its own regular files "
                               "there: remove it or give another folder")
