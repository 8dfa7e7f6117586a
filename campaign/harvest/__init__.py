"""``campaign harvest``: the time-to-solution and throughput views, repeats statistics,
utilisation and breakdown, projections of sampled runs, the reference study's figures,
comparisons, exports and figures (docs/harvest.md). Aggregated in SQL, finished in polars.

Nothing is imported here: ``campaign.harvest.query`` (SQL only) must not pull in polars,
and the tables below are loaded on first use."""

from typing import Any

_LAZY = {"breakdown_table": "utilisation", "utilisation_table": "utilisation",
         "scaling_table": "views", "throughput_table": "views"}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'campaign.harvest' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f"campaign.harvest.{_LAZY[name]}"), name)
