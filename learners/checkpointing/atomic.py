"""Writing a directory atomically: readers see the old directory or the complete new one, never a part.

`write_directory_atomically(path, write, tag)` lets `write` fill a hidden staging
directory next to `path` (`.{name}{tag}XXXX`), gives every file and directory
the usual permissions (0666 / 0777 less the umask), fsyncs them all, and
renames the staging directory into place. An existing directory at `path` is
swapped atomically with `renameat2(RENAME_EXCHANGE)` where the OS offers it,
else moved aside first and put back if the rename fails; then the parent is
fsynced. A crash mid-write leaves the old directory and, at worst, a hidden
staging directory whose name holds `tag`, which `remove_staging` deletes.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import tempfile
from typing import Callable

__all__ = ["exchange", "remove_staging", "staging_tag", "write_directory_atomically"]


def write_directory_atomically(path: str, write: Callable[[str], None], tag: str) -> None:
    """Create or replace directory `path` with what `write(staging_dir)` writes, atomically and durably.

    `tag` marks the staging directories of one writer (see `staging_tag`). If `write` raises, `path`
    is left as it was and the staging directory is removed.
    """
    parent = os.path.dirname(path)
    os.makedirs(parent, exist_ok=True)
    name = os.path.basename(path)
    staging = tempfile.mkdtemp(prefix=f".{name}{tag}", dir=parent)
    try:
        write(staging)
        _settle_tree(staging)
        trash = None
        if not os.path.isdir(path):
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


def staging_tag(owner: str) -> str:
    """The part of a staging directory's name that marks `owner` (e.g. a run id) as its writer."""
    return f".tmp-{str(owner)[:12]}-"


def remove_staging(directory: str, tag: str) -> None:
    """Delete the staging directories with `tag` in `directory` (left behind by a writer that crashed)."""
    for name in os.listdir(directory):
        if name.startswith(".") and tag in name:
            shutil.rmtree(os.path.join(directory, name), ignore_errors=True)


def exchange(a: str, b: str) -> bool:
    """Atomically swap two paths (Linux renameat2 RENAME_EXCHANGE); False where unsupported."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except Exception:  # no libc by that name (Windows) or no renameat2 (macOS, old glibc)
        return False
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    at_fdcwd, rename_exchange = -100, 2
    return renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0


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
