"""The files of a checkpoint, bound to its `state.json`: a size and a SHA-256 per file, checked before parsing.

`record_files` hashes what a save wrote; `open_verified` opens one file for loading and refuses, with a
ValueError naming the file and the problem, anything that is not the file `state.json` recorded: a
symlink (a checkpoint holds its own files; a link would load whatever it points to now), something that
is not a regular file, another size, or another SHA-256 (a flipped byte, a truncation, or a file copied in
from another checkpoint or run, even one of the same shapes). The checked file is returned open, and the
caller parses that same open file, so what was hashed is what loads (a reader that must reopen it by path,
such as a memory-mapped load, checks `still_verified` afterwards).

Checkpoints written before digests were recorded (format 1) give a size per file, or nothing: those files
are checked for their size only.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
from typing import Any, BinaryIO, Iterable

__all__ = ["check_record", "open_verified", "record_files", "still_verified"]

_CHUNK = 1 << 20
_HEX64 = re.compile(r"[0-9a-f]{64}")


def record_files(directory: str, names: Iterable[str]) -> dict[str, dict[str, Any]]:
    """`{name: {"bytes": size, "sha256": hex digest}}` of each file `directory/name`."""
    out = {}
    for name in names:
        with open(os.path.join(directory, name), "rb") as f:
            size, digest = _hash(f)
        out[name] = {"bytes": size, "sha256": digest}
    return out


def check_record(name: str, record: Any) -> None:
    """Raise ValueError unless `record` is `{"bytes": int >= 0, "sha256": 64 lowercase hex digits}`."""
    if not isinstance(record, dict) or set(record) != {"bytes", "sha256"}:
        raise ValueError(f"the record of {name} is not {{'bytes', 'sha256'}}: {str(record)[:80]}")
    size, digest = record["bytes"], record["sha256"]
    if isinstance(size, bool) or not isinstance(size, int) or size < 0:
        raise ValueError(f"the recorded size of {name} is not a non-negative int: {size!r}")
    if not isinstance(digest, str) or not _HEX64.fullmatch(digest):
        raise ValueError(f"the recorded SHA-256 of {name} is not 64 hex digits: {str(digest)[:80]!r}")


def open_verified(directory: str, name: str, record: Any) -> BinaryIO:
    """Open `directory/name` (`name` may hold `/`) for reading, after checking it is the file `record` describes.

    `record` is `{"bytes", "sha256"}` (checked in full), an int (a format-1 size) or None (nothing to
    compare). No part of `name` may be a symlink. Raises ValueError naming `name` and what is wrong;
    returns the open file at offset 0 (the caller closes it).
    """
    _refuse_links(directory, name)
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_BINARY", 0)
    try:
        fd = os.open(os.path.join(directory, name), flags)
    except FileNotFoundError:
        raise ValueError(f"{name} is missing") from None
    except OSError as exc:
        raise ValueError(f"{name} cannot be opened ({exc.strerror or exc})") from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise ValueError(f"{name} is not a regular file")
    f = os.fdopen(fd, "rb")
    try:
        size = info.st_size
        expected = record["bytes"] if isinstance(record, dict) else record
        if expected is not None and size != expected:
            raise ValueError(f"{name} has {size} bytes, {expected} were written (truncated, extended or replaced)")
        if isinstance(record, dict):
            _, digest = _hash(f)
            if digest != record["sha256"]:
                raise ValueError(f"{name} does not match the SHA-256 recorded in state.json (sha256 {digest[:16]}..., "
                                 f"recorded {record['sha256'][:16]}...): its bytes changed, or it comes from "
                                 "another checkpoint")
            f.seek(0)
        return f
    except BaseException:
        f.close()
        raise


def still_verified(directory: str, name: str, f: BinaryIO) -> None:
    """Raise ValueError unless `directory/name` is still the file `f` that `open_verified` checked (same device,
    inode, size and modification time), for readers that must open it again by path (memory-mapped loads)."""
    try:
        now = os.stat(os.path.join(directory, name))  # follows links: a link put in its place shows another inode
    except OSError as exc:
        raise ValueError(f"{name} vanished while loading ({exc.strerror or exc})") from None
    then = os.fstat(f.fileno())
    if (now.st_dev, now.st_ino, now.st_size, now.st_mtime_ns) != (then.st_dev, then.st_ino, then.st_size,
                                                                 then.st_mtime_ns):
        raise ValueError(f"{name} was replaced or changed while loading")


def _refuse_links(directory: str, name: str) -> None:
    """Raise ValueError when `name` or a directory on its way down from `directory` is a symlink."""
    parts = name.split("/")
    for i in range(1, len(parts) + 1):
        rel = "/".join(parts[:i])
        if os.path.islink(os.path.join(directory, rel)):
            target = os.readlink(os.path.join(directory, rel))
            raise ValueError(f"{rel} is a symlink (to {target!r}); a checkpoint must hold its own files, so copy "
                             "the file in instead of linking it")


def _hash(f: BinaryIO) -> tuple[int, str]:
    h, size = hashlib.sha256(), 0
    while chunk := f.read(_CHUNK):
        h.update(chunk)
        size += len(chunk)
    return size, h.hexdigest()
