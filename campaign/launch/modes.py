"""``dry_run``'s values: a leaf module, so that a check (campaign.launch.validate) can ask
whether a point is planned for a dry run without importing the dry run's printer."""

from __future__ import annotations

from typing import Any, Optional

from campaign.common.errors import ConfigError

MODES = ("table", "scripts", "json")
_OFF = ("false", "0", "no", "off", "none", "")
_ON = ("true", "1", "yes", "on", "table")


def is_off(value: Any) -> bool:
    """Whether ``dry_run``'s value means a launch, not a dry run (``false``, ``0``, ...)."""
    return str(value).strip().lower() in _OFF


def dry_run_mode(value: Any) -> Optional[str]:
    """``dry_run``'s value as a mode: None (a launch), ``table``, ``scripts`` or ``json``."""
    text = str(value).strip().lower()
    if is_off(text):
        return None
    if text in _ON:
        return "table"
    if text in MODES:
        return text
    raise ConfigError(f"dry_run={value} is not a dry-run mode; valid: false, true, scripts, json")
