"""dataset=synthetic: random images and labels generated on each rank (seeded), no folder."""

from __future__ import annotations

from campaign_datasets.registry import DatasetDef

DATASETS = (DatasetDef("synthetic", needs_root=False, loader="trainers.data.synthetic:load"),)
