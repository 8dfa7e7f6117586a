"""Figures against any swept variable (``campaign harvest --plots DIR --x KEY``,
campaign/harvest/xaxis.py): a batch-size sweep in a real SQLite store draws its batch
sizes on the x axis (the lines' data, not pixels), an unknown key is refused in one line
naming the varying keys, and N nodes x 1 GPU draws as one line, not isolated points."""

from __future__ import annotations

import polars as pl
import pytest
from sqlalchemy import insert, select

from campaign.common.errors import ConfigError
from campaign.harvest import plots
from campaign.harvest.plots_bars import breakdown_figure
from campaign.harvest.run import _tables, harvest
from campaign.harvest.xaxis import axis_frame, resolve_x
from campaign.store import open_store
from campaign_sql.schema import attempt, breakdown, rank_timing

CID = "20260101-000000-aaaa"
# (global batch, gpus) -> wall seconds of the timed window (4 iterations)
WALL = {(256, 1): 8.0, (256, 2): 5.0, (1024, 1): 20.0, (1024, 2): 12.0, (512, 1): 12.0, (512, 2): 7.0}


def _point(idx, batch, gpus):
    return dict(idx=idx, platform="v100", trainer="frozen_backbone", experiment="strong_scaling", dataset="mnist",
                gpus=gpus, nodes=1, repeat=0, batch_per_gpu=batch // gpus, iterations=4, executor="slurm",
                state="completed", overrides=[f"experiment.global_batch={batch}", f"gpus={gpus}"])


@pytest.fixture
def store(tmp_path):
    """One campaign sweeping experiment.global_batch=256,512,1024 x gpus=1,2, each point
    with its rank row and two breakdown phases (compute, communication)."""
    url = f"sqlite:///{tmp_path}/store.db"
    with open_store(url, create=True) as s:
        pids = s.register({"id": CID, "created_at": 1.0}, [_point(i, b, g) for i, (b, g) in enumerate(WALL)])
        with s.engine.begin() as conn:
            conn.execute(insert(attempt), [dict(point_id=p, attempt_no=0, state="completed") for p in pids])
            ids = dict(conn.execute(select(attempt.c.point_id, attempt.c.id)).all())
            rows, phases = [], []
            for pid, ((b, g), wall) in zip(pids, WALL.items()):
                rows.append(dict(attempt_id=ids[pid], rank=0, warmup_iterations=1, warmup_s=1.0, iterations=4,
                                 wall_s=wall, iter_mean_s=wall / 4, iter_median_s=wall / 4, images=b * 4 // g,
                                 data_wait_s=0.0, compute_s=0.8 * wall, comm_s=0.2 * wall))
                for phase, share in (("forward", 0.5), ("backward_compute", 0.3), ("comm_exposed", 0.2),
                                     ("iteration", 1.0)):
                    phases.append(dict(attempt_id=ids[pid], rank=0, phase=phase, total_s=share * wall,
                                       mean_s=share * wall / 4, p95_s=share * wall / 4, count=4))
            conn.execute(insert(rank_timing), rows)
            conn.execute(insert(breakdown), phases)
    return url


def _lines(ax) -> dict[str, tuple[list, list]]:
    """legend label -> (x data, y data) of every labelled line with data."""
    return {ln.get_label(): (list(ln.get_xdata()), list(ln.get_ydata())) for ln in ax.lines
            if len(ln.get_xdata()) and not ln.get_label().startswith("_")}


