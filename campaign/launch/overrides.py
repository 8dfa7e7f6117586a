"""``campaign resume KEY=VALUE ...``: value overrides applied to a stored point's config.

A resumed point is the same point run again: an override may change how it runs
(``platform.time_limit_min=120``, ``platform.partition=long``, a fixed
``trainer.params.fail_rank=null``), never what it is. Group choices (``platform=a100``),
sweeps (``gpus=1,2``), additions and deletions (``+key``, ``~key``) and the keys a
point is stored and harvested by (``gpus``, ``nodes``, the names of its platform,
trainer, experiment and dataset, the store and results folder) are refused, as is a
value that changes the point's schedule (its images per GPU or iterations): those
make another point, which a new launch makes. Values are typed against the schema
(campaign/catalogue/config.py) exactly as at launch, with Hydra's own override grammar.
"""

from __future__ import annotations

from typing import Any, Sequence

from campaign.catalogue.config import GROUPS
from campaign.common.errors import ConfigError

# Keys (and their subtrees) that say what a point is: changing them makes another point.
IDENTITY = ("gpus", "nodes", "repeats", "seed", "store", "results_dir", "name", "dry_run", "platform.name",
            "platform.executor", "trainer.name", "trainer.module", "experiment.name", "dataset.name")


def parse_overrides(lines: Sequence[str]) -> list[tuple[str, Any]]:
    """``KEY=VALUE`` lines -> (key, typed value), or ``ConfigError`` naming what a resume
    cannot take and what to do instead."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    parser = OverridesParser.create()
    out = []
    for line in lines:
        try:
            ov = parser.parse_overrides([line])[0]
        except HydraException as exc:
            raise ConfigError(f"override {line!r}: {str(exc).splitlines()[0]}") from None
        key = ov.key_or_group
        if ov.is_sweep_override():
            raise ConfigError(f"override {line!r} is a sweep; a resume runs each point again with one value: "
                              "launch a campaign for new points")
        if ov.is_add() or ov.is_delete() or ov.is_force_add() or ov.package is not None:
            raise ConfigError(f"override {line!r}: a resume takes KEY=VALUE only (no +, ~, ++ or @package)")
        if key in GROUPS:
            raise ConfigError(f"override {line!r} picks another {key}, which makes another point: launch it "
                              f"(a resume takes values, e.g. {key}.time_limit_min=120)" if key == "platform" else
                              f"override {line!r} picks another {key}, which makes another point: launch it")
        if any(key == k or key.startswith(k + ".") for k in IDENTITY):
            raise ConfigError(f"override {line!r} changes what the point is ({key}); a resume runs the same "
                              "points again: launch a campaign for new points")
        out.append((key, ov.value()))
    return out


def apply_overrides(config: dict[str, Any], overrides: Sequence[tuple[str, Any]]) -> dict[str, Any]:
    """``config`` (a point's stored, resolved config) with ``overrides`` set, typed and
    checked against the schema (an unknown key or a value of the wrong type is refused)."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    from campaign.catalogue.config import CampaignConfig
    from campaign.launch.hydra_errors import as_config_error

    if not overrides:
        return config
    try:
        cfg = OmegaConf.merge(OmegaConf.structured(CampaignConfig), config)
        for key, value in overrides:
            OmegaConf.update(cfg, key, value, merge=True)
        return OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)  # type: ignore[return-value]
    except OmegaConfBaseException as exc:
        raise as_config_error(exc) from None
