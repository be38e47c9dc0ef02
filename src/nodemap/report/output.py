"""Writing report files: through a temporary file and a rename, so a
crash or Ctrl-C never leaves half a file.

(issue 13 brings the one atomic writer of the program; switch to it once
it is on main.)"""

from __future__ import annotations

import os
import tempfile


def write_text(path: str, text: str) -> None:
    d = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".nodemap-", dir=d)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
