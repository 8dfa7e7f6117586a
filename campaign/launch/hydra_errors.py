"""One actionable line from Hydra's and OmegaConf's multi-line errors."""

from __future__ import annotations

from campaign.errors import ConfigError, one_line


def as_config_error(exc: BaseException) -> ConfigError:
    """One actionable line from Hydra's and OmegaConf's multi-line errors."""
    from hydra.errors import MissingConfigException

    if isinstance(exc, MissingConfigException) and exc.missing_cfg_file and "/" in str(exc.missing_cfg_file):
        group, _, choice = str(exc.missing_cfg_file).rpartition("/")
        options = ", ".join(sorted(exc.options or [])) or "none found"
        return ConfigError(f"unknown {group} '{choice}'; available: {options}")
    text = str(exc)
    cause = exc.__cause__
    if text.startswith("Error merging override") and cause is not None:
        override = text.rsplit(" ", 1)[-1]
        return ConfigError(f"{override}: {one_line(str(cause).splitlines()[0])}")
    if "Key '" in text and "not in" in text:  # a key the schema does not have
        first = text.splitlines()[0]
        return ConfigError(f"{first}; see campaign/config.py for the valid fields")
    return ConfigError(one_line(text) or type(exc).__name__)
