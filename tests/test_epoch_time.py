"""The ViT study's y (issue #40): a point's mean time per epoch, the first epoch (warm-up and
start-up in it) apart, from its trainer's ``epoch_<i>`` breakdown rows; carried by the
scaling table (``epoch_s``) and drawn as ``epoch_time`` beside the time to solution."""

from __future__ import annotations

import polars as pl

from campaign.harvest.plots import epoch_time_figure
from campaign.harvest.run import with_epoch_times


def test_the_mean_leaves_the_first_epoch_out():
    points = pl.DataFrame({"attempt_id": [1, 2, 3], "gpus": [1, 2, 4]})
    phases = pl.DataFrame({"attempt_id": [1, 1, 1, 1, 2, 2, 3],
                           "phase": ["epoch_0", "epoch_1", "epoch_2", "forward", "epoch_0", "epoch_10", "forward"],
                           "total_s": [10.0, 4.0, 6.0, 99.0, 8.0, 3.0, 1.0]})
    out = with_epoch_times(points, phases).sort("attempt_id")
    assert out["epoch_s"].to_list() == [5.0, 3.0, None]  # (4 + 6) / 2; epoch 10 alone; no epoch rows
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
