"""Files and folders that others may have made: read as data, made fresh, checked.

A job folder (``<results_dir>/jobs/<campaign id>``) and the paths the store names in
it (``job_folder``, ``log_path``) are written by jobs, and by anyone who can write
the store or the results folder. A host-side command reads them only through
the door's ``read_tail`` (or ``read_bytes``, for a small file wanted whole; campaign_door/read.py): regular files only
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

import os
import stat
from pathlib import Path
from typing import Sequence

from campaign.common.errors import ConfigError
# The file primitives live in the one door (campaign_door), which the jobs share; they are
# named here too for the host-side callers that read and write job folders.
from campaign_door.read import TAIL_BYTES, Tail, kind, read_bytes, read_head, read_tail, regular_stat
from campaign_door.write import open_append, others_write as _others_write, write_new

__all__ = ["TAIL_BYTES", "Tail", "check_own_folder", "check_shared_folder", "kind", "make_job_folder", "open_append",
           "read_bytes", "read_head", "read_tail", "regular_stat", "write_new"]


# ---------------------------------------------------------------- folders

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
