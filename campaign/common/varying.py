"""The values that differ between a campaign's points, by override name.

A sweep ``trainer.optimizer=sgd,adamw gpus=1,2`` makes points that differ in
``trainer.optimizer`` and ``gpus``; ``campaign status`` and ``campaign harvest`` show such
a value as a column of its own (named by its override, ``trainer.optimizer``), beside the
axes they always show (platform, GPUs, ...). Settings every point shares are left out:
they say nothing about one point. Stdlib only (``campaign status`` imports it).
"""

from __future__ import annotations

from typing import Any, Iterable, Optional, Sequence

from campaign.common.bounded import STORED, BoundError, loads

AXES = ("platform", "gpus", "nodes", "repeats", "trainer", "experiment")  # columns of their own
# one per campaign, or what says how to run it rather than what a point is
NOT_A_VALUE = ("dry_run", "name", "store.url", "results_dir", "max_gpu_hours", "max_retries", "retry_on")


def parse(overrides: Any) -> dict[str, str]:
    """key -> value of one point's overrides (a list of ``key=value``, or its JSON),
    without Hydra's own keys and the campaign-wide settings (``NOT_A_VALUE``). JSON
    beyond campaign.common.bounded's bounds, or not a list, reads as no overrides (the store's
    reader warns about such a point: campaign.observe.state.unreadable_warnings)."""
    if isinstance(overrides, str):
        try:
            overrides = loads(overrides, "stored overrides", budget=STORED)
        except BoundError:
            overrides = None
    out: dict[str, str] = {}
    for o in overrides if isinstance(overrides, Sequence) and not isinstance(overrides, str) else []:
        key, _, value = str(o).partition("=")
        key = key.lstrip("+~")
        if key.startswith("hydra.") or key in NOT_A_VALUE:
            continue
        out[key] = value
    return out


def varying(all_overrides: Sequence[Any], skip: Iterable[str] = AXES) -> tuple[list[str], list[dict[str, str]]]:
    """(the keys whose value differs between the points, in sweep order of first
    appearance; per point, its value of each: ``""`` where it sets none). ``skip``: keys
    the caller shows in columns of its own."""
    skip = set(skip)
    parsed = [parse(o) for o in all_overrides]
    keys = list(dict.fromkeys(k for d in parsed for k in d if k not in skip))
    names = [k for k in keys if len({d.get(k, "") for d in parsed}) > 1]
    return names, [{k: d.get(k, "") for k in names} for d in parsed]


def label(values: dict[str, str]) -> str:
    """One point's varying values as one string (``trainer.optimizer=adamw seed=1``)."""
    return " ".join(f"{k}={v}" for k, v in values.items() if v != "")


def typed(values: Sequence[str]) -> list[Optional[Any]]:
    """A column's values as numbers when every one is an integer (or every one a number),
    else as given; ``""`` becomes None (absent). Exports then carry 0.1 as a number."""
    present = [v for v in values if v != ""]
    for kind in (int, float):
        try:
            converted = {v: kind(v) for v in present}
        except ValueError:
            continue
        if kind is int and any(not _is_int(v) for v in present):
            continue
        return [converted[v] if v != "" else None for v in values]
    return [v if v != "" else None for v in values]


def _is_int(text: str) -> bool:
    body = text[1:] if text[:1] in "+-" else text
    return body.isdigit()
