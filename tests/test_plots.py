"""Figures say what they show (campaign/harvest/: figure.py's shared pieces, plots.py's
line and plots_bars.py's bar figures, figures.py saving them): every figure carries the
campaign's name, id and date; a legend lists every series once (one without a value
included, saying why), projected points and ideal lines under one neutral entry each;
every axis is labelled with its unit."""

from __future__ import annotations

import time

import matplotlib.figure
import polars as pl
import pytest

from campaign.harvest import figure, figures, plots
from campaign.harvest.utilisation import utilisation_table
from campaign.harvest.views import scaling_table, throughput_table

CAMPAIGN = {"id": "20261124-011044-b4bb", "name": "main-job", "created_at": time.mktime((2026, 11, 24, 1, 10, 44, 0, 0, -1))}


def _points() -> pl.DataFrame:
    rows = []
    for variant, times in (("", {1: 160.0, 2: 100.0, 4: 80.0}), ("trainer.optimizer=adamw", {2: 90.0, 4: 70.0})):
        for gpus, t in times.items():
            rows.append({"platform": "v100", "trainer": "synthetic", "experiment": "weak_scaling", "variant": variant,
                         "gpus": gpus, "repeat": 0, "time_s": t, "batch_per_gpu": 8, "iterations": 160 // gpus,
                         "timed_iterations": 160 // gpus, "images": 8 * 160, "iter_median_s": t / (160 // gpus),
                         "projected": gpus == 4, "time_lo_s": t * 0.9, "time_hi_s": t * 1.1})
    return pl.DataFrame(rows)


def _legend(ax) -> list[str]:
    return [t.get_text() for t in ax.get_legend().get_texts()]


def test_every_series_once_in_each_legend_with_neutral_marks():
    scaling = scaling_table(_points())
    ax = plots.time_figure(scaling).axes[0]
    assert _legend(ax) == ["v100", "optimizer=adamw", "ideal T(1)/N", "projected (hollow)"]
    ax = plots.speedup_figure(scaling).axes[0]
    # the adamw series has no 1-GPU point: no speedup, but the legend still names it
    assert _legend(ax) == ["v100", "optimizer=adamw (no 1-GPU baseline)", "projected (hollow)",
                           "ideal (S = N)"]
    for fig in (plots.efficiency_figure(scaling), plots.throughput_figure(throughput_table(_points()))):
        names = _legend(fig.axes[0])
        assert len(names) == len(set(names))


def test_labels_are_unique_even_when_a_value_is_empty():
    df = pl.DataFrame({"platform": ["a", "a"], "trainer": ["t", "t"], "experiment": ["e", "e"],
                       "variant": ["", "x"], "image": [None, None], "gpus": [1, 1], "nodes": [1, 1]})
    assert sorted(figure.series_labels(df).values()) == ["a", "x"]
    twin = df.with_columns(pl.Series("variant", ["", None]))  # both say nothing
    assert len(set(figure.series_labels(twin).values())) == 2


def test_a_variant_is_named_by_the_overrides_that_differ_by_their_last_part():
    """The DataParallel twin's series: five overrides each, one of which differs (the rest made
    a legend wider than the figure); a last part two keys share stays whole."""
    common = "experiment.global_batch=16 trainer.params.backbone=resnet18 trainer.params.hidden=64"
    df = pl.DataFrame({"platform": ["a"] * 3, "trainer": ["t"] * 3, "experiment": ["e"] * 3,
                       "variant": [f"{common} trainer.params.mode=train model.mode=x",
                                   f"{common} trainer.params.mode=inference model.mode=x",
                                   f"{common} trainer.params.mode=inference model.mode=y experiment.epochs=2"],
                       "image": [None] * 3, "gpus": [1] * 3, "nodes": [1] * 3})
    assert list(figure.series_labels(df).values()) == [
        "trainer.params.mode=train model.mode=x", "trainer.params.mode=inference model.mode=x",
        "trainer.params.mode=inference model.mode=y epochs=2"]
    two = df.head(2)
    assert list(figure.series_labels(two).values()) == ["mode=train", "mode=inference"]


