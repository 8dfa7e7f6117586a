"""Reading the first bytes of a dataset's files: what the checks look at (never whole files)."""

from __future__ import annotations

import gzip
import os
import zlib
from typing import List

from campaign_datasets.registry import DatasetError


def head(path: str, size: int, where: str, fix: str) -> bytes:
    """The first ``size`` bytes of ``path`` (decompressed for .gz), or a DatasetError."""
    opener = gzip.open if path.endswith(".gz") else open
    try:
        with opener(path, "rb") as f:
            return f.read(size)
    except (OSError, EOFError, zlib.error) as exc:
        raise DatasetError(f"{where}: cannot read {path} ({exc}); {fix}") from exc


def files_with(folder: str, suffix: str) -> List[str]:
    """The stems of the files in ``folder`` whose names end with ``suffix``, sorted."""
    with os.scandir(folder) as entries:
        return sorted(e.name[: -len(suffix)] for e in entries if e.name.endswith(suffix) and e.is_file())
