"""Files campaign writes where others may have put something first: never a store, never
through a link, never into a FIFO.

A read command's output (``harvest --out``, ``report --out``, figures in ``--plots DIR``)
and a launch's record of its sweep (``<results_dir>/.hydra/multirun.yaml``) land in
folders a group may share. Whoever can write such a folder can put a symbolic link there
(to a victim file, which a plain ``open(path, "w")`` would overwrite) or a FIFO (which a
plain open blocks on forever). ``write_output`` is the one way such a file is written:

- a target that exists and is not a regular file (a symbolic link, FIFO, device, socket,
  folder) is refused in one line (``ConfigError``, exit 2), before anything is written;
- the data goes to a new file in the same folder, made create-new and without following
  links (``O_CREAT|O_EXCL|O_NOFOLLOW``), then ``os.replace`` puts it in place: a link
  planted after the check is replaced itself, its target never written; an existing
  regular file is replaced, as before (the new file takes this user's umask);
- the target's folder may be a symbolic link for a user's own output (``--out
  ~/reports/x.html``, where ``~/reports`` links to a scratch file system: the folders above
  an output are trusted to whoever owns them, as the folders above ``results_dir`` are);
  a caller that writes inside a shared results folder refuses one (``parent_link=False``).

A read command that writes its output over the results store it read (``campaign harvest
--to csv --out results/campaign.db``), or over the store's write-ahead log or shared
memory file, would lose every campaign in it and still exit 0: that is refused too. An
SQLite database is known by its first 16 bytes (``SQLite format 3\\0``, the file format's
header), read without blocking from a regular file only; its ``-wal``, ``-shm`` and
``-journal`` companions by their name beside one.
"""

from __future__ import annotations

import errno
import os
import secrets
import stat
from pathlib import Path
from typing import BinaryIO, Callable, Optional, Union

from campaign.common.errors import ConfigError
from campaign.common.untrusted import kind

SQLITE_HEADER = b"SQLite format 3\x00"
COMPANIONS = ("-wal", "-shm", "-journal")
FIX = "remove it or choose another path"
# a probe follows a link (a store reached through one is still a store) but never blocks
_PROBE = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
_NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)

Data = Union[bytes, Callable[[BinaryIO], None]]


def is_sqlite(path: Path | str) -> bool:
    """Whether ``path`` is a regular file that starts as an SQLite database does (a FIFO,
    device or folder is not opened for reading, or not read: never blocks)."""
    try:
        fd = os.open(path, _PROBE)
    except OSError:  # absent, unreadable: not one this command could tell
        return False
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return False
        return os.read(fd, len(SQLITE_HEADER)) == SQLITE_HEADER
    except OSError:
        return False
    finally:
        os.close(fd)


def not_regular(path: Path | str) -> Optional[str]:
    """What ``path`` is, in words, when it exists and is not a regular file (a link is not
    followed: ``"a symbolic link"``); None when it is a regular file or absent."""
    try:
        st = os.lstat(path)
    except OSError:  # absent (or its folder is not one): writing it says why, if it cannot
        return None
    return None if stat.S_ISREG(st.st_mode) else kind(st.st_mode)


def refuse_not_regular(path: Path | str, flag: str = "--out", fix: str = FIX) -> None:
    """ConfigError (one line) when ``path`` exists and is not a regular file."""
    what = not_regular(path)
    if what is not None:
        raise ConfigError(f"{flag} {path}: is {what}, not a regular file; {fix}")


def check_output(path: Path | str, flag: str = "--out", fix: str = FIX) -> Path:
    """``path``, or a ConfigError (one line) where writing it would write through a link,
    into a FIFO, device or folder, or overwrite an SQLite database or one of its companion
    files."""
    p = Path(path)
    refuse_not_regular(p, flag, fix)
    base = next((p.with_name(p.name[: -len(s)]) for s in COMPANIONS if p.name.endswith(s) and p.name != s), None)
    if base is not None and is_sqlite(base):
        what = f"the {p.name[len(base.name):]} file of the SQLite database {base}"
    elif is_sqlite(p):
        what = "an SQLite database (a results store?)"
    else:
        return p
    raise ConfigError(f"{flag} {p} is {what}: not overwritten; give another file")


def write_output(path: Path | str, data: Data, *, flag: str = "--out", fix: str = FIX, parent_link: bool = True,
                 mode: int = 0o666, hint: str = "") -> Path:
    """Write ``data`` (bytes, or a function writing to a binary file) to ``path`` as the
    module says: refused (ConfigError, one line, nothing written) when ``path`` is not a
    regular file or is a store (``check_output``), or when ``parent_link`` is False and its
    folder is a symbolic link; its folder is made when missing. ``mode``: the new file's
    (the umask applies). ``hint``: appended to a ``cannot write`` message."""
    p = Path(path)
    check_output(p, flag, fix)
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"cannot write {p}: {exc.strerror or exc}{hint}") from None
    if not parent_link and os.path.islink(p.parent):
        raise ConfigError(f"{flag} {p}: its folder {p.parent} is a symbolic link, not a folder; {fix}")
    tmp = p.with_name(f".{p.name}.{secrets.token_hex(6)}.tmp")
    try:
        fd = os.open(tmp, _NEW, mode)
    except OSError as exc:
        raise ConfigError(f"cannot write {p}: {exc.strerror or exc}{hint}") from None
    try:
        with os.fdopen(fd, "wb") as fh:
            if callable(data):
                data(fh)
            else:
                fh.write(data)
        refuse_not_regular(p, flag, fix)  # planted while the data was written: refused all the same
        os.replace(tmp, p)  # a link put there since is replaced itself, never followed
    except OSError as exc:
        _discard(tmp)
        why = "is a directory, not a regular file" if exc.errno in (errno.EISDIR, errno.ENOTEMPTY) else exc.strerror
        raise ConfigError(f"cannot write {p}: {why or exc}{hint}") from None
    except BaseException:
        _discard(tmp)
        raise
    return p


def _discard(tmp: Path) -> None:
    try:
        os.unlink(tmp)
    except OSError:
        pass
