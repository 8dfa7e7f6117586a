"""The ViT study's y (issues #40, #46): a point's mean time per epoch over all its epochs, each
epoch its slowest rank's (vit-deepspeed-scaling.txt, section IV-A: "the model is trained for 5
epochs for all experiments and averaged when plotting the results (time in seconds)"; section
III: "torch.distributed.barrier() ensures that all processes synchronize at the end of each
epoch"), from its trainer's ``epoch_<i>`` breakdown rows; carried by the scaling table
(``epoch_s``) and drawn as ``epoch_time`` beside the time to solution."""

from __future__ import annotations

import polars as pl
import pytest

from campaign.harvest.epochs import with_epoch_times
from campaign.harvest.plots import epoch_time_figure


def test_the_mean_is_over_every_epoch_each_the_slowest_ranks():
    points = pl.DataFrame({"attempt_id": [1, 2, 3], "gpus": [1, 2, 4]})
    # per attempt and epoch: the ranks' seconds (2 ranks on attempt 2)
    ranks = {1: {0: [10.0], 1: [4.0], 2: [6.0]}, 2: {0: [8.0, 9.5], 10: [3.0, 2.5]}}
    rows = [{"attempt_id": a, "phase": f"epoch_{e}", "total_s": sum(ts) / len(ts), "max_total_s": max(ts)}
            for a, epochs in ranks.items() for e, ts in epochs.items()]
    rows += [{"attempt_id": 1, "phase": "forward", "total_s": 99.0, "max_total_s": 99.0},
             {"attempt_id": 3, "phase": "forward", "total_s": 1.0, "max_total_s": 1.0}]
    out = with_epoch_times(points, pl.DataFrame(rows)).sort("attempt_id")
    expected = [sum(max(ts) for ts in ranks[a].values()) / len(ranks[a]) for a in (1, 2)]  # the study's mean
    assert out["epoch_s"].to_list()[:2] == pytest.approx(expected, rel=1e-9)  # (10 + 4 + 6) / 3; (9.5 + 3) / 2
    assert out["epoch_s"][2] is None  # no epoch rows
    assert with_epoch_times(points, None)["epoch_s"].to_list() == [None, None, None]


def test_the_figure_is_drawn_only_where_epochs_were_timed():
    base = {"platform": ["t4", "t4"], "trainer": ["vit", "vit"], "experiment": ["vit_strong"] * 2,
            "dataset": ["cifar10"] * 2, "variant": ["", ""], "image": [None, None], "nodes": [1, 1], "gpus": [1, 2],
            "placement": ["1x1", "1x2"]}
    assert epoch_time_figure(pl.DataFrame({**base, "epoch_s": [None, None]},
                                          schema_overrides={"epoch_s": pl.Float64, "image": pl.Utf8})) is None
    fig = epoch_time_figure(pl.DataFrame({**base, "epoch_s": [4.0, 2.1]}, schema_overrides={"image": pl.Utf8}))
    ys = [list(line.get_ydata()) for line in fig.axes[0].get_lines()]
    assert [4.0, 2.1] in ys


def test_fig_6a_transfer_size_is_in_the_terminal_table():
    """The DataParallel study's Appendix 6a: `campaign harvest --table hardware` shows both counts
    (as it happens, and the text's N/(B x k)) without --to csv/json."""
    from campaign.harvest.tables import TABLES

    assert {"sync_gb_per_epoch", "sync_gb_per_epoch_text"} <= set(TABLES["hardware"].terminal)
