"""Fast composition of many sweep points.

Each distinct combination of config-group choices (platform=..., trainer=...) is
composed once by Hydra; a point's plain value overrides (gpus=2, seed=3,
experiment.images_per_gpu=16) are then applied to a copy with Hydra's own override
semantics. A point whose overrides the cache cannot serve (package renames, ...)
is composed in full.
"""

from __future__ import annotations

import copy
from typing import Any, Sequence

from omegaconf import DictConfig, open_dict


class PointComposer:
    def __init__(self, loader: Any, master: DictConfig):
        from hydra.core.override_parser.overrides_parser import OverridesParser

        self.loader = loader
        self.master = master
        self.parser = OverridesParser.create(config_loader=loader)
        self._parsed: dict[str, Any] = {}
        self._bases: dict[tuple[str, ...], DictConfig] = {}
        self._is_group: dict[str, bool] = {}
        self.full_composes = 0

    def _parse(self, line: str):
        if line not in self._parsed:
            self._parsed[line] = self.parser.parse_overrides([line])[0]
        return self._parsed[line]

    def _group(self, ov: Any) -> bool:
        key = ov.key_or_group
        if key not in self._is_group:
            repo = getattr(self.loader, "repository", None)
            self._is_group[key] = (
                ov.package is not None
                or key.startswith("hydra")
                or repo is None
                or bool(repo.group_exists(key))
            )
        return self._is_group[key]

    def compose(self, overrides: Sequence[str]) -> DictConfig:
        from hydra._internal.config_loader_impl import ConfigLoaderImpl

        parsed = [self._parse(o) for o in overrides]
        groups = tuple(o.input_line for o in parsed if self._group(o))
        values = [o for o in parsed if not self._group(o)]
        base = self._bases.get(groups)
        if base is None:
            base = self.loader.load_sweep_config(self.master, list(groups))
            with open_dict(base):
                base.pop("hydra", None)  # Hydra's own node: most of the tree, none of the point
            self._bases[groups] = base
            self.full_composes += 1
        cfg = copy.deepcopy(base)
        ConfigLoaderImpl._apply_overrides_to_config(values, cfg)
        return cfg
