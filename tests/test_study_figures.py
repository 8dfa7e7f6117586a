"""The studies' figures by their own definitions (issue #46): the DataParallel study's timing
figures stack its computation and communication (dataparallel-frozen-backbones-a6000.txt,
section 2 and 4.1: "We measure the average computation time, communication time for each
iteration"), its loss legends name what varies, the reference study's Fig 1 is in hours
(swinv2-ddp-scalability-thesis.txt, section 5.1: "Units for training time are in hours"),
and only its speedup and efficiency carry its equation numbers. Expected values are worked
out here from the rows, never by campaign's code."""

from __future__ import annotations

import polars as pl
import pytest

from campaign.harvest.plots import speedup_figure, time_figure
from campaign.harvest.plots_bars import breakdown_figure
from campaign.harvest.plots_convergence import line_labels, loss_epochs_figure
from campaign.harvest.study_style import STYLES, THESIS, VIT, style_of
from campaign.harvest.study_timing import STUDY_TITLE, timing_stack
from campaign.harvest.views import scaling_table


def _point(aid: int, gpus: int, repeat: int = 0, variant: str = "") -> dict:
    return {"attempt_id": aid, "platform": "a6000", "trainer": "frozen_backbone", "experiment": "dataparallel_study",
            "dataset": "mnist", "variant": variant, "gpus": gpus, "repeat": repeat, "time_s": 1.0}


def test_the_timing_figure_stacks_the_studys_computation_and_communication():
    points = pl.DataFrame([_point(1, 1), _point(2, 4), _point(3, 4, repeat=1), _point(4, 2, variant="engine=ddp")])
    # per attempt: its ranks' mean seconds per iteration (breakdown_query's mean_s)
    study = {1: {"study.compute": 0.080, "study.comm_barrier": 0.001},
             2: {"study.compute": 0.030, "study.comm_barrier": 0.010},
             3: {"study.compute": 0.034, "study.comm_barrier": 0.012}}
    rows = [{"attempt_id": a, "phase": ph, "mean_s": v, "total_s": v * 58} for a, d in study.items() for ph, v in d.items()]
    rows += [{"attempt_id": a, "phase": ph, "mean_s": v, "total_s": v * 58}
             for a in (1, 2, 3, 4) for ph, v in (("forward", 0.02), ("iteration", 0.09))]
    stack = timing_stack(points, pl.DataFrame(rows))
    four = stack.filter((pl.col("gpus") == 4) & (pl.col("variant") == ""))
    got = dict(zip(four["phase"].to_list(), four["per_iteration_s"].to_list()))
    # the mean over the two repeats of each figure: nothing of campaign's phases beside them
    assert got == pytest.approx({"study.compute": (0.030 + 0.034) / 2, "study.comm_barrier": (0.010 + 0.012) / 2},
                                rel=1e-9)
    one = stack.filter(pl.col("gpus") == 1)
    assert one["phase"].to_list() == ["study.compute", "study.comm_barrier"]  # computation below communication
    ddp = stack.filter(pl.col("variant") == "engine=ddp")  # a point that timed no study rows: campaign's phases
    assert set(ddp["phase"]) == {"forward", "iteration"}
    fig = breakdown_figure(stack.filter(pl.col("variant") == ""))
    ax = fig.axes[0]
    assert ax.get_title().startswith(STUDY_TITLE)
    bars = {c.get_label(): [b.get_height() for b in c] for c in ax.containers}
    compute = next(v for k, v in bars.items() if k.startswith("computation"))
    assert compute == pytest.approx([80.0, (30.0 + 34.0) / 2], rel=1e-9)  # ms, 1 then 4 GPUs


def test_loss_legends_name_what_varies_never_an_index():
    rows = pl.DataFrame({"idx": [0, 0, 1, 2], "repeat": [0, 0, 0, 0], "trainer": "frozen_backbone",
                         "experiment": "dataparallel_study", "gpus": 4, "unit": "epoch", "epoch": [0, 1, 0, 0],
                         "loss": [1.0, 0.5, 0.9, 0.8],
                         "variant": ["trainer.params.backbone=vgg16 experiment.global_batch=1024"] * 2
                         + ["trainer.params.backbone=resnet18 experiment.global_batch=1024",
                            "trainer.params.backbone=alexnet experiment.global_batch=1024"],
                         "backbone": ["vgg16", "vgg16", "resnet18", "alexnet"], "test_loss": None},
                        schema_overrides={"test_loss": pl.Float64})
    assert line_labels(rows) == {(0, 0): "backbone=vgg16", (1, 0): "backbone=resnet18", (2, 0): "backbone=alexnet"}
    fig = loss_epochs_figure(rows)
    legend = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert legend == ["backbone=vgg16", "backbone=resnet18", "backbone=alexnet"] and not any("#" in t for t in legend)


def test_the_convergence_table_names_each_points_backbone_and_settings():
    from campaign.harvest.convergence import point_settings

    points = [{"id": 1, "overrides": ["gpus=4"], "config": {"trainer": {"params": {"backbone": "vgg16"}},
                                                           "experiment": {"global_batch": 1024}}},
              {"id": 2, "overrides": ["trainer.params.backbone=resnet18"],
               "config": {"trainer": {"params": {"backbone": "resnet18"}}, "experiment": {"global_batch": 1024}}},
              {"id": 3, "overrides": ["experiment.global_batch=512"],
               "config": {"trainer": {"params": {"backbone": "vgg16"}}, "experiment": {"global_batch": 512}}}]
    s = point_settings(points)
    assert [s[i]["backbone"] for i in (1, 2, 3)] == ["vgg16", "resnet18", "vgg16"]
    # the default point names its defaults (from its config), not nothing
    assert s[1]["variant"] == "trainer.params.backbone=vgg16 experiment.global_batch=1024"
    assert s[3]["variant"] == "trainer.params.backbone=vgg16 experiment.global_batch=512"


def _scaling(times: dict[int, float]) -> pl.DataFrame:
    return scaling_table(pl.DataFrame([{"platform": "a100", "trainer": "swinv2_upernet", "experiment": "weak_scaling",
                                        "dataset": "ade20k", "variant": "", "gpus": n, "repeat": 0, "time_s": t,
                                        "batch_per_gpu": 8, "iterations": 160 // n, "images": 160 * 8}
                                       for n, t in times.items()]))


def test_the_reference_studys_fig_1_is_in_hours_and_only_it_numbers_its_equations():
    times = {1: 30 * 3600.0, 2: 22 * 3600.0, 4: 21 * 3600.0}  # "no training job shorter than one day"
    thesis = [{"state": "completed", "config": {"study": {"text": THESIS}}}] * 2
    style = style_of(thesis)
    assert style is STYLES[THESIS]
    fig = time_figure(_scaling(times), style=style)
    ax = fig.axes[0]
    assert ax.get_ylabel() == "training time (hours)"
    measured = next(line for line in ax.get_lines() if line.get_label() not in ("", "ideal T(1)/N"))
    assert list(measured.get_ydata()) == pytest.approx([t / 3600 for t in times.values()], rel=1e-9)
    assert speedup_figure(_scaling(times), style=style).axes[0].get_title() == "Speedup (eq. 3.1)"
    vit = style_of([{"state": "completed", "config": {"study": {"text": VIT}}}])
    assert "eq." not in speedup_figure(_scaling(times), style=vit).axes[0].get_title()
    assert "eq." not in speedup_figure(_scaling(times)).axes[0].get_title()  # no study: no equation number
    assert style_of(thesis + [{"state": "completed", "config": {}}]).time_unit == "s"  # a mix: plain
