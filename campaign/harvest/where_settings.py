"""``--where KEY=V`` on a point's settings: any dotted config key (``trainer.params.backbone=resnet18``).

A study swept one factor at a time (``hydra.sweeper.grids``) is one campaign whose figures
each read one factor's points: Fig 2's batch sizes at the defaults of everything else,
Fig 3's backbones at theirs. ``--where`` on the point columns (platform, gpus, ...) cannot
say "the default backbone"; these filters can, so that every figure of a study comes from
the study's own campaign. A point's value of a key is its override (as ``campaign status``
shows it) or, where it sets none, its stored config's value at that path. Values compare
as numbers where both read as numbers (``16`` is ``16.0``), else as text (``null``,
``true``, names). Stdlib only; the store is read, never written.
"""

from __future__ import annotations

import re
from typing import Any, Iterable, Mapping, Optional, Sequence

from campaign.common.bounded import STORED, BoundError, loads
from campaign.common.errors import ConfigError
from campaign.common.varying import parse

KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+")
_MISSING = object()


def is_setting(key: str) -> bool:
    """A dotted config key (``trainer.params.backbone``), which these filters take."""
    return bool(KEY.fullmatch(key))


def split(where: Optional[Mapping[str, list]]) -> tuple[dict, dict]:
    """(the point-column filters, the settings filters) of a parsed ``--where``."""
    where = dict(where or {})
    settings = {k: v for k, v in where.items() if is_setting(k)}
    return {k: v for k, v in where.items() if k not in settings}, settings


def _text(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _number(text: str) -> Optional[float]:
    try:
        return float(text)
    except ValueError:
        return None


def _same(have: str, wanted: str) -> bool:
    a, b = _number(have), _number(wanted)
    return a == b if a is not None and b is not None else have == wanted


def _config(point: Mapping[str, Any]) -> Any:
    config = point.get("config")
    if isinstance(config, (str, bytes)):
        try:
            return loads(config, "stored config", budget=STORED)  # the command's parse budget, as harvest's
        except BoundError:
            return None
    return config


def value_of(point: Mapping[str, Any], key: str) -> Any:
    """The point's value of ``key`` as text: its override, else its config's value at the
    path (``_MISSING`` where neither has it)."""
    return _lookup(parse(point.get("overrides") or []), _config(point), key)


def _lookup(overrides: Mapping[str, str], config: Any, key: str) -> Any:
    """``value_of`` on a point's overrides and config, each parsed once for all its keys."""
    if key in overrides:
        return overrides[key]
    node = config
    for part in key.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return _MISSING
        node = node[part]
    if isinstance(node, (Mapping, list)):
        return _MISSING  # a group, not a value
    return _text(node)


def matching_ids(points: Sequence[Mapping[str, Any]], settings: Mapping[str, Iterable[str]], campaign_id: str,
                 field: str = "id") -> set:
    """The ``field`` (id or idx) of the points whose value of every key is one of its values;
    ConfigError (one line) for a key no point has, naming the campaign."""
    chosen = set()
    seen = {key: False for key in settings}
    for p in points:
        ok = True
        overrides, config = parse(p.get("overrides") or []), _config(p)
        for key, wanted in settings.items():
            have = _lookup(overrides, config, key)
            if have is _MISSING:
                ok = False
                continue
            seen[key] = True
            ok = ok and any(_same(have, w) for w in wanted)
        if ok:
            chosen.add(p.get(field))
    missing = [k for k, found in seen.items() if not found]
    if missing:
        raise ConfigError(f"--where {missing[0]}: no point of campaign {campaign_id} has this setting "
                          f"(a dotted config key, e.g. trainer.params.backbone; campaign status {campaign_id} "
                          f"shows the swept ones)")
    return chosen
