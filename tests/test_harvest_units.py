"""Known-answer tests of the harvest's tables, statistics, projection, references and
figures on frames built by hand (no jobs; the real-store tests are test_harvest_sleep.py
and test_harvest_repeats.py)."""

from __future__ import annotations

import polars as pl
import pytest

from campaign.common.errors import ConfigError
from campaign.harvest.compare import compare_campaigns, compare_ideal
from campaign.harvest.projection import project_points
from campaign.harvest.references import compare_reference, load_reference, reference_figures, reference_omissions
from campaign.harvest.run import parse_where
from campaign.harvest.stats import olympic_mean
from campaign_window import window_interval
from campaign.harvest.utilisation import breakdown_table, phase_stack, utilisation_table
from campaign.harvest.views import scaling_table, throughput_table


def _points(times: dict[int, list[float]], platform="v100", batch=lambda n: 8, iters=lambda n: 160 // n, **extra):
    rows = []
    for gpus, ts in times.items():
        for rep, t in enumerate(ts):
            rows.append({"platform": platform, "trainer": "synthetic", "experiment": "weak_scaling", "variant": "",
                         "gpus": gpus, "repeat": rep, "time_s": t, "batch_per_gpu": batch(gpus),
                         "iterations": iters(gpus), "timed_iterations": iters(gpus),
                         "images": batch(gpus) * gpus * iters(gpus), "iter_median_s": t / iters(gpus), **extra})
    return pl.DataFrame(rows)


def test_the_two_views_are_named_apart_and_agree_when_images_are_the_same():
    p = _points({1: [160.0], 2: [100.0], 4: [80.0]})
    s, t = scaling_table(p), throughput_table(p)
    assert set(s["view"]) == {"time-to-solution"} and set(t["view"]) == {"throughput"}
    assert s["speedup"].to_list() == pytest.approx([1.0, 1.6, 2.0])
    assert s["ideal_time_s"].to_list() == pytest.approx([160.0, 80.0, 40.0])
    # weak scaling, same images: throughput speedup = time speedup; ideal images/s per GPU constant
    assert t["throughput_speedup"].to_list() == pytest.approx([1.0, 1.6, 2.0])
    assert t["ideal_images_per_s_per_gpu"].to_list() == pytest.approx([8.0] * 3)
    assert t["ideal_iter_s"].to_list() == pytest.approx([1.0] * 3)  # fixed batch per GPU: constant iteration
    assert s["note"].to_list() == ["", "", ""]


def test_strong_scaling_maps_onto_the_same_machinery():
    p = _points({1: [100.0], 4: [40.0]}, batch=lambda n: 64 // n, iters=lambda n: 10)
    s, t = scaling_table(p), throughput_table(p)
    assert s["speedup"].to_list() == pytest.approx([1.0, 2.5]) and s["note"].to_list() == ["", ""]
    assert t["ideal_iter_s"].to_list() == pytest.approx([10.0, 2.5])  # fixed global batch: T_iter(1)/N
    assert t["throughput_speedup"].to_list() == pytest.approx([1.0, 2.5])


def test_fixed_iterations_with_more_images_is_not_called_a_time_to_solution():
    p = _points({1: [10.0], 2: [11.0]}, iters=lambda n: 10)
    s, t = scaling_table(p), throughput_table(p)
    two = s.filter(pl.col("gpus") == 2).row(0, named=True)
    assert "not a time to solution" in two["note"] and "no speedup or efficiency" in two["note"]
    # T(1)/T(N) of different work is no speedup: absent, never a number to misread
    assert two["speedup"] is None and two["efficiency"] is None and two["ideal_time_s"] is None
    assert two["time_s"] == 11.0 and s.filter(pl.col("gpus") == 1)["speedup"][0] == 1.0
    assert t.filter(pl.col("gpus") == 2)["throughput_speedup"][0] == pytest.approx(2 * 10.0 / 11.0)


def test_repeat_statistics_median_spread_and_olympic_mean():
    p = _points({1: [10.0, 12.0, 11.0, 30.0, 9.0], 2: [6.0, 5.0, 7.0]})
    s = scaling_table(p)
    one, two = s.row(0, named=True), s.row(1, named=True)
    assert one["repeats"] == 5 and one["time_s"] == 11.0 and one["time_min_s"] == 9.0 and one["time_max_s"] == 30.0
    assert one["time_iqr_s"] == pytest.approx(12.0 - 10.0)
    assert one["time_rel_range"] == pytest.approx((30.0 - 9.0) / 11.0)
    assert one["time_olympic_s"] == pytest.approx((10 + 12 + 11) / 3) == olympic_mean([10, 12, 11, 30, 9])
    assert two["time_olympic_s"] is None and olympic_mean([6, 5, 7]) is None  # K < 5: absent, not guessed
    assert two["speedup"] == pytest.approx(11.0 / 6.0)  # from the medians


def test_projection_scales_the_window_and_bounds_it():
    p = _points({1: [2.0]}, iters=lambda n: 10).with_columns(
        pl.lit(1000).alias("iterations"), pl.lit(1).alias("attempt_id"), pl.lit(0.5).alias("warmup_s"))
    xs = [0.19, 0.21, 0.2, 0.2, 0.18, 0.22, 0.2, 0.2, 0.19, 0.21]
    iters = pl.DataFrame({"attempt_id": [1] * 10, "iter": list(range(10)), "iter_s": xs})
    row = project_points(p, iters).row(0, named=True)
    assert row["projected"] and row["sampled_time_s"] == 2.0
    assert row["time_s"] == pytest.approx(2.0 / 10 * 1000)
    # the window's interval (campaign_window: 10 batches of 1, t with 9 degrees of freedom), the
    # full run's own noise over its 1,000 iterations included
    half = window_interval(xs, 1000).halfwidth
    sd = (sum((x - 0.2) ** 2 for x in xs) / 9) ** 0.5
    assert half == pytest.approx(2.262 * (sd / 10**0.5) * (1 + 10 / 1000) ** 0.5 / 0.2)
    assert row["time_lo_s"] == pytest.approx(200.0 * (1 - half)) and row["time_hi_s"] == pytest.approx(200.0 * (1 + half))
    assert row["gpu_hours"] == pytest.approx((200.0 + 0.5) * 1 / 3600)  # no start-up recorded: none counted
    assert row["sample_gpu_hours"] == pytest.approx((2.0 + 0.5) * 1 / 3600)
    s = scaling_table(project_points(p, iters)).row(0, named=True)
    assert s["projected"] and s["note"] == "projected from 10 of 1000 iterations"


def test_projection_measures_the_transient_and_leaves_the_checks_out():
    """A data-chosen window (trainers/sampling.py): iterations W..D-1 were warm-up to the
    sample but are in a full run's window, so their measured seconds are added as they
    are; the seconds the job spent deciding inside the window are taken out; start-up
    and warm-up are paid by both runs."""
    p = _points({1: [2.1]}, iters=lambda n: 10).with_columns(
        pl.lit(1000).alias("iterations"), pl.lit(1).alias("attempt_id"), pl.lit(3.0).alias("warmup_s"),
        pl.lit(1.5).alias("sample_transient_s"), pl.lit(5).alias("sample_transient_iterations"),
        pl.lit(0.1).alias("sample_check_s"), pl.lit(4.0).alias("startup_s"))
    xs = [0.2] * 10
    row = project_points(p, pl.DataFrame({"attempt_id": [1] * 10, "iter_s": xs})).row(0, named=True)
    assert row["time_s"] == pytest.approx(1.5 + (2.1 - 0.1) / 10 * (1000 - 5))
    assert row["time_lo_s"] == pytest.approx(row["time_s"]) == row["time_hi_s"]  # no spread: no width
    # the full run: start-up + its own warm-up (the sample's less the transient) + training
    assert row["gpu_hours"] == pytest.approx((4.0 + (3.0 - 1.5) + row["time_s"]) / 3600)
    assert row["sample_gpu_hours"] == pytest.approx((4.0 + 3.0 + 2.1) / 3600)


def test_a_full_run_is_not_projected():
    p = _points({1: [2.0]}).with_columns(pl.lit(1).alias("attempt_id"), pl.lit(0.0).alias("warmup_s"))
    row = project_points(p, None).row(0, named=True)
    assert not row["projected"] and row["time_s"] == 2.0 and row["time_lo_s"] is None


def test_absent_utilisation_and_phases_stay_absent():
    p = _points({1: [10.0]}, data_wait_s=1.0, compute_s=8.0)
    u = utilisation_table(p).row(0, named=True)
    assert u["gpu_util"] is None and u["cpu_util"] is None and u["comm_share"] is None
    assert u["note"] == "no profiler window (experiment.profile_iterations=0)"
    b = breakdown_table(p)
    comm = b.filter((pl.col("source") == "timed window") & (pl.col("phase") == "communication")).row(0, named=True)
    assert comm["seconds"] is None and comm["share"] is None
    data = b.filter(pl.col("phase") == "data wait").row(0, named=True)
    assert data["seconds"] == 1.0 and data["share"] == pytest.approx(0.1)


def test_engine_phases_join_the_breakdown():
    p = _points({1: [10.0]}).with_columns(pl.lit(7).alias("attempt_id"))
    eng = pl.DataFrame({"attempt_id": [7], "phase": ["deepspeed.fwd"], "total_s": [3.0], "mean_s": [0.3],
                        "count": [10], "share": [0.3]})
    row = breakdown_table(p, eng).filter(pl.col("source") == "phases").row(0, named=True)
    assert row["phase"] == "deepspeed.fwd" and row["seconds"] == 3.0 and row["share"] == 0.3


def test_reference_dataset_encodes_exactly_the_stated_figures_with_their_source():
    figs = reference_figures()
    got = {(r["kind"], r["platform"], r["baseline_platform"], r["from_gpus"], r["gpus"], r["value"], r["average_over"])
           for r in figs.iter_rows(named=True)}
    assert got == {
        ("relative_time_change", "all", None, 1, 2, -0.26, "platforms: all"),
        ("speedup", "all", None, None, 2, 1.4, "platforms: all"),
        ("speedup", "V100", None, None, 2, 1.43, None), ("speedup", "V100", None, None, 4, 1.46, None),
        ("speedup", "A100 PCIe", None, None, 2, 1.75, None), ("speedup", "A100 PCIe", None, None, 4, 1.80, None),
        ("speedup", "A100 NVLINK", None, None, 2, 1.17, None),
        ("efficiency_upper_bound", "all", None, None, 4, 0.5, None),
        ("relative_time_change", "A100 NVLINK", None, 4, 8, -0.029, "platforms: A100 NVLINK 40 GB, A100 NVLINK 80 GB"),
        ("relative_time_platform", "A100 NVLINK 80 GB", "A100 NVLINK 40 GB", None, None, -0.04,
         "GPU counts: not stated (those both platforms ran)"),
        ("relative_time_platform", "A100 PCIe", "V100", None, None, -0.24, "GPU counts: 1, 2, 4"),
        ("relative_time_platform", "A100 NVLINK 80 GB", "A100 PCIe", None, 1, -0.39, None),
        ("relative_time_platform", "A100 NVLINK 40 GB", "A100 PCIe", None, 1, -0.34, None),
    }
    ref = load_reference()
    assert {k: v for k, v in ref["schedule"].items() if k != "source"} == {
        "scaling": "weak", "images_per_gpu": 8, "base_iterations": 160000}
    assert ref["source"]["url"] == "http://d-scholarship.pitt.edu/44738/" and "Garrett" in ref["source"]["citation"]
    # every figure says where it is stated and quotes the sentence (tests/test_reference_study.py
    # finds each in the study's full text)
    src = dict(zip(figs["id"], figs["source"]))
    assert src["time_1_to_2"] == ("Garrett 2023 (Master's thesis, University of Pittsburgh); abstract (and sections "
                                  "5.1 and 6.0); \"For all computing platforms, training on 2 GPUs is 26% faster on "
                                  "average when compared to single GPU training.\"")
    assert src["efficiency_4_below_half"] == ("Garrett 2023 (Master's thesis, University of Pittsburgh); section 5.2; "
                                              "\"It is of note that at 4 GPUs, all platforms achieve sub-0.5 parallel "
                                              "efficiency.\"")
    assert all("not known" not in text and text.count("\"") == 2 for text in src.values())
    # what is left out, and why
    (omitted,) = reference_omissions()
    assert [v["value"] for v in omitted["values"]] == [0.013, 0.019] and "twice with different values" in omitted["reason"]


def test_reference_comparison_matches_platforms_and_n():
    s = scaling_table(pl.concat([_points({1: [100.0], 2: [70.0], 4: [68.0]}, "v100"),
                                 _points({1: [76.0], 2: [43.0], 4: [42.0]}, "a100")]))
    c = compare_reference(s)
    v100_2 = c.filter((pl.col("figure") == "speedup_v100_2") & (pl.col("platform") == "v100")).row(0, named=True)
    assert v100_2["platform_match"] and v100_2["measured"] == pytest.approx(100 / 70)
    assert v100_2["difference"] == pytest.approx(100 / 70 - 1.43) and v100_2["ideal"] == 2.0
    assert v100_2["average_over"] is None and v100_2["source"].startswith("Garrett 2023")
    assert not c.filter((pl.col("figure") == "speedup_v100_2") & (pl.col("platform") == "a100"))["platform_match"][0]
    bound = c.filter((pl.col("figure") == "efficiency_4_below_half") & (pl.col("platform") == "v100")).row(0, named=True)
    assert bound["holds"] is True and bound["measured"] == pytest.approx(100 / 68 / 4)
    # an average over GPU counts against the campaign's average over the counts both ran: one row
    (pair,) = c.filter(pl.col("figure") == "a100_pcie_vs_v100").iter_rows(named=True)
    assert pair["gpus"] is None and pair["average_over"] == "GPU counts: 1, 2, 4"
    assert pair["measured"] == pytest.approx((76 / 100 - 1 + 43 / 70 - 1 + 42 / 68 - 1) / 3)
    # averages over platforms: the campaign's mean over its series (here v100 and a100)
    (avg,) = c.filter(pl.col("figure") == "time_1_to_2").iter_rows(named=True)
    assert avg["measured"] == pytest.approx((70 / 100 - 1 + 43 / 76 - 1) / 2) and avg["platform"] == "a100,v100"
    assert avg["average_over"] == "series: a100, v100" and avg["ideal"] == -0.5
    (speedup,) = c.filter(pl.col("figure") == "speedup_2_average").iter_rows(named=True)
    assert speedup["measured"] == pytest.approx((100 / 70 + 76 / 43) / 2) and speedup["reference"] == 1.4
    missing = c.filter(pl.col("figure") == "nvlink_80_vs_40").row(0, named=True)
    assert missing["measured"] is None and "measured in this campaign" in missing["note"]
    eight = c.filter(pl.col("figure") == "time_4_to_8_nvlink").row(0, named=True)
    assert eight["measured"] is None and "needs A100 NVLINK measured" in eight["note"]


def test_reference_averages_over_node_types_and_a_one_gpu_platform_figure():
    s = scaling_table(pl.concat([
        _points({1: [50.0], 4: [20.0], 8: [19.0]}, "a100_nvlink_40"),
        _points({1: [46.0], 4: [18.0], 8: [17.6]}, "a100_nvlink_80"),
        _points({1: [80.0], 4: [30.0]}, "a100"),
    ]))
    c = compare_reference(s)
    (eight,) = c.filter(pl.col("figure") == "time_4_to_8_nvlink").iter_rows(named=True)
    assert eight["measured"] == pytest.approx((19 / 20 - 1 + 17.6 / 18 - 1) / 2)  # mean over both node types
    assert eight["average_over"] == "series: a100_nvlink_40, a100_nvlink_80" and eight["ideal"] == -0.5
    (one,) = c.filter(pl.col("figure") == "nvlink_80_vs_pcie_1").iter_rows(named=True)
    assert one["gpus"] == 1 and one["measured"] == pytest.approx(46 / 80 - 1) and one["reference"] == -0.39
    (avg,) = c.filter(pl.col("figure") == "nvlink_80_vs_40").iter_rows(named=True)
    assert avg["measured"] == pytest.approx((46 / 50 - 1 + 18 / 20 - 1 + 17.6 / 19 - 1) / 3)
    assert avg["average_over"] == "GPU counts: 1, 4, 8"


def test_ideal_comparison_and_campaign_comparison_on_disjoint_platforms():
    a = _points({1: [100.0], 2: [70.0]}, "v100")
    b = _points({1: [76.0], 2: [43.0]}, "a100")
    ideal = compare_ideal(scaling_table(a), throughput_table(a))
    sp = ideal.filter((pl.col("metric") == "speedup") & (pl.col("gpus") == 2)).row(0, named=True)
    assert sp["reference"] == 2.0 and sp["difference"] == pytest.approx(100 / 70 - 2)
    c = compare_campaigns((scaling_table(b), throughput_table(b)), (scaling_table(a), throughput_table(a)), "old")
    t2 = c.filter((pl.col("metric") == "time_s") & (pl.col("gpus") == 2)).row(0, named=True)
    assert t2["platform"] == "a100" and t2["other_platform"] == "v100"  # disjoint key: shown, not matched on
    assert t2["relative"] == pytest.approx(43 / 70 - 1) and t2["other_campaign"] == "old"


def test_platform_comparison_figure_has_four_labelled_panels():
    from campaign.harvest.plots import platform_comparison_figure, speedup_figure

    p = pl.concat([_points({1: [100.0], 2: [70.0]}, "v100", gpu_util=0.7, cpu_util=0.2, profile_iterations=8,
                           profile_cpu_total_s=3.0, profile_device_total_s=1.0),
                   _points({1: [76.0], 2: [43.0]}, "a100", gpu_util=0.8, cpu_util=0.3, profile_iterations=8,
                           profile_cpu_total_s=1.0, profile_device_total_s=1.0)])
    s, u = scaling_table(p), utilisation_table(p)
    fig = platform_comparison_figure(s, u)
    # the reference study's Figs 6-8: its utilisation panels are eq. 3.3, CUDA / (CPU + CUDA time totals)
    assert [ax.get_ylabel() for ax in fig.axes] == ["speedup T(1)/T(N) (×)", "parallel efficiency (%)",
                                                    "GPU utilisation, eq. 3.3 (%)", "CPU utilisation, eq. 3.3 (%)"]
    heights = {ax.get_ylabel(): sorted(b.get_height() for b in ax.patches) for ax in fig.axes}
    assert heights["GPU utilisation, eq. 3.3 (%)"] == pytest.approx([1 / 4 * 100] * 2 + [1 / 2 * 100] * 2, rel=1e-9)
    assert heights["CPU utilisation, eq. 3.3 (%)"] == pytest.approx([1 / 2 * 100] * 2 + [3 / 4 * 100] * 2, rel=1e-9)
    assert all(ax.get_xlabel() == "GPUs (N)" for ax in fig.axes)
    assert [t.get_text() for t in fig.axes[0].get_legend().get_texts()] == ["a100", "v100"]
    assert platform_comparison_figure(s.filter(pl.col("platform") == "v100"), u) is None
    legend = [t.get_text() for t in speedup_figure(s).axes[0].get_legend().get_texts()]
    assert legend == ["a100", "v100", "ideal (S = N)"]


def test_where_filters_are_checked_and_typed():
    assert parse_where(["gpus=1,2", "platform=v100"], {"trainer": ["sleep"]}) == {
        "trainer": ["sleep"], "gpus": [1, 2], "platform": ["v100"]}
    with pytest.raises(ConfigError, match="NAME one of platform, trainer, experiment, gpus, nodes, dataset"):
        parse_where(["colour=red"])
    with pytest.raises(ConfigError, match="gpus takes integers"):
        parse_where(["gpus=two"])


def test_where_image_takes_prefixes_paths_and_none():
    assert parse_where(["image=3F2A9C1B,none", "image=/img/a b.sif"]) == {"image": ["3F2A9C1B", "none", "/img/a b.sif"]}


def _phases(attempt: int, **mean_s: float) -> list[dict]:
    return [{"attempt_id": attempt, "phase": p, "total_s": m * 10, "mean_s": m, "p95_s": m, "count": 10, "share": None}
            for p, m in mean_s.items()]


def _bars(ax) -> dict[tuple[str, str], tuple[float, float]]:
    """(tick label, legend label) -> (bottom, height) of every drawn bar segment, in ms to 1 ns."""
    ticks = [t.get_text() for t in ax.get_xticklabels()]
    return {(ticks[round(r.get_x() + r.get_width() / 2)], c.get_label()): (round(r.get_y(), 6), round(r.get_height(), 6))
            for c in ax.containers for r in c.patches}


def test_breakdown_figure_stacks_the_disjoint_phases_and_only_those():
    from campaign.harvest.plots_bars import breakdown_figure

    # 1 GPU: two repeats (means over them), no all-reduce; 2 GPUs: DDP's split of backward, no step recorded
    p = _points({1: [10.0, 10.0], 2: [8.0]}).with_columns(pl.Series("attempt_id", [1, 2, 3]))
    eng = pl.DataFrame(
        _phases(1, data=0.010, forward=0.30, backward=0.50, step=0.10, iteration=0.91)
        + _phases(2, data=0.010, forward=0.40, backward=0.50, step=0.10, iteration=1.01)
        + _phases(3, data=0.020, forward=0.30, backward=0.70, backward_compute=0.45, comm_exposed=0.25, comm=0.60,
                  iteration=1.02, **{"deepspeed.fwd": 0.3}))
    stack = phase_stack(p, eng)
    got = {(r["gpus"], r["phase"]): r["per_iteration_s"] for r in stack.iter_rows(named=True)}
    assert got == pytest.approx({
        (1, "data"): 0.010, (1, "forward"): 0.35, (1, "backward"): 0.50, (1, "step"): 0.10, (1, "iteration"): 0.96,
        (2, "data"): 0.020, (2, "forward"): 0.30, (2, "backward_compute"): 0.45, (2, "comm_exposed"): 0.25,
        (2, "iteration"): 1.02})  # comm overlaps backward, backward holds the split: neither is stacked
    ax = breakdown_figure(stack).axes[0]
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("GPUs (N)", "time per iteration (ms)")
    assert [t.get_text() for t in ax.get_xticklabels()] == ["1", "2"]
    assert _bars(ax) == {
        ("1", "data wait"): (0.0, 10.0), ("1", "forward"): (10.0, 350.0),
        ("1", "backward (no all-reduce timed)"): (360.0, 500.0), ("1", "optimizer step"): (860.0, 100.0),
        ("2", "data wait"): (0.0, 20.0), ("2", "forward"): (20.0, 300.0), ("2", "backward compute"): (320.0, 450.0),
        ("2", "exposed communication (not hidden by backward)"): (770.0, 250.0)}  # no step at 2: no segment
    (tick,) = ax.lines  # the measured iteration beside its stack
    assert list(tick.get_ydata()) == pytest.approx([960.0, 1020.0])
    assert [t.get_text() for t in ax.get_legend().get_texts()] == [  # top of the stack first
        "iteration (measured)", "optimizer step", "exposed communication (not hidden by backward)",
        "backward compute", "backward (no all-reduce timed)", "forward", "data wait"]


def test_breakdown_figure_without_rows_says_so():
    from campaign.harvest.plots_bars import breakdown_figure

    p = _points({1: [10.0]}).with_columns(pl.lit(1).alias("attempt_id"))
    for eng in (None, pl.DataFrame(_phases(1, **{"deepspeed.fwd": 0.3}))):
        ax = breakdown_figure(phase_stack(p, eng)).axes[0]
        assert not ax.containers and [t.get_text() for t in ax.texts] == ["no breakdown recorded"]


def test_points_of_different_images_are_never_one_series():
    from campaign.harvest.plots import time_figure

    a, b = "a" * 12, "b" * 12
    p = pl.concat([_points({1: [100.0], 2: [60.0]}, image=a), _points({1: [80.0], 2: [40.0]}, image=b),
                   _points({2: [50.0]}, image=None)], how="vertical_relaxed")
    s, t = scaling_table(p), throughput_table(p)
    speedup = {(r["image"], r["gpus"]): r["speedup"] for r in s.iter_rows(named=True)}
    assert speedup == pytest.approx({(a, 1): 1.0, (a, 2): 100 / 60, (b, 1): 1.0, (b, 2): 2.0, (None, 2): None})
    assert s.filter(pl.col("image").is_null())["note"].to_list() == ["no 1-GPU baseline"]  # not image a's or b's
    assert t.filter((pl.col("image") == b) & (pl.col("gpus") == 2))["throughput_speedup"][0] == pytest.approx(2.0)
    legend = [x.get_text() for x in time_figure(s).axes[0].get_legend().get_texts()]
    assert legend == ["image none", f"image {a}", f"image {b}", "ideal T(1)/N"]
    # across campaigns: other images are shown beside each other, never matched on
    this, other = p.filter(pl.col("image") == b), p.filter(pl.col("image") == a)
    c = compare_campaigns((scaling_table(this), throughput_table(this)), (scaling_table(other), throughput_table(other)),
                          "old")
    row = c.filter((pl.col("metric") == "time_s") & (pl.col("gpus") == 2)).row(0, named=True)
    assert (row["image"], row["other_image"], row["relative"]) == (b, a, pytest.approx(40 / 60 - 1))
    same = compare_campaigns((scaling_table(this), throughput_table(this)), (scaling_table(this), throughput_table(this)),
                             "again")
    assert "other_image" not in same.columns and set(same["image"]) == {b}


def test_hardware_table_medians_units_and_what_is_missing():
    from campaign.harvest.hardware import COLUMNS, hardware_table

    base = {"precision": "bf16", "math": "bf16", "peak_tflops": 312.0, "peak_memory_source": "cuda_max_memory_allocated",
            "trainable_params": 1_000_000}
    p = pl.concat([
        _points({1: [10.0]}, achieved_tflops=100.0, mfu=100 / 312, peak_memory_bytes=2e9,
                warmup_peak_memory_bytes=5e9, **base),
        _points({2: [6.0, 7.0, 8.0]}, achieved_tflops=90.0, mfu=90 / 312, peak_memory_bytes=3e9,
                allreduce_bytes_per_iter=4e6, allreduce_busbw_gbs=150.0, interconnect_bandwidth_gbs=600.0,
                allreduce_busbw_fraction=0.25, exposed_comm_s=0.8, sync_bytes_per_epoch=4e9, **base),
        _points({4: [5.0]}, achieved_tflops=80.0, mfu=None, peak_memory_bytes=3e9, **dict(base, peak_tflops=None)),
    ], how="diagonal_relaxed")
    t = hardware_table(p)
    assert t.columns == COLUMNS
    one, two, four = t.rows(named=True)
    assert two["repeats"] == 3 and two["mfu"] == pytest.approx(90 / 312)
    assert two["allreduce_mb_per_iter"] == 4.0 and two["busbw_gbs"] == 150.0
    # of one direction (600 GB/s is both together: 300 each way), whatever the job stored (0.25: over both)
    assert two["busbw_fraction"] == 0.5 and two["interconnect_gbs"] == 600.0
    assert two["exposed_comm_ms"] == pytest.approx(0.8 / 80 * 1e3)  # per timed iteration (160/2)
    assert two["sync_gb_per_epoch"] == 4.0 and two["peak_memory_gb"] == 3.0 and two["note"] == ""
    assert one["warmup_peak_memory_gb"] == 5.0 and two["warmup_peak_memory_gb"] is None and one["math"] == "bf16"
    assert one["allreduce_mb_per_iter"] is None and one["note"] == ""  # one GPU: nothing to all-reduce, nothing amiss
    assert four["mfu"] is None
    assert four["note"] == ("no MFU: the platform states no peak for this math; "
                            "all-reduce not timed by the hook (engine's own communication)")


def test_hardware_figure_draws_mfu_and_bus_bandwidth_or_says_what_is_missing():
    from campaign.harvest.hardware import hardware_table
    from campaign.harvest.plots_bars import hardware_figure

    p = pl.concat([_points({1: [10.0]}, achieved_tflops=100.0, peak_tflops=312.0, mfu=0.32),
                   _points({2: [6.0]}, achieved_tflops=90.0, peak_tflops=312.0, mfu=0.29,
                           allreduce_busbw_gbs=150.0)], how="diagonal_relaxed")
    mfu_ax, bw_ax = hardware_figure(hardware_table(p)).axes
    (line,) = mfu_ax.get_lines()
    assert list(line.get_xdata()) == [1, 2] and list(line.get_ydata()) == pytest.approx([32.0, 29.0])
    (line,) = bw_ax.get_lines()
    assert list(line.get_xdata()) == [2] and list(line.get_ydata()) == [150.0]
    empty = hardware_figure(hardware_table(_points({1: [10.0]}))).axes
    assert [t.get_text() for t in empty[0].texts] == ["no model flops utilisation recorded"]


def test_the_terminal_and_markdown_tables_keep_small_figures_significant():
    """4 decimals from 1 up, 4 significant digits below: a time per image of 1.9e-5 s at
    20,000 images/s is not 0.0 (review of 2026-11-26: it printed 0.0, and 5e-5 as 0.0001)."""
    from campaign.harvest.export import FORMATS

    df = pl.DataFrame({"t_image_s": [5e-5, 3e-5, 1.9e-5, 1.3e-5], "speedup": [1.0, 1.98765432, 3.9, 7.123456],
                       "gpu_hours": [0.00416667, 0.0042, 0.12345678, 1234.56789]})
    md = FORMATS["markdown"].writer(df).decode()
    for text in ("5e-05", "3e-05", "1.9e-05", "1.3e-05", "1.9877", "7.1235", "0.004167", "0.1235", "1234.57"):  # tabulate: 6 significant
        assert text in md, (text, md)
    assert "| 0 " not in md and "0.0001 " not in md


def test_the_platform_comparison_keeps_placements_apart():
    """4 GPUs as 1x4 (speedup 2.5) and as 2x2 (1.25) are two bars, never their median 1.875
    (review of 2026-11-26); the axis names the 2x2 bar by its placement."""
    from campaign.harvest.plots import platform_comparison_data, platform_comparison_figure
    from campaign.report.svg import platform_comparison_figure as svg_figure

    p = pl.concat([_points({1: [100.0], 4: [40.0]}, "v100", nodes=1), _points({4: [80.0]}, "v100", nodes=2),
                   _points({1: [80.0], 4: [25.0]}, "a100", nodes=1)], how="diagonal_relaxed")
    s, u = scaling_table(p), utilisation_table(p)
    d = platform_comparison_data(s, u)
    bars = {(r["platform"], r["where"]): r["speedup"] for r in d.iter_rows(named=True)}
    assert bars == {("v100", "1"): pytest.approx(1.0), ("v100", "4"): pytest.approx(2.5),
                    ("v100", "2x2"): pytest.approx(1.25), ("a100", "1"): pytest.approx(1.0),
                    ("a100", "4"): pytest.approx(3.2)}
    ax = platform_comparison_figure(s, u).axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["1", "4", "2x2"]
    assert ax.get_xlabel() == "GPUs (N), or nodes x GPUs per node"
    svg = svg_figure(s, u)
    assert 'data-gpus="4" data-placement="2x2" data-v="1.25"' in svg and 'data-v="1.875"' not in svg
    assert 'data-gpus="4" data-placement="1x4" data-v="2.5"' in svg
    assert ">GPUs (N), or nodes x GPUs per node</text>" in svg  # the PNG's axis label


def test_reference_figures_leave_out_a_series_of_other_work():
    """A fixed schedule (the same 100 iterations at 8 images per GPU: 2 GPUs train twice the
    images) is no time to solution: the study's "-26 % from 1 to 2 GPUs" is not compared with
    its T(2)/T(1) - 1 (+10 %), and its speedup is not called unmeasured (review of 2026-11-26)."""
    fixed = _points({1: [100.0], 2: [110.0]}, "v100", iters=lambda n: 100)
    c = compare_reference(scaling_table(fixed))
    (avg,) = c.filter(pl.col("figure") == "time_1_to_2").iter_rows(named=True)
    assert avg["measured"] is None and avg["note"] == "this series is not the study's same-images schedule (v100)"
    (speedup,) = c.filter(pl.col("figure") == "speedup_2_average").iter_rows(named=True)
    assert speedup["measured"] is None and "not measured" not in speedup["note"]
    (v100_2,) = c.filter(pl.col("figure") == "speedup_v100_2").iter_rows(named=True)
    assert v100_2["measured"] is None and v100_2["note"] == "this series is not the study's same-images schedule"
    # beside a weak-scaling series on another platform: the mean is that series' alone, and says what it left out
    weak = _points({1: [76.0], 2: [43.0]}, "a100")
    (avg,) = compare_reference(scaling_table(pl.concat([fixed, weak]))).filter(
        pl.col("figure") == "time_1_to_2").iter_rows(named=True)
    assert avg["measured"] == pytest.approx(43 / 76 - 1) and avg["platform"] == "a100"
    assert "left out: v100 (this series is not the study's same-images schedule)" in avg["note"]


def test_the_profile_window_comm_shares_are_of_its_total_time_median_over_repeats():
    """profile_comm_share = all-reduce time / profiled window, exposed_comm_share = the part
    no compute hid / the window; medians over repeats; none without a window (review of
    2026-11-26: no test pinned either)."""
    p = pl.concat([_points({2: [t]}, profile_iterations=8, profile_total_s=total, profile_comm_s=comm,
                           profile_exposed_comm_s=exposed, profile_cpu_total_s=1.0,
                           profile_device_total_s=total * 0.75)
                   for t, total, comm, exposed in ((10.0, 2.0, 0.5, 0.1), (11.0, 2.0, 0.4, 0.2), (12.0, 4.0, 2.0, 0.2))])
    u = utilisation_table(p).row(0, named=True)
    assert u["profile_comm_share"] == pytest.approx(0.25)  # median of 0.25, 0.2, 0.5
    assert u["exposed_comm_share"] == pytest.approx(0.05)  # median of 0.05, 0.1, 0.05
    assert u["exposed_comm_share"] <= u["profile_comm_share"] <= 1
    assert u["gpu_util_study"] + u["cpu_util_study"] == pytest.approx(1.0)
    none = utilisation_table(_points({2: [10.0]}, profile_total_s=0.0, profile_comm_s=0.0)).row(0, named=True)
    assert none["profile_comm_share"] is None and none["exposed_comm_share"] is None
