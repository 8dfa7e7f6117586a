"""Every key of a point's config must be one its schema (``campaign/config.py``) declares.

Hydra's structured config already refuses ``nosuchkey=1``; ``+key=value`` adds a key
the schema does not have (``+gpu=2``, a typo for ``gpus``) and a site's YAML may add
one too. Both are refused here with the nearest valid name, before anything is stored.
"""

from __future__ import annotations

import dataclasses
import functools
import typing
from typing import Any, Mapping

from campaign.config import CampaignConfig
from campaign.errors import ConfigError
from trainers.spec import did_you_mean


def _schema_of(kind: Any) -> type | None:
    """The dataclass behind a field's type (through Optional), or None for a plain value."""
    if typing.get_origin(kind) is typing.Union:
        kinds = [a for a in typing.get_args(kind) if a is not type(None)]
        kind = kinds[0] if len(kinds) == 1 else None
    return kind if dataclasses.is_dataclass(kind) else None


@functools.lru_cache(maxsize=None)
def _fields(schema: type) -> tuple[tuple[str, ...], dict[str, type | None]]:
    """A schema's field names and, per field, the dataclass behind it (once per schema:
    a 1,000-point sweep checks every point)."""
    hints = typing.get_type_hints(schema)
    names = tuple(f.name for f in dataclasses.fields(schema))
    return names, {name: _schema_of(hints[name]) for name in names}


def check_known_keys(config: Mapping[str, Any], schema: type = CampaignConfig, where: str = "") -> None:
    """Refuse a key ``schema`` does not declare, naming the nearest valid one; recurses into
    the fields that are dataclasses themselves (free-form dicts such as ``trainer.params``
    are checked by their owners)."""
    valid, subs = _fields(schema)
    for key, value in config.items():
        path = f"{where}{key}"
        if key not in subs:
            scope = f"in {where.rstrip('.')}" if where else "at the top level"
            raise ConfigError(f"unknown config key '{path}'{did_you_mean(str(key), valid)}; "
                              f"valid keys {scope}: {', '.join(valid)}")
        sub = subs[key]
        if sub is not None and isinstance(value, Mapping):
            check_known_keys(value, sub, f"{path}.")
