"""The installed campaign's version, which ``campaign --version`` prints.

From the package's metadata (``importlib.metadata``: what pip installed, editable or not),
else, in a source tree that was never installed (``PYTHONPATH=.``), from the
``[project]`` table of the ``pyproject.toml`` beside the package; ``UNKNOWN`` when
neither says. Stdlib only; read once, when first asked (importing campaign reads nothing).
"""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import Optional

DISTRIBUTION = "campaign"
UNKNOWN = "0+unknown"
PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"
_PROJECT_TABLE = re.compile(r"^\[project\]\s*$(?P<body>.*?)(?=^\[|\Z)", re.M | re.S)
_VERSION = re.compile(r"""^version\s*=\s*["'](?P<v>[^"'\n]+)["']""", re.M)


@functools.lru_cache(maxsize=1)
def version() -> str:
    """The version (module docstring)."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        return installed(DISTRIBUTION)
    except PackageNotFoundError:
        return pyproject_version(PYPROJECT) or UNKNOWN


def pyproject_version(path: Path) -> Optional[str]:
    """``[project] version`` of the pyproject file at ``path`` when it is campaign's, else None."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    table = _PROJECT_TABLE.search(text)
    if not table or not re.search(rf"""^name\s*=\s*["']{DISTRIBUTION}["']""", table["body"], re.M):
        return None
    found = _VERSION.search(table["body"])
    return found["v"] if found else None
