"""Reading the first bytes of a dataset's files: what the checks look at (never whole files)."""

from __future__ import annotations

import os
import zlib
from typing import List

from campaign_datasets.registry import DatasetError
from campaign_door.read import read_head


def head(path: str, size: int, where: str, fix: str) -> bytes:
    """The first ``size`` bytes of ``path`` (decompressed for .gz), or a DatasetError: read
    through the door (a regular file, no link, nothing blocks; campaign_door/read.py)."""
    raw, reason = read_head(path, size if not path.endswith(".gz") else 64 * 1024 + size)
    if raw is None:
        raise DatasetError(f"{where}: cannot read {path} ({reason}); {fix}")
    if not path.endswith(".gz"):
        return raw
    try:
        return zlib.decompressobj(wbits=31).decompress(raw, size)  # 31: a gzip header
    except zlib.error as exc:
        raise DatasetError(f"{where}: cannot read {path} ({exc}); {fix}") from exc


def files_with(folder: str, suffix: str) -> List[str]:
    """The stems of the files in ``folder`` whose names end with ``suffix``, sorted."""
    with os.scandir(folder) as entries:
        return sorted(e.name[: -len(suffix)] for e in entries if e.name.endswith(suffix) and e.is_file())
