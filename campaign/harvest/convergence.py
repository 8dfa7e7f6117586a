"""``campaign harvest --table convergence``: how each point's loss fell, per epoch and per
iteration window, and what it took to reach a loss threshold.

The companion studies' convergence figures (the DataParallel study's loss per iteration
and epochs to a loss threshold, its Figs 1b, 2a, 3a, 5b; the ViT study's training and test
accuracy and loss per epoch, its Figs 7, 10, 11) from what the jobs stored:

- ``loss``: the mean over ALL ranks of the trainer's loss (``iteration.loss``, each rank's
  loss of its own batch, as the trainer defines it) over the iterations of the row;
- ``epoch`` rows: one per epoch the trainer timed (its ``epoch_<i>`` breakdown rows give
  each epoch's iteration count, warm-up in epoch 0); ``epoch_s`` the epoch's seconds
  (slowest rank), ``train_accuracy`` where the trainer stores it (vit: ``rank_timing.extra``
  epochs, the mean over ranks of equal shards), ``test_loss``/``test_accuracy`` from the
  ``evaluation`` table (``experiment.validation=true``);
- ``window`` rows: the run cut into at most ``WINDOWS`` windows of equal iteration counts
  (``windows=None``: one row per iteration, the DataParallel study's loss at each iteration);
- ``wall_s``: training seconds from the first iteration to the row's end, warm-up counted
  (each iteration's slowest rank; evaluation passes are not in it);
- ``to_threshold_*``: the first WINDOW whose mean loss is below the threshold (the point's
  ``trainer.params.loss_threshold``, or ``--loss-threshold``): iterations done at its end
  (warm-up counted), epochs started by then, and ``wall_s`` then. None: never below.
  A run that ran the trainer's stop rule (frozen_backbone's ``stop_at_threshold``,
  trainers/dp_study.py) says how it ended in ``stopped``: ``threshold`` (it ended at the
  end of the first epoch whose mean training loss fell below its threshold: that epoch
  count, the iterations and ``wall_s`` then are its ``to_threshold_*``) or ``capped``
  (it ran its planned epochs without reaching it: ``to_threshold_*`` None, whatever a
  window's mean did); judged against another ``--loss-threshold`` the windows decide.

Each point's latest completed attempt, as every harvest table.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

import polars as pl
from sqlalchemy import select

from campaign_sql.schema import EVALUATION_SINCE, breakdown, evaluation, iteration, rank_timing

WINDOWS = 20  # iteration windows per point (fewer when it ran fewer iterations)
COLUMNS = {
    "idx": pl.Int64, "trainer": pl.Utf8, "experiment": pl.Utf8, "backbone": pl.Utf8, "variant": pl.Utf8,
    "gpus": pl.Int64, "repeat": pl.Int64,
    "unit": pl.Utf8, "at": pl.Int64, "iterations": pl.Int64, "epoch": pl.Int64, "wall_s": pl.Float64,
    "loss": pl.Float64, "train_accuracy": pl.Float64, "test_loss": pl.Float64, "test_accuracy": pl.Float64,
    "test_images": pl.Int64, "epoch_s": pl.Float64, "loss_threshold": pl.Float64,
    "to_threshold_iterations": pl.Int64, "to_threshold_epochs": pl.Int64, "to_threshold_s": pl.Float64,
    "stopped": pl.Utf8,
}
STOPPED = {"threshold": "threshold", "cap": "capped"}  # the trainer's word -> the table's


def _mean(values: Sequence[float]) -> Optional[float]:
    vals = [v for v in values if v is not None]
    return sum(vals) / len(vals) if vals else None


def per_iteration(rows: Sequence[dict]) -> tuple[list[Optional[float]], list[float]]:
    """(mean loss over ranks, slowest rank's seconds) of every iteration, in order, from
    ``iteration`` rows (rank, iter, iter_s, loss) of one attempt."""
    by: dict[int, list[dict]] = {}
    for r in rows:
        by.setdefault(int(r["iter"]), []).append(r)
    its = sorted(by)
    return [_mean([r["loss"] for r in by[i]]) for i in its], [max(r["iter_s"] for r in by[i]) for i in its]


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def unread_iterations(rows: Sequence[dict]) -> Optional[str]:
    """What is wrong with ``iteration`` rows (rank, iter, iter_s, loss) of one attempt, read
    from a store others write: the first row whose iteration is no integer, whose seconds
    are no number or whose loss is neither a number nor none; None: every row is right."""
    from campaign.store.typed import shown_value

    for r in rows:
        if not isinstance(r["iter"], int) or isinstance(r["iter"], bool):
            return f"iteration.iter={shown_value(r['iter'])} is not an integer"
        if not _number(r["iter_s"]):
            return f"iteration.iter_s={shown_value(r['iter_s'])} is not a number"
        if r["loss"] is not None and not _number(r["loss"]):
            return f"iteration.loss={shown_value(r['loss'])} is not a number"
    return None


def epoch_bounds(counts: dict[int, int]) -> list[tuple[int, int, int]]:
    """(epoch, first iteration, end iteration) from each epoch's iteration count."""
    out, start = [], 0
    for e in sorted(counts):
        out.append((e, start, start + counts[e]))
        start += counts[e]
    return out


def point_rows(loss: Sequence[Optional[float]], secs: Sequence[float], epochs: dict[int, dict],
               threshold: Optional[float], windows: Optional[int] = WINDOWS,
               stop: Optional[dict] = None) -> list[dict[str, Any]]:
    """The rows of one point (module docstring) from its per-iteration mean loss and
    seconds and ``epochs``: epoch -> {iterations, epoch_s, train_accuracy, test_loss,
    test_accuracy, test_images} (iterations: how many of the run's it holds). ``stop``:
    the run's stop rule's keys (rank_timing.extra: stopped, epochs_to_threshold,
    iterations_at_stop, loss_threshold), None when it ran none."""
    n = len(loss)
    cum, total = [], 0.0
    for s in secs:
        total += s
        cum.append(total)
    bounds = epoch_bounds({e: int(d["iterations"]) for e, d in epochs.items() if d.get("iterations")})

    def epoch_at(end: int) -> Optional[int]:  # the epoch of iteration end-1
        return next((e for e, lo, hi in bounds if lo < end <= hi), None)

    rows: list[dict[str, Any]] = []
    size = max(1, -(-n // windows)) if n and windows else 1  # windows None: every iteration its row
    hit = None
    for lo in range(0, n, size):
        hi = min(n, lo + size)
        mean = _mean(loss[lo:hi])
        rows.append({"unit": "window", "at": lo, "iterations": hi, "epoch": epoch_at(hi), "wall_s": cum[hi - 1],
                     "loss": mean})
        if hit is None and threshold is not None and mean is not None and mean < threshold:
            hit = rows[-1]
    for e, lo, hi in bounds:
        d = epochs[e]
        hi = min(hi, n)
        rows.append({"unit": "epoch", "at": e, "iterations": hi, "epoch": e, "wall_s": cum[hi - 1] if hi else None,
                     "loss": _mean(loss[lo:hi]), "epoch_s": d.get("epoch_s"),
                     **{k: d.get(k) for k in ("train_accuracy", "test_loss", "test_accuracy", "test_images")}})
    for e, d in sorted(epochs.items()):  # evaluated epochs the timed rows do not hold (none normally)
        if not any(lo_e == e for lo_e, _, _ in bounds) and d.get("test_loss") is not None:
            rows.append({"unit": "epoch", "at": e, "epoch": e,
                         **{k: d.get(k) for k in ("test_loss", "test_accuracy", "test_images")}})
    reached = {"loss_threshold": threshold,
               "to_threshold_iterations": hit["iterations"] if hit else None,
               "to_threshold_epochs": (hit["epoch"] + 1 if hit["epoch"] is not None else None) if hit else None,
               "to_threshold_s": hit["wall_s"] if hit else None,
               "stopped": STOPPED.get(stop.get("stopped")) if stop else None}
    if stop and reached["stopped"] and stop.get("loss_threshold") == threshold:  # the run's own decision
        done = int(stop.get("iterations_at_stop") or n) if reached["stopped"] == "threshold" else None
        reached.update(to_threshold_iterations=done, to_threshold_epochs=stop.get("epochs_to_threshold"),
                       to_threshold_s=cum[min(done, n) - 1] if done and n else None)
    return [dict(r, **reached) for r in rows]


def _epochs(conn, attempt_id: int, with_evaluation: bool) -> dict[int, dict]:
    """epoch -> what the store holds of it for one attempt."""
    out: dict[int, dict] = {}
    q = select(breakdown.c.rank, breakdown.c.phase, breakdown.c.total_s, breakdown.c.count).where(
        breakdown.c.attempt_id == attempt_id, breakdown.c.phase.like("epoch\\_%", escape="\\"))
    for r in conn.execute(q).mappings():
        tail = r["phase"][len("epoch_"):]
        if not tail.isdigit():
            continue
        d = out.setdefault(int(tail), {"iterations": 0, "_s": []})
        if r["rank"] == 0:
            d["iterations"] = int(r["count"] or 0)
        d["_s"].append(r["total_s"])
    acc: dict[int, list[float]] = {}
    for (extra,) in conn.execute(select(rank_timing.c.extra).where(rank_timing.c.attempt_id == attempt_id)):
        for ep in (extra or {}).get("epochs") or () if isinstance(extra, dict) else ():
            if isinstance(ep, dict) and isinstance(ep.get("epoch"), int) and _number(ep.get("train_accuracy")):
                acc.setdefault(ep["epoch"], []).append(float(ep["train_accuracy"]))
    for e, d in out.items():
        times = [s for s in d.pop("_s") if s is not None]
        d["epoch_s"] = max(times) if times else None
        d["train_accuracy"] = _mean(acc.get(e, []))
    if with_evaluation:
        q = select(evaluation).where(evaluation.c.attempt_id == attempt_id, evaluation.c.split == "test")
        for r in conn.execute(q).mappings():
            d = out.setdefault(int(r["epoch"]), {})
            d.update(test_loss=r["loss"], test_accuracy=r["accuracy"], test_images=r["images"])
    return out


def _stop(conn, attempt_id: int) -> Optional[dict]:
    """Rank 0's stop-rule keys (rank_timing.extra) of one attempt; None when it ran no stop rule."""
    q = select(rank_timing.c.extra).where(rank_timing.c.attempt_id == attempt_id, rank_timing.c.rank == 0)
    extra = conn.execute(q).scalar()
    if not isinstance(extra, dict) or not isinstance(extra.get("stopped"), str):
        return None
    counts = [extra.get(k) for k in ("iterations_at_stop", "epochs_to_threshold")]
    if not all(c is None or (isinstance(c, int) and not isinstance(c, bool) and 0 <= c < 2**63) for c in counts) \
            or not (extra.get("loss_threshold") is None or _number(extra.get("loss_threshold"))):
        return None  # not as the trainer writes it (a store others write): no stop rule read
    return extra


def point_settings(points: Sequence[dict]) -> dict[Any, dict[str, Optional[str]]]:
    """Per point id: ``backbone`` (its ``trainer.params.backbone``: the DataParallel study's
    Fig 3a compares them) and ``variant``, what differs between these points besides the
    table's own columns (``key=value`` of each varying override, the point's override or
    else its config's value: a study's default point names its default too)."""
    from campaign.common.varying import varying
    from campaign.harvest.where_settings import value_of

    names, _ = varying([p.get("overrides") or [] for p in points],
                       skip=("platform", "gpus", "nodes", "repeats", "trainer", "experiment", "dataset"))
    out = {}
    for p in points:
        values = {n: value_of(p, n) for n in names}
        backbone = value_of(p, "trainer.params.backbone")
        variant = " ".join(f"{n}={v}" for n, v in values.items() if isinstance(v, str) and v != "")
        out[p["id"]] = {"backbone": backbone if isinstance(backbone, str) else None, "variant": variant}
    return out


def convergence_table(store: Any, campaign: dict, loss_threshold: Optional[float] = None,
                      windows: Optional[int] = WINDOWS) -> tuple[pl.DataFrame, list[str]]:
    """The campaign's convergence table and the warnings of deriving its points' states
    (``loss_threshold``: --loss-threshold, else each point's trainer.params.loss_threshold;
    ``windows``: the window rows per point, None: one per iteration)."""
    from campaign.common.text import printable
    from campaign.harvest.door import left_out
    from campaign.observe.state import completed_ids, effective_points

    points, warnings = effective_points(store, campaign)
    done = set(completed_ids(points))
    unread = left_out(store, campaign["id"], [p for p in points if p["id"] in done])  # as harvest leaves them out
    done -= set(unread)
    warnings = warnings + list(unread.values())
    settings = point_settings([p for p in points if p["id"] in done])
    rows: list[dict[str, Any]] = []
    with store.engine.connect() as conn:
        for p in points:
            if p["id"] not in done or p.get("attempt_id") is None:
                continue
            aid = p["attempt_id"]
            q = select(iteration.c.rank, iteration.c.iter, iteration.c.iter_s, iteration.c.loss).where(
                iteration.c.attempt_id == aid)
            its = [dict(r) for r in conn.execute(q).mappings()]
            unread = unread_iterations(its)
            if unread:  # a store others write: the point said and left out, as harvest leaves it out
                warnings.append(f"point #{p['idx']} (id {p['id']}) of campaign {printable(campaign['id'])}: its "
                                f"{unread}; left out")
                continue
            loss, secs = per_iteration(its)
            config = p.get("config") if isinstance(p.get("config"), dict) else {}
            own = ((config.get("trainer") or {}).get("params") or {}).get("loss_threshold")
            threshold = loss_threshold if loss_threshold is not None else (float(own) if _number(own) else None)
            keys = {k: p.get(k) for k in ("idx", "trainer", "experiment", "gpus", "repeat")} | settings[p["id"]]
            epochs = _epochs(conn, aid, store.version >= EVALUATION_SINCE)
            rows += [dict(keys, **r) for r in point_rows(loss, secs, epochs, threshold, windows, stop=_stop(conn, aid))]
    df = pl.DataFrame(rows, schema=COLUMNS) if rows else pl.DataFrame(schema=COLUMNS)
    return df.sort(["idx", "unit", "at"], descending=[False, True, False]), warnings
