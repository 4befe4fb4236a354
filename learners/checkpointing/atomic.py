"""Writing a directory atomically: readers see the old directory or the complete new one, never a part.

`write_directory_atomically(path, write, tag)` lets `write` fill a hidden staging
directory next to `path` (`.{name}{tag}XXXX`), gives every file and directory
the usual permissions (0666 / 0777 less the umask), fsyncs them all, and
renames the staging directory into place. An existing directory at `path` is
swapped atomically with `renameat2(RENAME_EXCHANGE)` where the OS offers it,
else moved aside first and put back if the rename fails; then the parent is
fsynced. Inside `creating(path)` the rename is create-only instead
(`renameat2(RENAME_NOREPLACE)`, else a check just before `os.rename`): a
directory that appeared at `path` meanwhile (another run's) is never replaced,
the write fails with FileExistsError. A crash mid-write leaves the old
directory and, at worst, a hidden staging directory whose name holds `tag`,
which `remove_staging` deletes. `remove_directory` deletes through such a
hidden name too, so a kill mid-delete never leaves a part of `path` under its
own name.
"""

from __future__ import annotations

import contextlib
import contextvars
import ctypes
import errno
import os
import shutil
import tempfile
import uuid
from typing import Callable, Iterator

__all__ = ["creating", "exchange", "remove_directory", "remove_staging", "staging_tag",
           "write_directory_atomically"]

_CREATE_ONLY: contextvars.ContextVar[frozenset[str]] = contextvars.ContextVar("create_only", default=frozenset())
_RENAME_NOREPLACE, _RENAME_EXCHANGE = 1, 2


def write_directory_atomically(path: str, write: Callable[[str], None], tag: str) -> None:
    """Create or replace directory `path` with what `write(staging_dir)` writes, atomically and durably.

    `tag` marks the staging directories of one writer (see `staging_tag`). If `write` raises, `path`
    is left as it was and the staging directory is removed. Inside `creating(path)` an existing `path` is
    never replaced: FileExistsError instead.
    """
    parent = os.path.dirname(path)
    os.makedirs(parent, exist_ok=True)
    name = os.path.basename(path)
    staging = tempfile.mkdtemp(prefix=f".{name}{tag}", dir=parent)
    try:
        write(staging)
        _settle_tree(staging)
        trash = None
        if os.path.abspath(path) in _CREATE_ONLY.get():
            _rename_no_replace(staging, path)
        elif not os.path.isdir(path):
            os.rename(staging, path)
        elif not exchange(staging, path):  # no atomic exchange here: move the old one aside, then rename
            trash = tempfile.mkdtemp(prefix=f".{name}{tag}old-", dir=parent)
            os.rename(path, os.path.join(trash, "old"))
            try:
                os.rename(staging, path)
            except BaseException:
                os.rename(os.path.join(trash, "old"), path)  # put the old directory back
                raise
        _fsync_dir(parent)
        if trash is not None:
            shutil.rmtree(trash, ignore_errors=True)
    finally:
        shutil.rmtree(staging, ignore_errors=True)  # gone after a rename; the old directory after a swap


@contextlib.contextmanager
def creating(path: str) -> Iterator[None]:
    """Within the block, `write_directory_atomically(path, ...)` only creates `path`: it fails rather than
    replace a directory that appeared there (the caller checked, before writing, that nothing was there)."""
    token = _CREATE_ONLY.set(_CREATE_ONLY.get() | {os.path.abspath(path)})
    try:
        yield
    finally:
        _CREATE_ONLY.reset(token)


def staging_tag(owner: str) -> str:
    """The part of a staging directory's name that marks `owner` (e.g. a run id) as its writer."""
    return f".tmp-{str(owner)[:12]}-"


def remove_staging(directory: str, tag: str) -> None:
    """Delete the staging directories with `tag` in `directory` (left behind by a writer that crashed)."""
    for name in os.listdir(directory):
        if name.startswith(".") and tag in name:
            shutil.rmtree(os.path.join(directory, name), ignore_errors=True)


def remove_directory(path: str, tag: str) -> None:
    """Delete directory `path`: first renamed to a hidden name holding `tag`, then removed.

    A kill mid-delete leaves a hidden directory that `remove_staging(parent, tag)` deletes later, never a
    part of `path` under its own name (which would look like a damaged checkpoint)."""
    parent, name = os.path.split(path)
    trash = os.path.join(parent, f".{name}{tag}trash-{uuid.uuid4().hex[:8]}")
    try:
        os.rename(path, trash)
    except FileNotFoundError:
        return
    _fsync_dir(parent)
    shutil.rmtree(trash, ignore_errors=True)


def exchange(a: str, b: str) -> bool:
    """Atomically swap two paths (Linux renameat2 RENAME_EXCHANGE); False where unsupported."""
    return _renameat2(a, b, _RENAME_EXCHANGE) == 0


def _rename_no_replace(src: str, dst: str) -> None:
    """Rename `src` to `dst`, failing with FileExistsError when `dst` exists (even a directory that appears
    at the last moment, where renameat2 RENAME_NOREPLACE is available)."""
    result = _renameat2(src, dst, _RENAME_NOREPLACE)
    if result == 0:
        return
    if result > 0 and result not in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP):
        if result == errno.EEXIST:
            raise FileExistsError(errno.EEXIST, "it appeared while this checkpoint was written", dst)
        raise OSError(result, os.strerror(result), dst)
    # No renameat2, or a filesystem without RENAME_NOREPLACE: check, then rename (a short window remains;
    # os.rename still refuses a non-empty directory on POSIX).
    if os.path.lexists(dst):
        raise FileExistsError(errno.EEXIST, "it appeared while this checkpoint was written", dst)
    os.rename(src, dst)


def _renameat2(a: str, b: str, flags: int) -> int:
    """0 on success, the errno on failure, -1 where renameat2 does not exist."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except Exception:  # no libc by that name (Windows) or no renameat2 (macOS, old glibc)
        return -1
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    at_fdcwd = -100
    if renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), flags) == 0:
        return 0
    return ctypes.get_errno() or errno.EINVAL


def _settle_tree(root: str) -> None:
    """Give every file and directory below `root` the usual permissions and fsync it.

    mkdtemp makes directories 0700 and some writers (safetensors) create 0600 files; the result gets
    what `open` and `mkdir` would give under the umask.
    """
    mask = _umask()
    for dirpath, _, files in os.walk(root):
        os.chmod(dirpath, 0o777 & ~mask)
        for name in files:
            file = os.path.join(dirpath, name)
            os.chmod(file, 0o666 & ~mask)
            fd = os.open(file, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        _fsync_dir(dirpath)


def _fsync_dir(path: str) -> None:
    if os.name == "nt":  # directories cannot be opened for fsync on Windows
        return
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
