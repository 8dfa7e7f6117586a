"""The one renderer of declared items (declared.py): per item, the frame behind it (its CSV,
in the units as published) and its figure, drawn with harvest's own pieces (figure.py's series
lines, plots.py's platform comparison, plots_bars.py's stack, plots_convergence.py's loss).

``item_data(item, harvest, twin)`` -> ``Drawn``: the data frame, the figure (None for a
table), notes, and, where the campaigns hold nothing for it, why.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import polars as pl

from campaign.harvest.convergence import WINDOWS
from campaign.harvest.declared import Item, Panel
from campaign.harvest.figure import FIG_H, FIG_W, finish, headroom, lay_out, pyplot, series_lines
from campaign.harvest.xaxis import GPUS, draw_axis, varying_names

KEY_COLUMNS = ("platform", "trainer", "experiment", "dataset", "variant", "nodes", "gpus")


@dataclass
class Drawn:
    """One item's data and figure."""

    data: Optional[pl.DataFrame] = None  # the numbers behind it (its CSV); None: nothing to show
    figure: object = None  # a matplotlib Figure (None for a table or when there is no data)
    notes: list[str] = field(default_factory=list)  # what a reader needs beside it (collisions, nulls)
    missing: str = ""  # why nothing is made from these campaigns ("" when made)


def _keys(df: pl.DataFrame, x: str) -> list[str]:
    """The columns that name a row: the series keys, each varying setting, the x."""
    cols = [c for c in KEY_COLUMNS if c in df.columns] + varying_names(df)
    if x in df.columns and x not in cols:
        cols.append(x)
    return list(dict.fromkeys(cols))


def _x(df: pl.DataFrame, x: str) -> str:
    """The item's x where the frame has it (a setting that varies among its points), else GPUs."""
    return x if x in df.columns else GPUS


def _no_values(df: pl.DataFrame, columns: list[str]) -> list[str]:
    """A note per column that no row has a value of, with the table's own reason (its note)."""
    out = []
    for col in columns:
        if col in df.columns and df[col].null_count() == df.height:
            why = sorted({n for n in df["note"].fill_null("").to_list() if n}) if "note" in df.columns else []
            out.append(f"{col}: no value" + (f" ({'; '.join(why)})" if why else ""))
    return out


def _panel_column(p: Panel) -> str:
    """A panel's CSV column: the harvested name where it is drawn as stored, else its axis label
    (its published unit)."""
    return p.column if p.multiply == 1.0 and p.divide == 1.0 else p.label


def line_item(item: Item, df: pl.DataFrame) -> Drawn:
    """Each panel's column per series vs the item's x, in the published unit."""
    missing = [p.column for p in item.y if p.column not in df.columns]
    if missing:
        return Drawn(missing=f"no {', '.join(missing)} in the harvested {item.table} table")
    x = _x(df, item.x)
    scaled = df.with_columns([(pl.col(p.column) * p.multiply / p.divide).alias(_panel_column(p)) for p in item.y])
    cols = _keys(scaled, x) + [_panel_column(p) for p in item.y] + (["note"] if "note" in scaled.columns else [])
    data = scaled.select(list(dict.fromkeys(cols)))
    plt = pyplot()
    fig, axes = plt.subplots(1, len(item.y), figsize=(len(item.y) * FIG_W, FIG_H), squeeze=False)
    for ax, p in zip(axes[0], item.y):
        axis = series_lines(ax, scaled, p.column, scale=p.multiply / p.divide, x=x,
                            missing="no value" if p.ideal is None else "no 1-GPU baseline")
        if p.ideal == "gpus" and axis.is_gpus:
            ax.plot(list(axis.values), list(axis.values), "k--", alpha=0.6, label="ideal (S = N)")
        elif p.ideal == "one":
            ax.axhline(p.multiply / p.divide, color="k", linestyle="--", alpha=0.6, label="ideal")
        draw_axis(ax, axis)
        ax.set_ylabel(p.label)
        headroom(ax)
        finish(fig, ax, p.title or item.caption)
    return Drawn(data=data, figure=fig, notes=_no_values(df, [p.column for p in item.y]))


