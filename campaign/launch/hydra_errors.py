"""One actionable line from Hydra's, OmegaConf's and YAML's multi-line errors: the file and
line of a broken YAML file, the key and its nearest valid name for a misspelt one, the
available options (and the nearest) for an unknown group option."""

from __future__ import annotations

import dataclasses
import re
import typing
from typing import Any, Optional

from campaign.common.errors import ConfigError, one_line
from trainers.spec import did_you_mean


def _chain(exc: BaseException) -> list[BaseException]:
    out: list[BaseException] = []
    while exc is not None and exc not in out:
        out.append(exc)
        exc = exc.__cause__ or exc.__context__  # type: ignore[assignment]
    return out


def yaml_error(exc: BaseException) -> Optional[ConfigError]:
    """``file:line: problem`` for a YAML syntax error anywhere in the chain, else None."""
    import yaml

    for e in _chain(exc):
        if isinstance(e, yaml.MarkedYAMLError):
            mark = e.problem_mark or e.context_mark
            where = f"{mark.name}:{mark.line + 1}:{mark.column + 1}" if mark else "a YAML file"
            what = one_line(" ".join(x for x in (e.context, e.problem) if x)) or type(e).__name__
            return ConfigError(f"{where}: invalid YAML: {what}")
    return None


def schema_fields(path: str) -> Optional[list[str]]:
    """The field names of the config node at dotted ``path`` ("" for the top level), from
    the schema in campaign/catalogue/config.py; None where the node has no fixed fields."""
    from campaign.catalogue.config import CampaignConfig
    from campaign.launch.validate import _schema_of

    schema: Any = CampaignConfig
    for part in [p for p in path.split(".") if p]:
        hints = typing.get_type_hints(schema)
        if part not in hints or _schema_of(hints[part]) is None:
            return None
        schema = _schema_of(hints[part])
    return [f.name for f in dataclasses.fields(schema)]


def _unknown_key(full_key: str, where: str = "") -> ConfigError:
    parent, _, key = full_key.rpartition(".")
    fields = schema_fields(parent) or []
    hint = did_you_mean(key, fields) if fields else ""
    valid = f"; valid keys{' in ' + parent if parent else ''}: {', '.join(fields)}" if fields else ""
    return ConfigError(f"{where}unknown config key '{full_key}'{hint}{valid}")


def as_config_error(exc: BaseException) -> ConfigError:
    """One actionable line from Hydra's and OmegaConf's multi-line errors."""
    from hydra.errors import MissingConfigException
    from omegaconf.errors import ConfigAttributeError, ConfigKeyError

    if isinstance(exc, ConfigError):
        return exc
    found = yaml_error(exc)
    if found is not None:
        return found
    if isinstance(exc, MissingConfigException) and exc.missing_cfg_file and "/" in str(exc.missing_cfg_file):
        group, _, choice = str(exc.missing_cfg_file).rpartition("/")
        options = sorted(exc.options or [])
        return ConfigError(f"unknown {group} '{choice}'{did_you_mean(choice, options)}; "
                           f"available: {', '.join(options) or 'none found'}")
    text = str(exc)
    cause = exc.__cause__
    if text.startswith("Error merging override") and cause is not None:
        override = text.rsplit(" ", 1)[-1]
        return ConfigError(f"{override}: {one_line(str(cause).splitlines()[0])}")
    m = re.match(r"Could not override '([^']+)'", text)
    if m:
        key = m.group(1)
        if key.startswith("trainer.params."):  # a free dict: the trainer's declaration knows its keys
            return ConfigError(f"{key} is not in this trainer's conf file; if the trainer declares it "
                               f"(trainers/specs/ or its own module), set it with +{key}=..., which the launch checks")
        return ConfigError(f"{_unknown_key(key)} (to add a key the schema lacks, +{key}=... is refused too)")
    for e in _chain(exc):
        if isinstance(e, (ConfigKeyError, ConfigAttributeError)) and getattr(e, "full_key", None):
            m = re.match(r"In '([^']+)'", text)
            return _unknown_key(str(e.full_key), f"{m.group(1)}.yaml: " if m else "")
    if "Key '" in text and "not in" in text:  # a key the schema does not have
        first = text.splitlines()[0]
        return ConfigError(f"{first}; see campaign/catalogue/config.py for the valid fields")
    return ConfigError(one_line(text) or type(exc).__name__)
