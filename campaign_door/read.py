"""The door's reads: regular files only, never through a link, never blocking, bounded.

Two kinds of read go through here. A host-side command reads what jobs and others wrote in
a job folder (``read_tail``, ``read_bytes``, ``read_head``) and gets ``(None, reason)``
for anything else; a data set's files and a weights file are read whole by
``read_file`` (``Refused``, one line naming the file, otherwise). The last component of
a path is never followed (a link there is refused); the folders above it are the user's
own arrangement (``dataset.root`` may be a link to a scratch file system).
"""

from __future__ import annotations

import errno
import gzip
import io
import os
import stat
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

TAIL_BYTES = 64 * 1024  # what a command reads of a file at most: its last 64 KiB
_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class Refused(ValueError):
    """A file or folder the door will not read or write: one line, naming it, with the fix."""


@dataclass(frozen=True)
class Tail:
    """What ``read_tail`` got: the text (None when the file was not read) and why not."""

    text: Optional[str]
    reason: Optional[str] = None  # e.g. "is not a regular file (a symbolic link)"


def kind(mode: int) -> str:
    """What a file of ``mode`` is, in words (for a refusal)."""
    for test, name in ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISDIR, "a directory"),
                       (stat.S_ISCHR, "a device"), (stat.S_ISBLK, "a device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


def regular_stat(path: Path | str) -> tuple[Optional[os.stat_result], Optional[str]]:
    """``lstat`` of ``path`` when it is a regular file (a link is not followed), else
    ``(None, reason)``."""
    try:
        st = os.lstat(path)
    except OSError as exc:
        return None, exc.strerror or str(exc)
    if not stat.S_ISREG(st.st_mode):
        return None, f"is not a regular file ({kind(st.st_mode)})"
    return st, None


def read_tail(path: Path | str, max_bytes: int = TAIL_BYTES) -> Tail:
    """The last ``max_bytes`` of the regular file ``path`` as text (undecodable bytes
    replaced), or ``Tail(None, reason)``: a symlink, FIFO, device, socket or directory
    is never opened for reading (checked before opening and again on the open file, so
    a file swapped in between is refused too), and nothing blocks or reads past the
    bound, whatever the file claims its size is."""
    data, reason = _read(path, max_bytes, whole=False)
    return Tail(None if data is None else data.decode("utf-8", errors="replace"), reason)


def read_bytes(path: Path | str, max_bytes: int) -> tuple[Optional[bytes], Optional[str]]:
    """The whole of the regular file ``path`` when it holds at most ``max_bytes`` (a spool
    file, a record), else ``(None, reason)``: ``read_tail``'s checks, and a larger file is
    refused rather than cut."""
    return _read(path, max_bytes, whole=True)


def read_file(path: Path | str, max_bytes: int) -> bytes:
    """The whole of the regular file ``path`` (a data set's batch, a weights file), or
    ``Refused`` in one line naming it: a link, FIFO, device or folder, or a file over
    ``max_bytes`` (the bound each caller states)."""
    data, reason = _read(path, max_bytes, whole=True)
    if data is None:
        raise Refused(f"{path} {reason}; not read")
    return data


def read_gz(path: Path | str, max_bytes: int) -> bytes:
    """``read_file`` of a gzip file, decompressed: at most ``max_bytes`` compressed and
    ``max_bytes`` decompressed (a gzip bomb is refused, not inflated)."""
    raw = read_file(path, max_bytes)
    try:
        with gzip.GzipFile(fileobj=io.BytesIO(raw)) as fh:
            data = fh.read(max_bytes + 1)
    except (OSError, EOFError, zlib.error) as exc:
        raise Refused(f"{path} is not a readable gzip file ({exc}); not read") from None
    if len(data) > max_bytes:
        raise Refused(f"{path} decompresses to more than {max_bytes} bytes; not read")
    return data


def _read(path: Path | str, max_bytes: int, *, whole: bool) -> tuple[Optional[bytes], Optional[str]]:
    st, reason = regular_stat(path)
    if st is None:
        return None, reason
    try:
        fd = os.open(path, _READ)
    except OSError as exc:
        return None, ("is not a regular file (a symbolic link)" if exc.errno == errno.ELOOP
                      else (exc.strerror or str(exc)))
    try:
        now = os.fstat(fd)
        if not stat.S_ISREG(now.st_mode) or (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino):
            return None, f"is not a regular file ({kind(now.st_mode)})"
        if whole and now.st_size > max_bytes:
            return None, f"is larger than {max_bytes} bytes ({now.st_size})"
        os.set_blocking(fd, True)
        os.lseek(fd, max(0, now.st_size - max_bytes), os.SEEK_SET)
        data = _read_upto(fd, max_bytes + 1 if whole else max_bytes)  # one more: a file that grew is seen to
        if whole and len(data) > max_bytes:
            return None, f"is larger than {max_bytes} bytes (it grew while read)"
        return data, None
    except OSError as exc:
        return None, exc.strerror or str(exc)
    finally:
        os.close(fd)


def _read_upto(fd: int, limit: int) -> bytes:
    """At most ``limit`` bytes from ``fd``'s position, in chunks, until its end."""
    chunks, left = [], limit
    while left > 0:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def read_head(path: Path | str, max_bytes: int, *, follow: bool = False) -> tuple[Optional[bytes], Optional[str]]:
    """The first ``max_bytes`` of the regular file ``path``, or ``(None, reason)``: opened
    without blocking (a FIFO with no writer answers at once) and checked on the open file
    (``fstat``) to be a regular file before anything is read. ``follow``: a symbolic link
    is followed (its target must be a regular file; for a file that is legitimately linked,
    such as an image's record beside a linked image); otherwise a link is refused."""
    try:
        fd = os.open(path, _READ if not follow else _READ & ~os.O_NOFOLLOW)
    except OSError as exc:
        return None, ("is not a regular file (a symbolic link)" if exc.errno == errno.ELOOP
                      else (exc.strerror or str(exc)))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return None, f"is not a regular file ({kind(st.st_mode)})"
        os.set_blocking(fd, True)
        return _read_upto(fd, max_bytes), None
    except OSError as exc:
        return None, exc.strerror or str(exc)
    finally:
        os.close(fd)
