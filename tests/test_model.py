"""The fitted scaling model (campaign/harvest/model.py) on hand-built point frames with a
known law: t(N) = a + b/N + c*log2(N) + d*(N-1)/N^2 seconds per image (a fixed batch per
GPU, so the ring term's per-image shape is (N-1)/N^2; docs/model.md)."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from campaign.harvest.model import fit_model, model_table

LAW = (0.002, 0.012, 0.001, 0.004)  # a, b, c, d
BATCH = 8


def law(n, a, b, c, d):
    return a + b / n + c * np.log2(n) + d * (n - 1) / n ** 2


def frame(ns, coef, reps=1, noise=0.0, seed=0, nodes=1):
    """Weak scaling (1000/N iterations of 8 images per GPU): every N trains 8000 images."""
    rng = np.random.default_rng(seed)
    rows = []
    for n in ns:
        it = 1000 // n
        for _ in range(reps):
            t = law(n, *coef) * (1 + noise * rng.standard_normal())
            rows.append(dict(platform="local", trainer="sleep", experiment="weak", variant="", image=None,
                             nodes=nodes, gpus=n, batch_per_gpu=BATCH, iterations=it, timed_iterations=it,
                             time_s=t * BATCH * n * it))
    return pl.DataFrame(rows)


def test_a_noise_free_law_is_recovered_within_one_percent_per_coefficient():
    m = model_table(frame([1, 2, 4, 8], LAW))
    row = m.row(0, named=True)
    assert row["terms"] == "a+b+c+d"
    for name, truth in zip("abcd", LAW):
        assert row[name] == pytest.approx(truth, rel=0.01), name
    measured = m.filter(pl.col("kind") == "measured")
    assert measured["gpus"].to_list() == [1, 2, 4, 8]
    assert measured["error"].abs().max() < 1e-9
    assert m.filter(pl.col("kind") == "predicted")["gpus"].to_list() == [16, 32]  # 2x and 4x the largest N
    # hand count at N=2: t(1) = 0.014, t(2) = 0.002 + 0.006 + 0.001 + 0.001 = 0.010
    two = m.filter(pl.col("gpus") == 2).row(0, named=True)
    assert two["speedup"] == pytest.approx(1.4) and two["efficiency"] == pytest.approx(0.7)
    assert two["time_s"] == pytest.approx(0.010 * 8000)
    assert two["gpu_hours"] == pytest.approx(0.010 * 8000 * 2 / 3600)


def test_a_law_without_d_picks_no_d_and_predicts_n8_within_two_percent():
    coef = (0.002, 0.012, 0.001, 0.0)
    m = model_table(frame([1, 2, 4], coef))
    assert set(m["terms"]) == {"a+b+c"} and (m["d"] == 0).all()
    eight = m.filter(pl.col("gpus") == 8).row(0, named=True)
    assert eight["kind"] == "predicted"
    assert eight["fit_t_image_s"] == pytest.approx(law(8, *coef), rel=0.02)


def test_the_interval_at_n8_covers_the_truth_with_five_percent_noise():
    truth = law(8, *LAW)
    covered = 0
    for seed in range(10):
        row = model_table(frame([1, 2, 4, 8], LAW, reps=3, noise=0.05, seed=seed)) \
            .filter(pl.col("gpus") == 8).row(0, named=True)
        assert row["repeats"] == 3 and row["fit_lo_s"] < row["fit_t_image_s"] < row["fit_hi_s"]
        covered += row["fit_lo_s"] <= truth <= row["fit_hi_s"]
    assert covered >= 9


def test_fewer_than_three_gpu_counts_is_one_line_and_no_fit():
    m = model_table(frame([1, 2], LAW))
    assert m.height == 1
    row = m.row(0, named=True)
    assert row["kind"] == "no fit" and row["a"] is None
    assert "fewer than 3, no fit" in row["note"] and "gpus=1,2,4" in row["note"]


def test_the_knee_and_the_optimum_follow_the_law():
    # a = 0, c = 0, d = 0: t = b/N, perfect scaling: every N is on the knee, the fastest is the largest
    perfect = model_table(frame([1, 2, 4], (0.0, 0.012, 0.0, 0.0)))
    assert perfect["knee_gpus"][0] == 16 and perfect["fastest_gpus"][0] == 16
    assert perfect.filter(pl.col("gpus") == 16)["efficiency"][0] == pytest.approx(1.0)
    # t = 0.012/N + 0.001 log2 N: minimum of b/N + c log2 N at N = b ln2 / c ~ 8.3: fastest of 1..32 is 8
    m = model_table(frame([1, 2, 4, 8], (0.0, 0.012, 0.001, 0.0)))
    assert m["fastest_gpus"][0] == 8
    eff = dict(zip(m["gpus"], m["efficiency"]))
    assert m["knee_gpus"][0] == max(n for n, e in eff.items() if e >= 0.8)
    assert m["cheapest_gpus"][0] == 1  # GPU-hours grow with N whenever efficiency < 1


def test_inter_node_points_are_a_series_of_their_own():
    both = pl.concat([frame([1, 2, 4], LAW), frame([2, 4, 8], LAW, nodes=2)])
    m = model_table(both)
    assert set(m["span"]) == {"intra-node", "inter-node"}
    inter = m.filter(pl.col("span") == "inter-node")
    assert "node boundary" in inter["note"][0]


def test_the_communication_bound_is_the_ring_all_reduce():
    f = frame([1, 2, 4], LAW).with_columns(
        pl.lit(100e6).alias("allreduce_bytes_per_iter"), pl.lit(50.0).alias("interconnect_bandwidth_gbs"),
        (pl.col("timed_iterations") * 0.006).alias("comm_s"))
    m = model_table(f).filter(pl.col("kind") == "measured")
    four = m.filter(pl.col("gpus") == 4).row(0, named=True)
    # 50 GB/s stated is both directions together (as NVLink's 600): a ring is bound by one, 25
    bound_ms = 2 * 3 / 4 * 100e6 / 25e9 * 1e3  # 6 ms
    assert four["comm_bound_ms"] == pytest.approx(bound_ms)
    assert four["comm_ms"] == pytest.approx(6.0) and four["comm_over_bound"] == pytest.approx(1.0)
    assert m.filter(pl.col("gpus") == 1)["comm_bound_ms"][0] is None  # one GPU moves nothing


def test_the_efficiency_floor_moves_the_knee():
    m = fit_model(frame([1, 2, 4, 8], LAW), efficiency_floor=0.5)
    eff = dict(zip(m["gpus"], m["efficiency"]))
    assert m["knee_gpus"][0] == max(n for n, e in eff.items() if e >= 0.5)
    assert m["knee_gpus"][0] != model_table(frame([1, 2, 4, 8], LAW))["knee_gpus"][0]  # 0.8's knee is elsewhere


def _gid(ax, gid):
    (line,) = [ln for ln in ax.lines if ln.get_gid() == gid]
    return list(line.get_xdata()), list(line.get_ydata())


def test_the_fit_figure_draws_the_tables_predictions_and_marks_the_knee():
    from campaign.harvest.plots_model import model_comm_figure, model_fit_figure

    m = model_table(frame([1, 2, 4], LAW, reps=3, noise=0.02))
    ax = model_fit_figure(m).axes[0]
    label = "local"  # one series: labelled by its platform
    x, y = _gid(ax, f"fit:{label}")
    assert x == [1, 2, 4, 8, 16] and y == pytest.approx(m["speedup"].to_list())  # the line is the table's
    x, _ = _gid(ax, f"predicted:{label}")
    assert x == [8, 16]  # predictions drawn apart (hollow) from the measured points
    assert _gid(ax, f"predicted:{label}")[1] == pytest.approx(m.filter(pl.col("kind") == "predicted")["speedup"])
    t1 = m["speedup"][0] * m["fit_t_image_s"][0]
    measured = m.filter(pl.col("kind") == "measured")
    assert _gid(ax, f"measured:{label}") == ([1, 2, 4], pytest.approx([t1 / t for t in measured["t_image_s"]]))
    knee = m["knee_gpus"][0]
    assert _gid(ax, f"knee:{label}")[0] == [knee]
    assert _gid(ax, "ideal") == ([1, 2, 4, 8, 16], [1, 2, 4, 8, 16])
    (band,) = [c for c in ax.collections if c.get_gid() == f"band:{label}"]
    lo, hi = band.get_paths()[0].vertices[:, 1].min(), band.get_paths()[0].vertices[:, 1].max()
    assert lo == pytest.approx(m["speedup_lo"].min()) and hi == pytest.approx(m["speedup_hi"].max())
    assert model_comm_figure(m) is None  # no all-reduce volume: no bound to draw
    assert model_fit_figure(model_table(frame([1, 2], LAW))) is None  # no fit: nothing to draw


def test_the_comm_figure_puts_each_point_beside_its_bound():
    from campaign.harvest.plots_model import model_comm_figure

    f = frame([1, 2, 4], LAW).with_columns(
        pl.lit(100e6).alias("allreduce_bytes_per_iter"), pl.lit(50.0).alias("interconnect_bandwidth_gbs"),
        (pl.col("timed_iterations") * 0.006).alias("comm_s"))
    ax = model_comm_figure(model_table(f)).axes[0]
    # 100 MB over one direction of 50 GB/s (25): 4 ms a GB's ring share
    assert _gid(ax, "bound:local") == ([2, 4], pytest.approx([2 * 1 / 2 * 4.0, 2 * 3 / 4 * 4.0]))  # ms
    assert _gid(ax, "comm:local") == ([2, 4], pytest.approx([6.0, 6.0]))


def test_the_vectorised_bootstrap_fit_is_the_exact_fit_per_resample():
    from campaign.harvest.model import columns, fit_terms, fit_terms_batch

    ns = np.array([1.0, 2.0, 4.0, 8.0])
    x = columns(ns, np.ones(4) / ns)
    rng = np.random.default_rng(3)
    ys = law(ns, *LAW) * (1 + 0.2 * rng.standard_normal((50, 4)))  # large noise: many resamples infeasible in full
    for sub in ([0, 1, 2, 3], [0, 1, 2], [1, 2]):
        got = fit_terms_batch(x, ys, sub)
        for k in range(ys.shape[0]):
            assert got[k] == pytest.approx(fit_terms(x, ys[k], sub)[0], rel=1e-9, abs=1e-15)


def test_one_unsampled_repeat_beside_repeated_points_is_kept_as_measured():
    # N = 1, 2 ran three times, N = 4 once without a sampled window: intervals from the repeats
    f = pl.concat([frame([1, 2], LAW, reps=3, noise=0.02), frame([4], LAW)])
    four = model_table(f).filter(pl.col("gpus") == 4).row(0, named=True)
    assert four["repeats"] == 1 and four["fit_lo_s"] <= four["fit_t_image_s"] <= four["fit_hi_s"]


def test_student_t_quantiles_past_the_table_are_students_not_the_normals():
    # a printed t table's 97.5 % points: beyond 10 degrees of freedom the intervals widen by
    # these, not by the normal's 1.96 (11 repeats: 12 % wider)
    from campaign.harvest.model import _t_quantile

    for df, t in ((10, 2.228), (11, 2.201), (15, 2.131), (20, 2.086), (30, 2.042), (60, 2.000), (120, 1.980)):
        assert _t_quantile(df) == pytest.approx(t, abs=6e-4), df
    assert _t_quantile(0) == pytest.approx(1.959964)


def test_a_fixed_schedule_times_each_n_by_its_own_images():
    """The same 100 iterations at 8 images per GPU at every N (work grows with N): each
    row's time_s and gpu_hours are t(N) x that N's images, the measured ones the runs' own
    times (one median of the series' images gave 1 GPU 3x its time: review of 2026-11-26)."""
    rows = [dict(platform="local", trainer="sleep", experiment="fixed", variant="", image=None, nodes=1, gpus=n,
                 batch_per_gpu=BATCH, iterations=100, timed_iterations=100, time_s=law(n, *LAW) * BATCH * n * 100)
            for n in (1, 2, 4, 8)]
    m = model_table(pl.DataFrame(rows))
    measured = m.filter(pl.col("kind") == "measured")
    for row in measured.iter_rows(named=True):
        truth = next(r["time_s"] for r in rows if r["gpus"] == row["gpus"])
        assert row["time_s"] == pytest.approx(truth, rel=1e-6), row["gpus"]
        assert row["gpu_hours"] == pytest.approx(truth * row["gpus"] / 3600, rel=1e-6)
    sixteen = m.filter(pl.col("gpus") == 16).row(0, named=True)
    assert sixteen["kind"] == "predicted"
    assert sixteen["time_s"] == pytest.approx(sixteen["fit_t_image_s"] * BATCH * 16 * 100)
    # weak scaling keeps one count of images at every N, predictions included
    weak = model_table(frame([1, 2, 4, 8], LAW)).filter(pl.col("gpus") == 32).row(0, named=True)
    assert weak["time_s"] == pytest.approx(weak["fit_t_image_s"] * 8000)
