"""A point's dataset in words, from its stored config: ``ade20k 512px 150 classes``,
``mnist 28px 1-channel 10 classes``, ``synthetic 512px 150 classes (ade20k's shapes)``.

One wording for the dry run's ``every point:`` line (campaign.launch.dryrun), ``campaign
status`` (its head line or a column) and ``campaign harvest`` (the series' ``dataset``
column), so that the three name a series' dataset and crop alike. A trainer's own study's
dataset without a ``dataset.root`` is stored as ``synthetic`` with the study's shapes
(campaign.launch.validate.reference_dataset): its name alone would hide that it stands in
for the study's, so the wording says whose shapes it keeps.
"""

from __future__ import annotations

import functools
from typing import Any, Mapping, Optional, Sequence

DEFAULT_NAME = "synthetic"  # a section that names no dataset (campaign_datasets.registry.DEFAULT)


def names_dataset(overrides: Sequence[str]) -> bool:
    """Whether a point's overrides name its dataset (``dataset=cifar10``, ``dataset.name=...``)."""
    for line in overrides or ():
        key = str(line).lstrip("+~").split("=", 1)[0].split("@", 1)[0]
        if key in ("dataset", "dataset.name"):
            return True
    return False


@functools.lru_cache(maxsize=64)
def _study(name: str, module: Optional[str]) -> Optional[str]:
    """The study dataset of a built-in trainer. A read command words points from stored data
    and never imports a module the store names (tests/test_trust_values.py): a trainer
    declared in a module of its own (``trainer.module`` other than its built-in one), or a
    name that is not one of campaign's own declarations (trainers/specs), has no study
    named here."""
    from trainers import registry

    if name not in registry.builtin_names() or (module and module != f"{registry.BUILTIN}.{name}"):
        return None
    try:
        return registry.spec_of(name).dataset or None
    except (registry.UnknownTrainer, ImportError):
        return None


def study_of(config: Mapping[str, Any]) -> Optional[str]:
    """The dataset of the study the point's trainer reproduces (``TrainerDef.dataset``);
    None without one, or for a trainer that is not one of campaign's built-ins."""
    trainer = config.get("trainer") if isinstance(config, Mapping) else None
    if not isinstance(trainer, Mapping) or not trainer.get("name"):
        return None
    module = trainer.get("module")
    return _study(str(trainer["name"]), str(module) if module else None)


def shapes(section: Mapping[str, Any]) -> str:
    """``512px 150 classes``; channels where not 3 (``28px 1-channel 10 classes``: RGB goes
    without saying); a shape the section lacks is left out."""
    parts = []
    if section.get("image_size") is not None:
        parts.append(f"{section['image_size']}px")
    channels = section.get("channels") or 3  # a stored config may hold anything (campaign.store.typed)
    if channels != 3 and isinstance(channels, int):
        parts.append(f"{channels}-channel")
    if section.get("num_classes") is not None:
        parts.append(f"{section['num_classes']} classes")
    return " ".join(parts)


def dataset_label(config: Mapping[str, Any], overrides: Sequence[str] = (), *, why: bool = False) -> str:
    """The point's dataset in words: its name and shapes, and ``(X's shapes)`` where it is a
    stand-in for its trainer's study's dataset X (its trainer picked X, the point named no
    dataset, and it trains on generated batches of X's shapes); ``why``: the stand-in's reason
    too (``(ade20k's shapes, no dataset.root)``, as the dry run says it)."""
    section = config.get("dataset") if isinstance(config, Mapping) else None
    section = section if isinstance(section, Mapping) else {}
    name = str(section.get("name") or DEFAULT_NAME)
    text = " ".join(t for t in (name, shapes(section)) if t)
    study = study_of(config)
    if study and name != study and not names_dataset(overrides):
        return f"{text} ({study}'s shapes{', no dataset.root' if why else ''})"
    return text
