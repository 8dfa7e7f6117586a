"""The figures a harvest writes: every figure its tables allow, saved as PNG and SVG,
each carrying the campaign's label (the line figures of ``plots.py``, the bar figures of
``plots_bars.py``)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import polars as pl

from campaign.common.errors import ConfigError
from campaign.common.outfile import check_output, write_output
from campaign.harvest.figure import campaign_label, pyplot, stamp
from campaign.harvest.plots import (efficiency_figure, epoch_time_figure, platform_comparison_figure, speedup_figure,
                                    throughput_figure, time_figure, utilisation_figure, utilisation_study_figure)
from campaign.harvest.plots_bars import breakdown_figure, hardware_figure, placement_figure
from campaign.harvest.study_style import PLAIN, FigureStyle


# Figures of a table built from the store (``--table NAME --plots DIR``): name -> (file stem,
# "module:function" drawing it from the table, None when it has nothing to draw).
TABLE_FIGURES = {
    "convergence": (("loss_iterations", "campaign.harvest.plots_convergence:loss_iterations_figure"),
                    ("loss_epochs", "campaign.harvest.plots_convergence:loss_epochs_figure"),
                    ("loss_wall_time", "campaign.harvest.plots_convergence:loss_time_figure")),
    "model": (("model_fit", "campaign.harvest.plots_model:model_fit_figure"),
              ("model_comm", "campaign.harvest.plots_model:model_comm_figure")),
}


def write_table_figures(out_dir: str | Path, table: str, df: pl.DataFrame, campaign: Optional[dict] = None) -> list[Path]:
    """Draw the figures ``TABLE_FIGURES`` registers for ``table`` (none: no file) as PNG and SVG."""
    import importlib

    out = Path(out_dir)
    paths: list[Path] = []
    for stem, where in TABLE_FIGURES.get(table, ()):
        module, func = where.split(":")
        fig = getattr(importlib.import_module(module), func)(df)
        if fig is None:
            continue
        try:
            out.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(f"cannot write figures to {out}: {exc.strerror}") from exc
        stamp(fig, campaign_label(campaign))
        paths += save_figure(fig, out, stem)
        pyplot().close(fig)
    return paths


def save_figure(fig, out: Path, stem: str) -> list[Path]:
    """``out/<stem>.png`` and ``.svg``, each written as campaign.common.outfile writes a
    file (a new file renamed into place: never through a link planted there, nor into a
    FIFO; one such is refused in one line before either is written)."""
    paths = [check_output(out / f"{stem}.{ext}", "--plots") for ext in ("png", "svg")]
    for path in paths:
        ext = path.suffix[1:]
        write_output(path, lambda fh, ext=ext: fig.savefig(fh, format=ext, dpi=120 if ext == "png" else None),
                     flag="--plots")
    return paths


def write_figures(out_dir: str | Path, scaling: pl.DataFrame, throughput: pl.DataFrame, util: pl.DataFrame,
                  other: Optional[tuple[pl.DataFrame, pl.DataFrame]] = None,
                  stack: Optional[pl.DataFrame] = None, hardware: Optional[pl.DataFrame] = None,
                  placement: Optional[pl.DataFrame] = None, campaign: Optional[dict] = None,
                  x: str = "gpus", style: Optional[FigureStyle] = None) -> list[Path]:
    """Draw every figure the tables allow and save each as PNG and SVG in ``out_dir``.

    ``other``: another campaign's (scaling, utilisation) tables; its platforms join the
    platform comparison panel (drawn when two or more platforms were measured).
    ``stack``: the phase stack (``utilisation.phase_stack``) of the breakdown figure;
    ``hardware``: the hardware table (MFU and bus bandwidth figure); ``placement``: the
    intra- vs inter-node table (drawn when some point spanned nodes); ``campaign``: the
    campaign's row, whose name, id and date every figure carries above it; ``x``: the
    column (xaxis.resolve_x) that time, speedup, efficiency, throughput and the breakdown
    are drawn against (GPUs by default); ``style``: the units and titles of the campaign's
    study (study_style.py; plain without one)."""
    style = style or PLAIN
    plt = pyplot()
    out = Path(out_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"cannot write figures to {out}: {exc.strerror}") from exc
    both_scaling, both_util = scaling, util
    if other is not None and other[0] is not None and other[0].height:
        both_scaling = pl.concat([scaling, other[0]], how="diagonal_relaxed")
        both_util = pl.concat([util, other[1]], how="diagonal_relaxed")
    figures = {
        "training_time": time_figure(scaling, x, style),
        "epoch_time": epoch_time_figure(scaling, x),
        "speedup": speedup_figure(scaling, x, style),
        "efficiency": efficiency_figure(scaling, x, style),
        "throughput": throughput_figure(throughput, x),
        "utilisation": utilisation_figure(util),
        "utilisation_study": utilisation_study_figure(util) if "gpu_util_study" in util.columns else None,
        "platform_comparison": platform_comparison_figure(both_scaling, both_util),
        "breakdown": breakdown_figure(stack, x) if stack is not None else None,
        "hardware": hardware_figure(hardware) if hardware is not None and hardware.height else None,
        "placement": placement_figure(placement) if placement is not None else None,
    }
    paths: list[Path] = []
    label = campaign_label(campaign)
    try:
        for name, fig in figures.items():  # every target checked before any figure is written
            if fig is not None:
                check_output(out / f"{name}.png", "--plots"), check_output(out / f"{name}.svg", "--plots")
        for name, fig in figures.items():
            if fig is None:
                continue
            stamp(fig, label)
            paths += save_figure(fig, out, name)
    finally:
        for fig in figures.values():
            if fig is not None:
                plt.close(fig)
    return paths
