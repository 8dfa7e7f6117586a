"""Host-side dataset checks at launch: ``campaign_datasets.check_dataset`` (the registry of
the datasets' declarations, layouts and checks the jobs share), its refusals reported as
the launch's ``ConfigError``."""

from __future__ import annotations

from typing import Any

from campaign.common.errors import ConfigError
from campaign_datasets import DatasetError, resolve_root
from campaign_datasets import check_dataset as _check_dataset

__all__ = ["check_dataset", "resolve_root"]


def check_dataset(spec: Any, test_split: bool = False) -> None:
    """Refuse, with one ConfigError line, a dataset a job could not read (before anything is
    stored); ``test_split``: its test split's files too (``experiment.validation=true``)."""
    try:
        _check_dataset(spec, test_split)
    except DatasetError as exc:
        raise ConfigError(str(exc)) from None