def stack_item(item: Item, stack: pl.DataFrame) -> Drawn:
    """The study's computation and communication per iteration, stacked, per series and x."""
    from campaign.harvest.plots_bars import breakdown_figure

    if stack.height == 0:
        return Drawn(missing="no breakdown rows for its points")
    x = _x(stack, item.x)
    data = stack.with_columns((pl.col("per_iteration_s") * 1000).alias("per_iteration_ms"))
    cols = _keys(data, x) + ["phase", "label", "per_iteration_s", "per_iteration_ms", "repeats"]
    notes = [] if data["phase"].str.starts_with("study.").any() else [
        "no point timed the study's rows (trainer.params.study_timing=true): campaign's phases instead"]
    fig = breakdown_figure(stack, x)
    import textwrap

    for ax in fig.axes[:1]:  # a few bars make a narrow figure: the caption on several lines, not cut off
        ax.set_title(textwrap.fill(item.caption, 40), fontsize="medium")
        if max((len(t.get_text()) for t in ax.get_xticklabels()), default=0) > 6:  # names (squeezenet1_0) apart
            ax.tick_params(axis="x", labelrotation=30)
            for t in ax.get_xticklabels():
                t.set_horizontalalignment("right")
    return Drawn(data=data.select([c for c in dict.fromkeys(cols) if c in data.columns]), figure=fig, notes=notes)


def phase_item(item: Item, stack: pl.DataFrame) -> Drawn:
    """One breakdown row's mean ms per iteration per series vs the item's x."""
    rows = stack.filter(pl.col("phase") == item.phase) if stack.height else stack
    if rows.height == 0:
        return Drawn(missing=f"no {item.phase} rows for its points (trainer.params.study_timing=true times them)")
    x = _x(rows, item.x)
    rows = rows.with_columns((pl.col("per_iteration_s") * 1000).alias("per_iteration_ms"))
    data = rows.select(list(dict.fromkeys(_keys(rows, x) + ["phase", "per_iteration_s", "per_iteration_ms"])))
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(FIG_W, FIG_H))
    draw_axis(ax, series_lines(ax, rows, "per_iteration_ms", x=x))
    ax.set_ylabel(f"{item.phase} per iteration (ms)")
    headroom(ax)
    finish(fig, ax, item.caption)
    return Drawn(data=data, figure=fig)


def comparison_item(item: Item, scaling: pl.DataFrame, util: pl.DataFrame, twin: bool = False) -> Drawn:
    """The platform comparison's bars (plots.platform_comparison_data: one computation with the
    harvest figure and the report): speedup, efficiency, eq. 3.3's GPU and CPU utilisation."""
    from campaign.harvest.plots import platform_comparison_data, platform_comparison_figure

    wanted = [str(p) for p in item.filters(twin).get("platform", ())]  # the twin's platforms on the twin
    have = [p for p in wanted if p in set(scaling["platform"].to_list())] or sorted(set(scaling["platform"]))
    if len(have) < 2:
        return Drawn(missing=f"points of {len(have)} of its platforms ({', '.join(wanted)}); it compares two or more")
    data = platform_comparison_data(scaling, util)
    unmeasured = _no_values(data, ["gpu_util_study", "cpu_util_study"])
    return Drawn(data=data, figure=platform_comparison_figure(scaling, util, have),
                 notes=["eq. 3.3 utilisation: no value (no device time: CPU ranks)"] if unmeasured else [])


