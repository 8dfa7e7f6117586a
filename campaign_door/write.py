"""The door's writes: into a folder made fresh or checked first, by descriptor, never
through a link, renamed into place.

Whoever can write a shared folder (a group's results folder, before ``datasets/`` or
``weights/`` exists) can put a link where campaign is about to write (a file named
``test`` that points at ``~/.bashrc``), or make the folder itself and fill it. So:

- ``open_folder(path)`` opens the folder a file goes in, making what is missing of it
  one level at a time (mode 0755, whatever the umask), each level opened by descriptor
  without following a link and checked on the open descriptor (``folder_problem``): a
  folder of this user (or root), that nobody else can write unless its sticky bit is
  set (then nobody else can rename or remove this user's files in it), as the launch's
  preflight asks of ``results_dir``. The deepest folder that already existed is
  checked too (it is reached as the user named it: the folders above a path are the
  user's own arrangement, as a ``dataset.root`` linked to a scratch file system is);
- ``Folder.write(name, data)`` makes a new file in that open folder with
  ``O_CREAT|O_EXCL|O_NOFOLLOW`` under a name of its own, sets its mode on the
  descriptor (``fchmod``, never ``chmod`` by path), writes it, then renames it onto
  ``name`` within the same descriptor: a link or FIFO already at ``name`` is refused,
  one planted meanwhile is replaced itself, and its target is never opened.

Every refusal is ``Refused``: one line naming the folder or file and the fix.
"""

from __future__ import annotations

import errno
import os
import secrets
import stat
from pathlib import Path
from typing import BinaryIO, Callable, Optional, Union

from campaign_door.read import Refused, kind

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC

Data = Union[bytes, Callable[[BinaryIO], None]]


def others_write(st: os.stat_result) -> bool:
    """Others (group or world) can rename or replace what is in it: writable, no sticky bit."""
    return bool(st.st_mode & 0o022) and not st.st_mode & stat.S_ISVTX


def folder_problem(st: os.stat_result) -> Optional[str]:
    """Why a folder of stat ``st`` is not one the door writes in (None: it is)."""
    if not stat.S_ISDIR(st.st_mode):
        return f"is {kind(st.st_mode)}, not a folder"
    if st.st_uid not in (os.geteuid(), 0):
        return f"belongs to another user (uid {st.st_uid}), who could put anything in it"
    if others_write(st):
        return f"is writable by others ({stat.filemode(st.st_mode)}) without the sticky bit"
    return None


class Folder:
    """A folder the door checked, held open by descriptor: files are made in it by name."""

    def __init__(self, path: Path, fd: int):
        self.path, self.fd = path, fd

    def __enter__(self) -> "Folder":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def sub(self, name: str) -> "Folder":
        """The folder ``name`` in this one, made if missing, checked (``folder_problem``)."""
        try:
            os.mkdir(name, 0o755, dir_fd=self.fd)  # the umask may take more away, never add
        except FileExistsError:
            pass
        except OSError as exc:
            raise Refused(f"cannot make the folder {self.path / name}: {exc.strerror or exc}") from None
        return _checked(self.path / name, lambda: os.open(name, _DIR, dir_fd=self.fd))

    def folder(self, relative: Path | str) -> "Folder":
        """The folder ``relative`` (a/b/c) under this one, each level as ``sub`` makes it."""
        parts = Path(relative).parts
        if not parts or any(part in ("", ".", "..", "/") for part in parts):
            raise Refused(f"{self.path / relative}: not a plain folder path")
        here = self.sub(parts[0])
        for part in parts[1:]:
            nxt = here.sub(part)
            here.close()
            here = nxt
        return here

    def existing(self, name: str) -> Optional[os.stat_result]:
        """``lstat`` of ``name`` in this folder (None: absent)."""
        try:
            return os.stat(name, dir_fd=self.fd, follow_symlinks=False)
        except FileNotFoundError:
            return None

    def write(self, name: str, data: Data, mode: int = 0o644) -> Path:
        """Write ``data`` (bytes, or a function writing to a binary file) to ``name`` in this
        folder as the module says; returns its path. ``Refused`` when ``name`` is there and
        is not a regular file (nothing written), or when it cannot be written."""
        if "/" in name or name in ("", ".", ".."):
            raise Refused(f"{self.path / name}: not a file name")
        target = self.path / name
        st = self.existing(name)
        if st is not None and not stat.S_ISREG(st.st_mode):
            raise Refused(f"{target} is {kind(st.st_mode)}, not a regular file; remove it (nothing was written)")
        tmp = f".{name}.{secrets.token_hex(6)}.part"
        try:
            fd = os.open(tmp, _NEW, 0o600, dir_fd=self.fd)
        except OSError as exc:
            raise Refused(f"cannot write {target}: {exc.strerror or exc}") from None
        theirs = False  # an error of the caller's function (a download's) is its own, raised as it is
        try:
            os.fchmod(fd, mode)  # on the descriptor: a path swapped for a link is never chmod'ed
            with os.fdopen(fd, "wb") as fh:
                if callable(data):
                    theirs = True
                    data(fh)
                    theirs = False
                else:
                    fh.write(data)
            os.rename(tmp, name, src_dir_fd=self.fd, dst_dir_fd=self.fd)
        except BaseException as exc:
            try:
                os.unlink(tmp, dir_fd=self.fd)
            except OSError:
                pass
            if isinstance(exc, OSError) and not theirs:
                why = "is a folder" if exc.errno in (errno.EISDIR, errno.ENOTEMPTY) else (exc.strerror or exc)
                raise Refused(f"cannot write {target}: {why}") from None
            raise
        return target


def _checked(path: Path, opener: Callable[[], int]) -> Folder:
    try:
        fd = opener()
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise Refused(f"{path} is a symbolic link or a file, not a folder; remove it or choose another "
                          "folder (nothing was written)") from None
        raise Refused(f"cannot open the folder {path}: {exc.strerror or exc}") from None
    problem = folder_problem(os.fstat(fd))
    if problem:
        os.close(fd)
        raise Refused(f"folder {path} {problem}; nothing was written there: remove it or choose another "
                      f"folder (chmod g-w,o-w {path}, or chmod +t {path} for a shared folder)")
    return Folder(path, fd)


def open_folder(path: Path | str) -> Folder:
    """The folder ``path``, opened and checked as the module says, made (0755) where missing.
    The caller closes it (``with open_folder(p) as f: f.write(...)``)."""
    path = Path(os.path.abspath(os.path.expanduser(str(path))))
    top, missing = path, []
    while not os.path.lexists(top) and top != top.parent:
        missing.append(top.name)
        top = top.parent
    # the deepest folder that exists, reached as the user named it (links above are theirs)
    base = _checked(top, lambda: os.open(top, _DIR & ~os.O_NOFOLLOW))
    if not missing:
        return base
    try:
        return base.folder(Path(*reversed(missing)))
    finally:
        base.close()


def write_file(path: Path | str, data: Data, mode: int = 0o644) -> Path:
    """``data`` written to ``path`` through the door (its folder made or checked first)."""
    p = Path(path)
    with open_folder(p.parent) as folder:
        return folder.write(p.name, data, mode)


def write_new(path: Path | str, data: bytes, mode: int = 0o600) -> None:
    """Write ``data`` to ``path``, a file that must not exist yet (never a link's target):
    for a folder checked by its caller (a job folder made fresh, 0700)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    try:
        view = memoryview(data)
        while view:  # os.write may write less than it is given
            view = view[os.write(fd, view):]
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
