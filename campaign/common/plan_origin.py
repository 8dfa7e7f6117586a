"""How a stored campaign says it was submitted from a saved plan (``campaign submit FILE``,
campaign/launch/savedplan.py): ``  # from plan sha256:<64 hex>`` after its launch command, a
shell comment, so the command still reads as the one to type. A leaf module: ``campaign
status`` and ``campaign report`` read it without importing the launch."""

from __future__ import annotations

import re
from typing import Any, Mapping, Optional

_ORIGIN = re.compile(r"  # from plan (sha256:[0-9a-f]{64})$")


def origin_suffix(digest: str) -> str:
    """What a campaign submitted from the plan of ``digest`` records after its command."""
    return f"  # from plan {digest}"


def short(digest: str) -> str:
    """``sha256:abcd1234ef56…``: a plan's digest as one line names it."""
    return digest[:len("sha256:") + 12] + "…"


def plan_of(campaign: Mapping[str, Any]) -> Optional[str]:
    """The digest of the plan a stored campaign was submitted from (``sha256:...``), or None."""
    found = _ORIGIN.search(str(campaign.get("command") or ""))
    return found.group(1) if found else None


def launched_from(campaign: Mapping[str, Any]) -> str:
    """``launched from plan sha256:abcd1234ef56…``, or "" for a campaign launched directly."""
    digest = plan_of(campaign)
    return f"launched from plan {short(digest)}" if digest else ""
