"""The ``campaign launch`` line that ``campaign plan --launch`` prints for a person to run.

A store may be written by others (docs/security.md): what it holds reaches this line only
as whole, validated ``key=value`` words. A stored value is never split into words (a
stored override ``trainer.optimizer=sgd --experimental-rerun=FILE`` split on its space put
Hydra's unpickling option on the printed line), every key is a dotted config name (no
``hydra.*``), every word is shell-quoted and starts with its key (never ``-``), and the
series' own overrides come only from points whose stored config and overrides carry the
reader's signature (campaign/common/signing.py): an unsigned or unverifiable point gives
the axes alone (platform, trainer, experiment, GPUs, nodes) and a note. Overrides are
taken from the chosen series' own point, never looked up by a label two points may share:
every one of them but the axes the line sets itself (and what says how a campaign ran
rather than what it ran: its name, store, retries; campaign.common.varying.NOT_A_VALUE),
so that a setting every point shares (the main job's ``experiment.base_iterations=600``)
stays on the line and its dry run estimates what the plan priced.
"""

from __future__ import annotations

import re
import shlex
from typing import Any, Mapping, Optional, Sequence

from campaign.common.varying import parse

KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*\Z")
CONTROL = re.compile(r"[\x00-\x1f\x7f]")
AXES = ("platform", "gpus", "nodes", "repeats", "trainer", "experiment")  # given by the line itself
SERIES = ("platform", "trainer", "experiment", "dataset", "variant", "image")  # what makes a plan's series
NOT_SIGNED = ("its points are not signed with your key (launched by another user, or changed in the store since): "
              "the line gives the platform, trainer, experiment and GPUs alone; add the series' overrides yourself")


class UnsafeWord(ValueError):
    """A word that may not stand on a printed command line."""


def word(key: str, value: Any) -> str:
    """``key=value`` as one shell-quoted word; ``UnsafeWord`` for a key that is not a dotted
    config name (or is Hydra's own) or a value with a control character."""
    text = str(value)
    if not KEY.match(key) or key == "hydra" or key.startswith("hydra."):
        raise UnsafeWord(f"{key!r} is not a config key")
    if CONTROL.search(text):
        raise UnsafeWord(f"{key}'s value holds a control character")
    return shlex.quote(f"{key}={text}")


def launch_line(row: Mapping[str, Any], overrides: Sequence[tuple[str, str]] = ()) -> str:
    """The line that runs the chosen point's full schedule (sampling off) on its nodes, with
    the series' own ``overrides`` (key, value) after the axes. ``UnsafeWord`` where a stored
    axis or override cannot stand on it."""
    pairs = [("platform", row["platform"]), ("trainer", row["trainer"]), ("experiment", row["experiment"]),
             ("gpus", int(row["gpus"]))]
    if (row.get("nodes") or 1) > 1:  # an inter-node choice: its own placement (the default is one node)
        pairs.append(("nodes", int(row["nodes"])))
    pairs.append(("experiment.sample_iterations", "null"))
    given = {k for k, _ in pairs}
    pairs += [(k, v) for k, v in overrides if k not in given]
    return "campaign launch " + " ".join(word(k, v) for k, v in pairs)


def signed_ids(stored: Sequence[Mapping[str, Any]], campaign: Mapping[str, Any]) -> set[int]:
    """The ids of the stored points whose signature is the reader's (none without a key)."""
    from campaign.common.signing import signing_key, verify

    key = signing_key()
    if key is None:
        return set()
    return {r["id"] for r in stored if verify(key, campaign["id"], campaign.get("results_dir"), r)}


def series_overrides(row: Mapping[str, Any], points: Any, stored: Sequence[Mapping[str, Any]],
                     campaign: Mapping[str, Any]) -> tuple[list[tuple[str, str]], Optional[str]]:
    """(the overrides that make the chosen ``row``'s series, a note or None). ``points``: the
    plan's point frame (its ``point_id`` and series columns); ``stored``: the campaign's
    stored points (``Store.points``). The overrides are every one of one point of the series
    (the same GPU count where measured) but the axes (``AXES``), in their stored order: what
    every point shares as well as what varies."""
    keys = [k for k in SERIES if k in points.columns and k in row]
    mine = [r for r in points.iter_rows(named=True) if all(r[k] == row[k] for k in keys)]
    if not mine:
        return [], None
    by_id = {r["id"]: r for r in stored}
    same_n = [r for r in mine if r["gpus"] == row["gpus"]]
    chosen = by_id.get((same_n or mine)[0]["point_id"])
    values = {k: v for k, v in parse(chosen.get("overrides") if chosen else None).items() if k not in AXES}
    if chosen is not None and not values:
        return [], None
    rows = [by_id.get(r["point_id"]) for r in mine]
    if None in rows or len(signed_ids(rows, campaign)) < len(rows):  # every point of the series signed by you
        return [], f"note: the launch line leaves out the series' overrides: {NOT_SIGNED}"
    return list(values.items()), None
