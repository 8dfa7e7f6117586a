"""Pretrained weights loaded through the door: the bytes checked are the bytes loaded.

A weights file sits in a folder others may write (``<results_dir>/weights/``, a shared
PATH). ``load_state`` reads it once through a descriptor that does not follow a link
(campaign_door.read_checked: at most WEIGHTS_MAX_BYTES), checks those bytes' sha256
against the digest the launch recorded (``trainer.params.weights_sha256``) or a
torchvision file name carries, and gives ``torch.load`` those same bytes, with
``weights_only=True``: nothing is opened twice, so nothing is swapped between the check
and the load. A mismatch or a link ends the job in one line naming the file. This is the
one module of trainers/ that calls ``torch.load`` on a file it did not write itself
(tests/test_one_door.py).
"""

from __future__ import annotations

import io
import re
from pathlib import Path
from typing import Any, Optional

import torch

from campaign_door import WEIGHTS_MAX_BYTES, read_checked, read_file

# torchvision's (and torch.hub's) file names: <name>-<the first hex digits of the sha256>.<ext>
HUB_NAME = re.compile(r"-([0-9a-f]{8,64})\.(pth|pt)$")


def expected(path: str, recorded: Optional[str] = None, named: bool = False) -> Optional[str]:
    """The digest ``path`` must have: ``recorded`` (the launch's, full), else for a file a
    torchvision name ``named`` the prefix its file name carries; None: none to check (a
    user's own file given to a trainer that records none)."""
    if recorded:
        return str(recorded)
    found = HUB_NAME.search(Path(path).name) if named else None
    return found.group(1) if found else None


def load_state(path: str, sha256: Optional[str] = None) -> Any:
    """What ``torch.load`` makes of the file ``path`` (``weights_only``), read through the
    door and, with ``sha256``, only when its bytes have it (``campaign_door.Refused``,
    a ValueError, in one line naming the file, otherwise)."""
    data = read_checked(path, sha256) if sha256 else read_file(path, WEIGHTS_MAX_BYTES)
    return torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
