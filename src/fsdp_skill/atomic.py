"""Replace a live folder by a new one with no moment where the live path is missing.

A folder cannot be renamed over a non-empty folder, so the obvious replacement takes two renames
(live -> old, new -> live) and a reader, or a kill, between them finds nothing at the live path.
Linux (renameat2 RENAME_EXCHANGE) and macOS (renamex_np RENAME_SWAP) swap two paths in one
atomic step instead; this module uses that where the OS and filesystem offer it and falls back
to the two renames elsewhere, where callers recover on their next run.
"""

from __future__ import annotations

import ctypes
import errno
import os
import shutil
import stat
import sys
from collections.abc import Callable
from pathlib import Path

_AT_FDCWD = -100
_RENAME_EXCHANGE = 2  # <linux/fs.h>
_RENAME_SWAP = 2  # <stdio.h> on macOS
# What a kernel, libc or filesystem without the atomic swap answers (EPERM: container seccomp
# profiles that predate renameat2). A real permission problem then fails the fallback renames.
_UNSUPPORTED = {errno.EINVAL, errno.ENOSYS, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EPERM}

_swap_fn: Callable[[bytes, bytes], int] | None = None
_looked_up = False


def _lookup() -> Callable[[bytes, bytes], int] | None:
    global _swap_fn, _looked_up
    if _looked_up:
        return _swap_fn
    _looked_up = True
    try:
        libc = ctypes.CDLL(None, use_errno=True)
    except (OSError, TypeError):
        return None
    if sys.platform.startswith("linux"):
        fn = getattr(libc, "renameat2", None)  # glibc >= 2.28, musl >= 1.2.5
        if fn is not None:
            fn.argtypes = [
                ctypes.c_int,
                ctypes.c_char_p,
                ctypes.c_int,
                ctypes.c_char_p,
                ctypes.c_uint,
            ]
            fn.restype = ctypes.c_int
            _swap_fn = lambda a, b: fn(_AT_FDCWD, a, _AT_FDCWD, b, _RENAME_EXCHANGE)  # noqa: E731
    elif sys.platform == "darwin":
        fn = getattr(libc, "renamex_np", None)
        if fn is not None:
            fn.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_uint]
            fn.restype = ctypes.c_int
            _swap_fn = lambda a, b: fn(a, b, _RENAME_SWAP)  # noqa: E731
    return _swap_fn


def exchange(a: str | os.PathLike[str], b: str | os.PathLike[str]) -> bool:
    """Swap the paths `a` and `b` (both must exist) atomically.

    False when this OS or filesystem has no atomic swap, and nothing was changed; any other
    failure raises OSError.
    """
    fn = _lookup()
    if fn is None:
        return False
    if fn(os.fsencode(os.fspath(a)), os.fsencode(os.fspath(b))) == 0:
        return True
    err = ctypes.get_errno()
    if err in _UNSUPPORTED:
        return False
    raise OSError(err, os.strerror(err), os.fspath(a), None, os.fspath(b))


def supported(folder: str | os.PathLike[str]) -> bool:
    """Whether folders under `folder` can be swapped atomically (tries it on two empty ones)."""
    import tempfile

    a = tempfile.mkdtemp(prefix=".swap-probe-", dir=folder)
    b = tempfile.mkdtemp(prefix=".swap-probe-", dir=folder)
    try:
        return exchange(a, b)
    finally:
        os.rmdir(a)
        os.rmdir(b)


def swap_in(new: Path, live: Path, spare: Path) -> Path | None:
    """Put folder `new` at `live`; return where the previous `live` now is (None if none was).

    With an atomic swap the previous tree ends up at `new`'s old path and `live` is never
    missing. Without one it is renamed to `spare` first, which leaves `live` missing for the
    moment between the two renames; a kill there leaves the old tree at `spare` to recover.
    """
    if not os.path.lexists(live):
        os.rename(new, live)
        return None
    if exchange(new, live):
        return new
    os.rename(live, spare)
    try:
        os.rename(new, live)
    except OSError:
        os.rename(spare, live)
        raise
    return spare


def swap_back(live: Path, previous: Path | None) -> None:
    """Undo swap_in: put `previous` back at `live` (None: there was nothing; remove `live`)."""
    if previous is None:
        rmtree(live)
        return
    if exchange(previous, live):
        return
    rmtree(live)
    os.rename(previous, live)


def rmtree(path: Path) -> None:
    """Remove a folder (or file, or link) we created; read-only subfolders do not stop it."""
    if not os.path.lexists(path):
        return
    if os.path.islink(path) or not os.path.isdir(path):
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        return

    def retry(func, p, exc):
        # A folder without write permission keeps its entries; make it writable and try again.
        parent = os.path.dirname(p)
        try:
            os.chmod(parent, os.stat(parent).st_mode | stat.S_IWUSR | stat.S_IXUSR)
            func(p)
        except OSError:
            pass

    if sys.version_info >= (3, 12):
        shutil.rmtree(path, onexc=retry)
    else:
        shutil.rmtree(path, onerror=lambda func, p, info: retry(func, p, info[1]))