def test_each_dataset_is_a_line_of_its_own():
    """The ViT twin's strong scaling on CIFAR-10 and CIFAR-100 at one batch: two lines, each
    from its own 1-GPU baseline (one line through both drew two speedups at 2 GPUs)."""
    rows = []
    for dataset, times in (("cifar10", {1: 100.0, 2: 50.0}), ("cifar100", {1: 120.0, 2: 80.0})):
        for gpus, t in times.items():
            rows.append({"platform": "t4", "trainer": "vit", "experiment": "vit_strong", "dataset": dataset,
                         "variant": "", "gpus": gpus, "repeat": 0, "time_s": t, "batch_per_gpu": 8,
                         "iterations": 160 // gpus, "timed_iterations": 160 // gpus, "images": 8 * 160,
                         "iter_median_s": t / (160 // gpus), "projected": False})
    ax = plots.speedup_figure(scaling_table(pl.DataFrame(rows))).axes[0]
    lines = {line.get_label(): list(line.get_ydata()) for line in ax.get_lines() if not line.get_label().startswith("_")}
    assert lines["cifar10"] == [1.0, 100.0 / 50.0] and lines["cifar100"] == [1.0, 120.0 / 80.0]


def test_a_long_legend_goes_below_the_axes_and_the_figure_grows_to_hold_it():
    """Eight series of a whole campaign, each naming several overrides: the legend leaves the
    axes for a band below them, wrapped, and neither covers the other. A laid-out figure keeps
    no layout engine (each savefig would draw it once more, unseen)."""
    rows = []
    for k in range(8):
        variant = f"trainer.params.mode=m{k} trainer.params.engine=e{k} experiment.epochs=null experiment.iterations={k}"
        for gpus in (1, 2):
            rows.append({"platform": "a6000", "trainer": "frozen_backbone", "experiment": "dp", "variant": variant,
                         "gpus": gpus, "repeat": 0, "time_s": 10.0 / gpus, "batch_per_gpu": 8, "iterations": 20,
                         "timed_iterations": 20, "images": 160, "iter_median_s": 0.5 / gpus, "projected": False})
    fig = plots.time_figure(scaling_table(pl.DataFrame(rows)))
    assert fig.get_layout_engine() is None and fig.axes[0].get_legend() is None and len(fig.legends) == 1
    assert fig.get_size_inches()[1] > figure.FIG_H
    renderer = fig.canvas.get_renderer()
    band = fig.legends[0].get_window_extent(renderer)
    axes = fig.axes[0].get_tightbbox(renderer)  # with its tick labels and x label
    assert band.y1 <= axes.y0 and band.y0 >= 0 and band.x0 >= 0 and band.x1 <= fig.bbox.x1
    texts = [t.get_text() for t in fig.legends[0].get_texts()]
    assert texts[0].replace("\n  ", " ") == "mode=m0 engine=e0 iterations=0"
    short = plots.time_figure(scaling_table(pl.DataFrame(rows[:4])))
    assert short.axes[0].get_legend() is not None and not short.legends and short.get_layout_engine() is None


def test_every_axis_has_its_unit():
    scaling, throughput = scaling_table(_points()), throughput_table(_points())
    figures = [plots.time_figure(scaling), plots.speedup_figure(scaling), plots.efficiency_figure(scaling),
               plots.throughput_figure(throughput), plots.utilisation_figure(utilisation_table(_points()))]
    for fig in figures:
        for ax in fig.axes:
            assert ax.get_xlabel() == "GPUs (N)"
            assert ax.get_ylabel().endswith(")") and "(" in ax.get_ylabel(), ax.get_ylabel()  # "... (s)", "(%)"


def test_every_figure_names_its_campaign(tmp_path, monkeypatch):
    assert figure.campaign_label(CAMPAIGN) == "main-job · campaign 20261124-011044-b4bb · 2026-11-24"
    assert figure.campaign_label({"id": "c1"}) == "campaign c1"
    stamped = []
    save = matplotlib.figure.Figure.savefig

    def recording(fig, fh, *args, **kwargs):  # fh: the new file renamed into place (campaign.common.outfile)
        stamped.append(fig.get_suptitle())
        return save(fig, fh, *args, **kwargs)

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", recording)
    scaling, throughput = scaling_table(_points()), throughput_table(_points())
    paths = figures.write_figures(tmp_path, scaling, throughput, utilisation_table(_points()), campaign=CAMPAIGN)
    assert len(paths) >= 10 and len(stamped) == len(paths) and all(p.is_file() for p in paths)
    for title in stamped:
        assert title.endswith("main-job · campaign 20261124-011044-b4bb · 2026-11-24")


@pytest.mark.parametrize("layout", ["tight", "constrained"])
def test_the_stamp_keeps_a_suptitle_and_the_layout(layout):
    fig = matplotlib.figure.Figure(layout=layout)
    fig.add_subplot().set_title("x")
    fig.suptitle("Platform comparison: a vs b")
    figure.stamp(fig, "campaign c1")
    assert fig.get_suptitle() == "Platform comparison: a vs b\ncampaign c1"


def test_the_figure_modules_share_one_helpers_module_and_import_nothing_of_each_other():
    """The line and bar figures draw with figure.py's pieces; figures.py alone gathers them
    (an import either way between plots.py and plots_bars.py would make them one module)."""
    import ast
    from pathlib import Path

    folder = Path(plots.__file__).parent

    def imported(name: str) -> set[str]:
        tree = ast.parse((folder / f"{name}.py").read_text())
        found = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        return found | {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}

    line, bars, helpers = imported("plots"), imported("plots_bars"), imported("figure")
    assert "campaign.harvest.plots_bars" not in line and "campaign.harvest.plots" not in bars
    assert "campaign.harvest.figure" in line and "campaign.harvest.figure" in bars
    assert not {"campaign.harvest.plots", "campaign.harvest.plots_bars", "campaign.harvest.figures"} & helpers


def test_the_bar_groups_of_many_long_series_are_named_without_overlap():
    """A whole DataParallel campaign's breakdown: each series' label under its bars, wrapped to
    its group's width, words whole, no two labels over each other."""
    from campaign.harvest.plots_bars import breakdown_figure

    rows = []
    for k in range(6):
        variant = (f"experiment.global_batch={8 * (k + 1)} trainer.params.backbone=squeezenet1_{k} "
                   f"trainer.params.mode=inference trainer.params.stop_at_threshold=False")
        for gpus in ((1,) if k % 2 else (1, 2, 4)):
            for order, phase, s in ((0, "forward", 0.02), (1, "step", 0.01), (9, "iteration", 0.031)):
                rows.append({"platform": "a6000", "trainer": "frozen_backbone", "experiment": "dp", "dataset": "mnist",
                             "variant": variant, "image": None, "nodes": 1, "gpus": gpus, "phase": phase,
                             "order": order, "label": phase, "per_iteration_s": s})
    fig = breakdown_figure(pl.DataFrame(rows))
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    groups = [a for a in fig.axes[0].child_axes if a is not fig.axes[0]][0]
    labels = [t for t in groups.get_xticklabels() if t.get_text()]
    assert len(labels) == 6 and all(" " not in w for t in labels for w in t.get_text().split())
    assert all("backbone=squeezenet1_" in t.get_text().replace("\n", " ") for t in labels)  # words whole
    boxes = sorted((t.get_window_extent(renderer) for t in labels), key=lambda b: b.x0)
    assert all(a.x1 < b.x0 for a, b in zip(boxes, boxes[1:]))
