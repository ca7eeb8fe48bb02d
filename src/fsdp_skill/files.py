"""Write files and replace folders so that a reader, or a kill, never sees half of one.

Files: `write_bytes`/`write_text`/`replacing` write a temp file in the same folder, fsync it,
rename it over the target and fsync the folder, so after a crash the target holds either the
old or the new bytes, and the rename itself survives a power cut.

Folders: a folder cannot be renamed over a non-empty one, so the obvious replacement takes two
renames (live -> old, new -> live) and a reader, or a kill, between them finds nothing there.
Linux (renameat2 RENAME_EXCHANGE) and macOS (renamex_np RENAME_SWAP) swap two paths in one
atomic step instead; this module uses that where the OS and filesystem offer it and falls back
to the two renames elsewhere, where callers recover on their next run.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import secrets
import shutil
import stat
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

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


def public_mode(path: str | os.PathLike[str], directory: bool = False) -> None:
    """Give a temp file or folder (mkstemp/mkdtemp make them owner-only) the mode a plain
    open()/mkdir() would have had, so a shared skill install stays readable by its users."""
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(path, (0o777 if directory else 0o666) & ~umask)


def temp_name(path: str | os.PathLike[str]) -> Path:
    """A fresh name beside `path` for its temp copy: `.NAME.tmp-RANDOM` (cleanup code matches it)."""
    path = Path(path)
    return path.with_name(f".{path.name}.tmp-{secrets.token_hex(4)}")


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:  # a platform or filesystem that cannot open folders: the rename still stands
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextlib.contextmanager
def replacing(path: str | os.PathLike[str]) -> Iterator[BinaryIO]:
    """Write `path` through a temp file beside it, moved over `path` only when the block succeeds.

    The temp file gets the mode a plain open() would give; it is fsynced before the rename and
    the folder after it. On an exception the temp file goes and `path` is untouched.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_name(path)
    try:
        with open(tmp, "xb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        public_mode(tmp)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    _fsync_dir(path.parent)


def write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    """Replace the file at `path` by `data` atomically and durably (see `replacing`)."""
    with replacing(path) as f:
        f.write(data)


def write_text(path: str | os.PathLike[str], text: str) -> None:
    """`write_bytes` of `text` in UTF-8."""
    write_bytes(path, text.encode("utf-8"))


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

    def retry(func: Callable[[str], object], p: str, exc: BaseException) -> None:
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


def read_capped(path: str | os.PathLike[str], limit: int) -> bytes:
    """A regular file's bytes, at most `limit` of them; anything else raises OSError.

    Opened without blocking (a FIFO would wait for a writer forever), then checked with fstat on
    what was actually opened, so a path swapped after a stat cannot slip through. The OSError's
    message says what was found: "is a FIFO, not a regular file", "is larger than N bytes".
    """
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    with os.fdopen(fd, "rb") as fh:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            if stat.S_ISFIFO(mode):
                kind = "a FIFO"
            elif stat.S_ISDIR(mode):
                kind = "a folder"
            elif stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
                kind = "a device"
            else:
                kind = "a socket"
            raise OSError(f"is {kind}, not a regular file")
        data = fh.read(limit + 1)
    if len(data) > limit:
        raise OSError(f"is larger than {limit} bytes")
    return data
