"""How to upgrade or extend *this* install of campaign, as pip recorded it.

``campaign`` on PyPI is another project: advice never says ``pip install campaign``.
pip writes where a package came from into its ``direct_url.json`` (PEP 610): a
source checkout (editable or not), a git URL, or a built archive; advice names that.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Optional
from urllib.parse import unquote, urlparse

from campaign.common.bounded import BoundError, loads

NOT_PYPI = "the package named campaign on PyPI is another project"


def _direct_url() -> Optional[dict]:
    try:
        from importlib import metadata

        text = metadata.distribution("campaign").read_text("direct_url.json")
    except Exception:  # not installed by pip (a bare checkout on PYTHONPATH), or no record
        return None
    try:
        info = loads(text, "direct_url.json") if text else None
    except BoundError:
        return None
    return info if isinstance(info, dict) else None


def _checkout() -> Optional[Path]:
    """The source tree this campaign runs from, when it runs from one."""
    root = Path(__file__).resolve().parents[2]
    return root if (root / "pyproject.toml").is_file() and (root / "campaign").is_dir() else None


def install_source(extra: Optional[str] = None) -> tuple[str, str, Optional[str]]:
    """(kind, ``pip install`` arguments for this install's source, the git command that
    updates that source first or None); kind: git, dir, archive or unknown.
    ``extra``: with that optional dependency set."""
    tail = f"[{extra}]" if extra else ""
    info = _direct_url() or {}
    url = info.get("url", "")
    if info.get("vcs_info", {}).get("vcs") == "git":
        return "git", shlex.quote(f"campaign{tail} @ git+{url}"), None
    if url.startswith("file://") and "dir_info" in info:
        path = unquote(urlparse(url).path)
        editable = "-e " if info["dir_info"].get("editable") else ""
        return "dir", f"{editable}{shlex.quote(path + tail)}", f"git -C {shlex.quote(path)} pull"
    checkout = _checkout()
    if checkout is not None:
        return "dir", f"-e {shlex.quote(str(checkout) + tail)}", f"git -C {shlex.quote(str(checkout))} pull"
    if url:  # an archive (wheel, sdist): a newer one is built from the same repository
        return "archive", shlex.quote(unquote(urlparse(url).path) + tail), None
    return "unknown", "", None


def upgrade_advice() -> str:
    """One clause: how to upgrade this install (to read a store a newer campaign wrote)."""
    kind, spec, update = install_source()
    if kind == "unknown":
        return f"upgrade this install of campaign from its source repository ({NOT_PYPI})"
    if kind == "archive":
        return (f"upgrade this install of campaign: pip install -U a newer build from its source repository "
                f"(this one came from {spec}; {NOT_PYPI})")
    return f"upgrade this install of campaign: {update + ' && ' if update else ''}pip install -U {spec} ({NOT_PYPI})"


def extra_advice(extra: str) -> str:
    """``pip install ...`` that adds the optional dependency set ``extra`` to this install."""
    kind, spec, _ = install_source(extra)
    return f"pip install {spec}" if kind in ("git", "dir") else f"install campaign's '{extra}' extra"
