"""The convergence figures (``campaign harvest --table convergence --plots DIR``): loss
against iterations, epochs and wall time, one line per point (the companion studies'
loss curves: the DataParallel study's Figs 1b, 2a, 3a, 5b; the ViT study's Figs 7, 10, 11).
Drawn from the convergence table (campaign/harvest/convergence.py); None when it has no
row of the kind a figure needs."""

from __future__ import annotations

from typing import Optional

import polars as pl

from campaign.harvest.figure import finish, pyplot

FIG_W, FIG_H = 7.0, 4.5


def _named(row: dict) -> dict[str, str]:
    """What names one run's line: trainer, experiment, GPUs and each varying setting (its key's
    last part: ``backbone=vgg16``, ``global_batch=1024``)."""
    out = {"trainer": str(row.get("trainer")), "experiment": str(row.get("experiment")), "gpus": f"gpus={row['gpus']}"}
    for part in (row.get("variant") or "").split():
        key, _, value = part.partition("=")
        out[key] = f"{key.rsplit('.', 1)[-1]}={value}"
    return out


def line_labels(rows: pl.DataFrame) -> dict[tuple, str]:
    """(idx, repeat) -> the legend label of its line: the values that differ between the
    figure's lines (the DataParallel study's legends name what varies: backbone, batch size,
    GPUs), never the point's index; a repeat is named by its number."""
    runs = {}
    for r in rows.unique(["idx", "repeat"], maintain_order=True).iter_rows(named=True):
        runs[(r["idx"], r["repeat"] or 0)] = _named(r)
    keys = list(dict.fromkeys(k for named in runs.values() for k in named))
    differ = [k for k in keys if len({named.get(k) for named in runs.values()}) > 1] or ["gpus"]
    return {run: " ".join(named[k] for k in differ if k in named) + (f" r{run[1]}" if run[1] else "")
            for run, named in runs.items()}


def _figure(df: pl.DataFrame, unit: str, x: str, xlabel: str, title: str, test: bool = False):
    rows = df.filter((pl.col("unit") == unit) & pl.col(x).is_not_null() & pl.col("loss").is_not_null())
    if rows.height == 0:
        return None
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(FIG_W, FIG_H))
    labels = line_labels(rows)
    # one line per run: a point's repeats share its idx, so (idx, repeat) tells them apart
    for idx, repeat in sorted(set(zip(rows["idx"].to_list(), rows["repeat"].fill_null(0).to_list()))):
        mine = rows.filter((pl.col("idx") == idx) & (pl.col("repeat").fill_null(0) == repeat)).sort(x)
        line = ax.plot(mine[x].to_list(), mine["loss"].to_list(), marker="o" if unit == "epoch" else None,
                       label=labels[(idx, repeat)])
        if test and mine["test_loss"].drop_nulls().len():
            ax.plot(mine[x].to_list(), mine["test_loss"].to_list(), linestyle="--", marker="s",
                    color=line[0].get_color(), label=f"{labels[(idx, repeat)]} test")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("loss (mean over ranks)")
    finish(fig, ax, title)
    return fig


def loss_iterations_figure(df: pl.DataFrame) -> Optional[object]:
    """Training loss per iteration window against iterations (warm-up counted)."""
    return _figure(df, "window", "iterations", "iterations (warm-up counted)", "Loss per iteration window")


def loss_epochs_figure(df: pl.DataFrame) -> Optional[object]:
    """Training loss per epoch (and test loss, dashed, where evaluated) against epochs."""
    return _figure(df, "epoch", "epoch", "epoch", "Loss per epoch (test: dashed)", test=True)


def loss_time_figure(df: pl.DataFrame) -> Optional[object]:
    """Training loss per iteration window against training wall time."""
    return _figure(df, "window", "wall_s", "training time (s, warm-up counted, evaluation not)", "Loss against wall time")
