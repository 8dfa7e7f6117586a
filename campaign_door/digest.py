"""Weights files checked against their sha256 every time they are used.

A weights file in a shared folder (``<results_dir>/weights/``, a user's PATH) is used
only when its bytes have the digest the launch expects: torchvision's files carry the
first 8 hex digits of theirs in their name (``resnet18-f37072fd.pth``), and a user's
own file's full digest is computed at the launch and recorded in the point's params,
so that the job checks the very bytes the launch saw. The launch hashes the file as it
streams (``sha256_file``); the job reads it once (``read_checked``), hashes those bytes
and loads the same bytes: nothing is opened twice, so nothing can be swapped between
the check and the load.
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
from pathlib import Path
from typing import Optional

from campaign_door.read import Refused, kind, read_file

WEIGHTS_MAX_BYTES = 4 << 30  # a weights file read at most: ViT-L/16 is 1.2 GB, VGG16 528 MB
_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def sha256_file(path: Path | str, max_bytes: int = WEIGHTS_MAX_BYTES) -> str:
    """The sha256 (hex) of the regular file ``path``, streamed through a descriptor that
    does not follow a link; ``Refused`` (one line naming it) for a link, FIFO, folder or
    a file over ``max_bytes``."""
    try:
        fd = os.open(path, _READ)
    except OSError as exc:
        why = "is a symbolic link" if exc.errno == errno.ELOOP else f"cannot be read ({exc.strerror or exc})"
        raise Refused(f"weights file {path} {why}; not used") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise Refused(f"weights file {path} is {kind(st.st_mode)}, not a regular file; not used")
        os.set_blocking(fd, True)
        digest, seen = hashlib.sha256(), 0
        while chunk := os.read(fd, 1 << 20):
            seen += len(chunk)
            if seen > max_bytes:
                raise Refused(f"weights file {path} is larger than {max_bytes} bytes; not used")
            digest.update(chunk)
        return digest.hexdigest()
    finally:
        os.close(fd)


def mismatch(path: Path | str, got: str, want: str) -> Optional[str]:
    """The one line that refuses ``path`` when its sha256 ``got`` does not start with
    ``want`` (a full digest, or the prefix a torchvision file name carries); None when it does."""
    if want and got.startswith(want.lower()):
        return None
    return (f"weights file {path}: its sha256 {got[:max(len(want), 8)]} is not the expected {want or '(none)'}; "
            f"not used (someone may have replaced it: remove it and launch again)")


def check_file(path: Path | str, want: str, max_bytes: int = WEIGHTS_MAX_BYTES) -> str:
    """``path``'s full sha256 when it starts with ``want``, else ``Refused`` (the launch's check)."""
    got = sha256_file(path, max_bytes)
    problem = mismatch(path, got, want)
    if problem:
        raise Refused(problem)
    return got


def read_checked(path: Path | str, want: str, max_bytes: int = WEIGHTS_MAX_BYTES) -> bytes:
    """The bytes of ``path`` (read once, no link followed, at most ``max_bytes``), when
    their sha256 starts with ``want``; ``Refused`` in one line naming the file otherwise.
    The caller loads these bytes, never the path again (the job's check)."""
    try:
        data = read_file(path, max_bytes)
    except Refused as exc:
        raise Refused(f"weights file {exc}") from None
    problem = mismatch(path, hashlib.sha256(data).hexdigest(), want)
    if problem:
        raise Refused(problem)
    return data