def test_a_batch_size_sweep_draws_batch_sizes_on_the_x_axis(store):
    with open_store(store, readonly=True) as s:
        tables = _tables(s, CID, None, ("scaling",), stack=True)
    scaling = tables["scaling"]
    key = resolve_x("global_batch", scaling)  # the unique override ending in .global_batch
    assert key == "experiment.global_batch"
    ax = plots.time_figure(scaling, key).axes[0]
    assert ax.get_xlabel() == "experiment.global_batch"
    assert [t.get_text() for t in ax.get_xticklabels()] == ["256", "512", "1024"]
    # one line per GPU count, batch sizes along it, time = the window's wall seconds
    assert _lines(ax) == {"1 GPU": ([256, 512, 1024], [8.0, 12.0, 20.0]),
                          "2 GPUs": ([256, 512, 1024], [5.0, 7.0, 12.0])}
    ax = plots.speedup_figure(scaling, key).axes[0]
    assert _lines(ax)["2 GPUs"] == ([256, 512, 1024], pytest.approx([8 / 5, 12 / 7, 20 / 12]))
    assert "ideal (S = N)" not in _lines(ax)  # S = N is a line against GPUs only
    ax = breakdown_figure(tables["phase_stack"], key).axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["256", "512", "1024"] * 2  # per GPU count
    comm = sorted((r.get_x(), r.get_y(), r.get_height()) for c in ax.containers for r in c.patches
                  if c.get_label().startswith("exposed communication"))  # stacked on computation, per bar
    walls = (8.0, 12.0, 20.0, 5.0, 7.0, 12.0)
    assert [b for _, b, _ in comm] == pytest.approx([0.8 * w / 4 * 1000 for w in walls])
    assert [h for _, _, h in comm] == pytest.approx([0.2 * w / 4 * 1000 for w in walls])


def test_the_default_axis_is_gpus_one_line_per_batch_size(store):
    with open_store(store, readonly=True) as s:
        scaling = _tables(s, CID, None, ("scaling",))["scaling"]
    ax = plots.time_figure(scaling).axes[0]
    assert ax.get_xlabel() == "GPUs (N)"
    assert _lines(ax)["global_batch=512"] == ([1, 2], [12.0, 7.0])  # the override by its last part


def test_harvest_with_x_writes_figures_and_refuses_an_unknown_key_in_one_line(store, tmp_path, capsys):
    out = tmp_path / "figs"
    assert harvest(CID, store_url=store, plots=str(out), x="experiment.global_batch") == 0
    assert (out / "training_time.png").exists() and (out / "breakdown.svg").exists()
    with pytest.raises(ConfigError) as err:
        harvest(CID, store_url=store, plots=str(tmp_path / "other"), x="hidden")
    assert str(err.value) == ("--x 'hidden' is not a varying key of this campaign; varying keys: gpus, nodes, "
                              "experiment.global_batch")
    assert not (tmp_path / "other").exists()  # refused before anything is drawn
    with pytest.raises(ConfigError, match="add --plots DIR"):
        harvest(CID, store_url=store, x="gpus")


def _nodes_points(placements) -> pl.DataFrame:
    return pl.DataFrame([{"platform": "t4", "trainer": "vit", "experiment": "weak", "variant": "", "image": None,
                          "gpus": g, "nodes": n, "time_s": 10.0 + g, "speedup": 1.0} for n, g in placements])


def test_n_nodes_by_one_gpu_is_one_line():
    """The ViT study's Fig 14: 1..32 nodes x 1 GPU."""
    df = _nodes_points([(n, n) for n in (1, 2, 4, 8, 16, 32)])
    ax = plots.time_figure(df).axes[0]
    ((label, (xs, ys)),) = [(k, v) for k, v in _lines(ax).items() if k != "ideal T(1)/N"]
    assert xs == [1, 2, 4, 8, 16, 32] and ys == [11.0, 12.0, 14.0, 18.0, 26.0, 42.0]
    ax = plots.time_figure(df, "nodes").axes[0]  # against nodes: the same one line
    assert [v[0] for v in _lines(ax).values()] == [[1, 2, 4, 8, 16, 32]]


def test_two_placements_of_one_gpu_count_split_by_gpus_per_node():
    df = _nodes_points([(1, 1), (1, 2), (1, 4), (2, 2), (4, 4)])
    _, axis = axis_frame(df)
    assert axis.series[-1] == "gpus_per_node"
    lines = _lines(plots.time_figure(df).axes[0])
    assert lines["1 GPU/node"][0] == [1, 2, 4] and lines["2 GPUs/node"][0] == [2] and lines["4 GPUs/node"][0] == [4]