def _accuracy_figure(rows: pl.DataFrame, title: str):
    """Test accuracy after each epoch, one line per run."""
    from campaign.harvest.plots_convergence import line_labels

    rows = rows.filter((pl.col("unit") == "epoch") & pl.col("test_accuracy").is_not_null())
    if rows.height == 0:
        return None
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(FIG_W, FIG_H))
    labels = line_labels(rows)
    if "point_dataset" in rows.columns and rows["point_dataset"].n_unique() > 1:  # Fig 10: CIFAR-10 beside CIFAR-100
        named = dict(zip(zip(rows["idx"].to_list(), rows["repeat"].fill_null(0).to_list()), rows["point_dataset"]))
        labels = {run: f"{named[run]} {label}" for run, label in labels.items()}
    for run in sorted(labels):
        mine = rows.filter((pl.col("idx") == run[0]) & (pl.col("repeat").fill_null(0) == run[1])).sort("epoch")
        ax.plot(mine["epoch"].to_list(), mine["test_accuracy"].to_list(), marker="o", label=labels[run])
    ax.set_xlabel("epoch")
    ax.set_ylabel("test accuracy")
    finish(fig, ax, title)
    return fig


def _caption_title(fig, caption: str) -> None:
    """The item's caption over a convergence figure, wrapped (a panel's caption is long)."""
    import textwrap

    ax = fig.axes[0]
    ax.set_title(textwrap.fill(caption, 64), fontsize="medium")
    lay_out(fig)


def _integer_x(fig) -> None:
    """Epochs and iterations are counted: ticks at whole numbers only."""
    from matplotlib.ticker import MaxNLocator

    for ax in fig.axes:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))


def _threshold_marked(fig, rows: pl.DataFrame) -> None:
    """The loss threshold as a dotted line and, in each run's legend entry, the epochs it took
    to fall below it (``to_threshold_epochs``) or that it never did: the DataParallel study's
    epochs until the loss fell below its threshold (Figs 2a, 3a, 5b)."""
    from campaign.harvest.plots_convergence import line_labels

    if "loss_threshold" not in rows.columns or rows["loss_threshold"].drop_nulls().len() == 0:
        return
    ax = fig.axes[0]
    thresholds = sorted(set(rows["loss_threshold"].drop_nulls().to_list()))
    suffix = {}
    for run, label in line_labels(rows).items():
        mine = rows.filter((pl.col("idx") == run[0]) & (pl.col("repeat").fill_null(0) == run[1])).row(0, named=True)
        if mine["loss_threshold"] is None:
            continue
        k = mine["to_threshold_epochs"]
        said = f"{k} epoch{'s' if k != 1 else ''} to loss < {mine['loss_threshold']:g}" if k is not None else \
            f"not below {mine['loss_threshold']:g}" + (" (capped)" if mine.get("stopped") == "capped" else "")
        suffix[label] = f"{label}: {said}"
    for line in ax.get_lines():
        if line.get_label() in suffix:
            line.set_label(suffix[line.get_label()])
    for t in thresholds:
        ax.axhline(t, color="k", linestyle=":", alpha=0.6, label=f"loss threshold {t:g}")
    ax.legend(fontsize="small")


def _loss_accuracy_figure(rows: pl.DataFrame, caption: str):
    """Training loss per epoch (mean over ranks) beside test accuracy after each epoch, one line
    per run in both (the ViT study's Fig 11)."""
    from campaign.harvest.plots_convergence import line_labels

    rows = rows.filter(pl.col("unit") == "epoch")
    if rows.height == 0 or rows["loss"].drop_nulls().len() == 0:
        return None
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(2 * FIG_W, FIG_H))
    labels = line_labels(rows)
    for col, ax, ylabel in (("loss", axes[0], "training loss (mean over ranks and the epoch)"),
                            ("test_accuracy", axes[1], "test accuracy (fraction correct)")):
        for run in sorted(labels):
            mine = rows.filter((pl.col("idx") == run[0]) & (pl.col("repeat").fill_null(0) == run[1])
                               & pl.col(col).is_not_null()).sort("epoch")
            ax.plot(mine["epoch"].to_list(), mine[col].to_list(), marker="o", label=labels[run])
        ax.set_xlabel("epoch")
        ax.set_ylabel(ylabel)
        ax.grid(True, alpha=0.3)
        handles, _ = ax.get_legend_handles_labels()
        if handles:
            ax.legend(fontsize="small")
    axes[0].set_title("training loss per epoch")
    axes[1].set_title("test accuracy after each epoch")
    fig.suptitle(caption)
    lay_out(fig)
    return fig


