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


def _label(row: dict) -> str:
    return f"#{row['idx']} {row['trainer']} {row['experiment']} gpus={row['gpus']}" + (
        f" r{row['repeat']}" if row.get("repeat") else "")


def _figure(df: pl.DataFrame, unit: str, x: str, xlabel: str, title: str, test: bool = False):
    rows = df.filter((pl.col("unit") == unit) & pl.col(x).is_not_null() & pl.col("loss").is_not_null())
    if rows.height == 0:
        return None
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(FIG_W, FIG_H))
    # one line per run: a point's repeats share its idx, so (idx, repeat) tells them apart
    for idx, repeat in sorted(set(zip(rows["idx"].to_list(), rows["repeat"].fill_null(0).to_list()))):
        mine = rows.filter((pl.col("idx") == idx) & (pl.col("repeat").fill_null(0) == repeat)).sort(x)
        line = ax.plot(mine[x].to_list(), mine["loss"].to_list(), marker="o" if unit == "epoch" else None,
                       label=_label(mine.row(0, named=True)))
        if test and mine["test_loss"].drop_nulls().len():
            ax.plot(mine[x].to_list(), mine["test_loss"].to_list(), linestyle="--", marker="s",
                    color=line[0].get_color(), label=f"#{idx}{f' r{repeat}' if repeat else ''} test")
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
