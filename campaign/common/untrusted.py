"""Files and folders that others may have made: read as data, made fresh, checked.

A job folder (``<results_dir>/jobs/<campaign id>``) and the paths the store names in
it (``job_folder``, ``log_path``) are written by jobs, and by anyone who can write
the store or the results folder. A host-side command reads them only through
``read_tail`` (or ``read_bytes``, for a small file wanted whole): regular files only
(a symlink to ``/dev/zero`` would never end, a FIFO would block), opened without
following a link and without blocking, at most a bounded tail.

A launch makes its job folder fresh (``make_job_folder``: it must not exist, mode
0700); a later command of the same campaign (resume, retries, waves) uses it only
while it is this user's own private folder, so nobody else can swap the pickles
submitted into it before the jobs start. A results_dir that others can write without
the sticky bit is refused (not warned about: whoever can write it can move a job
folder away and put their own in its place), with the fix: ``chmod g-w,o-w DIR``, or
``chmod +t DIR`` for a folder meant to be shared.
"""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

from campaign.common.errors import ConfigError

TAIL_BYTES = 64 * 1024  # what a command reads of a file at most: its last 64 KiB
_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


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
        chunk = os.read(fd, min(left, 1 << 16))
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


def open_append(path: Path | str, mode: int = 0o600) -> int:
    """A file descriptor appending to the regular file ``path`` (made ``mode`` if
    missing), never through a symlink nor into a FIFO or device: OSError otherwise."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, mode)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(f"{path} is not a regular file ({kind(st.st_mode)}); remove it")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def write_new(path: Path | str, data: bytes, mode: int = 0o600) -> None:
    """Write ``data`` to ``path``, a file that must not exist yet (never a link's target)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)


# ---------------------------------------------------------------- folders

def _others_write(st: os.stat_result) -> bool:
    """Others (group or world) can rename or replace what is in it: writable, no sticky bit."""
    return bool(st.st_mode & 0o022) and not st.st_mode & stat.S_ISVTX


def check_shared_folder(folder: Path | str, what: str) -> None:
    """``folder`` (e.g. results_dir) is not group- or world-writable without the sticky
    bit: whoever can write it could move a job folder away and put their own in its
    place. ConfigError with the fix otherwise; a missing folder passes."""
    try:
        st = os.stat(folder)
    except (FileNotFoundError, NotADirectoryError):  # missing, or under a file: the writable check says which
        return
    except OSError as exc:
        raise ConfigError(f"{what} {folder} cannot be checked: {exc.strerror or exc}; fix its permissions") from None
    if stat.S_ISDIR(st.st_mode) and _others_write(st):
        raise ConfigError(f"{what} {folder} is writable by others ({stat.filemode(st.st_mode)}) without the sticky "
                          f"bit: they could swap the jobs' files; run chmod g-w,o-w {folder} (or chmod +t {folder} "
                          "for a shared folder)")


def check_own_folder(folder: Path | str, what: str = "job folder") -> None:
    """``folder`` is a real folder (not a symlink) of this user (or root) that nobody else
    can write: ConfigError naming the folder and the fix otherwise."""
    st = os.lstat(folder)
    problem = None
    if not stat.S_ISDIR(st.st_mode):
        problem = f"is {kind(st.st_mode)}, not a folder"
    elif st.st_uid not in (os.geteuid(), 0):
        problem = f"belongs to another user (uid {st.st_uid})"
    elif st.st_mode & 0o022:
        problem = f"is writable by others ({stat.filemode(st.st_mode)})"
    if problem:
        raise ConfigError(f"{what} {folder} {problem}: another user could swap the files submitted there; "
                          f"remove it (rm -r {folder}) or choose another results_dir, and submit again")


def make_job_folder(folder: Path | str, *, fresh: bool, shared: Sequence[Path | str] = ()) -> Path:
    """Make the job folder ``folder`` (mode 0700) and return it.

    ``fresh`` (a launch): the folder must not exist yet; one that does was made by
    someone else before this launch and is refused. Otherwise (resume, retries, waves of
    the campaign that made it) an existing folder is used only if ``check_own_folder``
    passes. ``shared`` (e.g. results_dir): folders above it that must pass
    ``check_shared_folder``; its parent is made if missing (OSError when it cannot be),
    and must not be writable by others either."""
    folder = Path(folder)
    folder.parent.mkdir(mode=0o755, parents=True, exist_ok=True)  # never group-writable, whatever the umask
    for above in (*shared, folder.parent):
        check_shared_folder(above, "results folder")
    parent = os.stat(folder.parent)
    if parent.st_uid not in (os.geteuid(), 0):
        raise ConfigError(f"results folder {folder.parent} belongs to another user (uid {parent.st_uid}), who could "
                          f"swap the job folders in it; choose another results_dir")
    try:
        os.mkdir(folder, 0o700)
    except FileExistsError:
        if fresh:
            raise ConfigError(f"job folder {folder} exists already: this launch did not make it, so it is not "
                              f"used; remove it (rm -r {folder}) and launch again") from None
        check_own_folder(folder)
    return folder