def _test_share(rows: pl.DataFrame) -> list[str]:
    """A note for each dataset whose test figures are of part of its test split
    (``experiment.validation_images``): its evaluated images beside the whole split's."""
    if "test_images" not in rows.columns or "point_dataset" not in rows.columns:
        return []
    from campaign_datasets import find

    notes = []
    # point_dataset is the point's dataset in words ("cifar10 32px 10 classes": derive.py), its name first
    for name, images in sorted({(str(d).split(" ", 1)[0], int(n)) for d, n in zip(rows["point_dataset"],
                                rows["test_images"]) if d is not None and n is not None}):
        whole = getattr(find(name), "test_images", None)
        if whole and images < whole:
            notes.append(f"test loss and accuracy over {images:,} of {name}'s {whole:,} test images a pass "
                         f"(experiment.validation_images)")
    return notes


def convergence_item(item: Item, rows: pl.DataFrame) -> Drawn:
    """Loss per iteration (``rows``: one window row per iteration) or per epoch, test accuracy
    per epoch, or loss and test accuracy per epoch side by side; one line per point."""
    from campaign.harvest.plots_convergence import loss_epochs_figure, loss_iterations_figure

    if rows.height == 0:
        return Drawn(missing="no convergence rows for its points")
    if item.view == "iterations":
        data, fig = rows.filter(pl.col("unit") == "window"), loss_iterations_figure(rows)
    elif item.view == "epochs":
        data, fig = rows.filter(pl.col("unit") == "epoch"), loss_epochs_figure(rows)
    elif item.view == "loss_accuracy":
        data, fig = rows.filter(pl.col("unit") == "epoch"), _loss_accuracy_figure(rows, item.caption)
    else:
        data, fig = rows.filter(pl.col("unit") == "epoch"), _accuracy_figure(rows, item.caption)
    if fig is None:
        return Drawn(missing=f"no {item.view} rows for its points")
    if item.view == "iterations":
        fig.axes[0].set_xlabel("iteration (its end, warm-up counted)")
    if item.view in ("iterations", "epochs"):
        _caption_title(fig, item.caption)
    if item.view == "epochs":
        _threshold_marked(fig, data)
    _integer_x(fig)
    data = data.drop([c for c in data.columns if data[c].dtype == pl.Object or data[c].dtype == pl.Null])
    return Drawn(data=data, figure=fig, notes=_test_share(data))


def table_item(item: Item, df: pl.DataFrame) -> Drawn:
    """The declared columns of a harvested table, one row per point of its series."""
    cols = [c for c in item.columns if c in df.columns]
    return Drawn(data=df.select(cols).unique(maintain_order=True))


def item_data(item: Item, harvest, twin: bool) -> Drawn:
    """Draw one declared item from the campaigns (``harvest``: declared_data.Harvest)."""
    where = item.filters(twin)
    if item.draw == "convergence":
        per_iteration = item.view == "iterations"  # the study's loss at each iteration, not windows of them
        drawn = convergence_item(item, harvest.convergence(where, windows=None if per_iteration else WINDOWS))
        _, notes = harvest.tables(where)
        drawn.notes = notes + drawn.notes
        return drawn
    tables, notes = harvest.tables(where)
    if not tables:
        return Drawn(missing="no completed point passes its filters" + (f" ({_where(where)})" if where else ""))
    if item.draw == "line":
        drawn = line_item(item, tables[item.table])
    elif item.draw == "table":
        drawn = table_item(item, tables[item.table])
    elif item.draw == "stack":
        drawn = stack_item(item, tables["phase_stack"])
    elif item.draw == "phase":
        drawn = phase_item(item, tables["phase_stack"])
    else:
        drawn = comparison_item(item, tables["scaling"], tables["utilisation"], twin)
    drawn.notes = notes + drawn.notes
    return drawn


def _where(where: dict) -> str:
    return " ".join(f"{k}={','.join(str(v) for v in vals)}" for k, vals in where.items())
