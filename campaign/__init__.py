"""campaign: scaling studies of deep-learning training on HPC clusters.

The host side (this package) plans, submits, tracks and harvests; it never imports
torch. The job side lives in ``trainers``. ``campaign.__version__``: the installed
version (campaign.version), read when first asked.
"""

import os as _os
import sys as _sys
from typing import Any


def _drop_working_folder() -> None:
    """``python -m campaign.launch`` puts the working folder first on ``sys.path``: a
    ``submitit.py`` (or ``hydra/``, ``sqlalchemy/``...) that someone planted in a shared
    folder one launches from would be imported as the real one. While ``-m`` locates this
    package (``sys.argv[0]`` is then ``"-m"``, Python's documented placeholder) that entry is
    dropped, so every later import comes from the installation. Not with ``-P`` (no such
    entry) nor the ``campaign`` command (its first entry is the script's folder). A planted
    ``campaign/`` itself is found before this runs: docs/security.md says use the ``campaign``
    command or ``python -P -m campaign.launch``."""
    if _sys.flags.safe_path or not _sys.argv or _sys.argv[0] != "-m" or not _sys.path:
        return
    try:
        here = _os.getcwd()
    except OSError:
        return
    if _sys.path[0] in ("", here):
        del _sys.path[0]


_drop_working_folder()


def __getattr__(name: str) -> Any:
    if name == "__version__":
        from campaign.version import version

        return version()
    raise AttributeError(f"module 'campaign' has no attribute {name!r}")
