"""Issue #29's leftovers: a nodes x gpus grid, and the real global batch of an uneven split.

- ``campaign launch -m nodes=1,2 gpus=1,2,4,8`` plans every placement the platform holds
  (gpus = all GPUs, spread over ``nodes``) and refuses the rest one by one with its reason;
- harvest keeps each (nodes, GPUs) of the grid as its own row, and its figures draw one line
  per node count against GPUs and one per GPUs per node against nodes (xaxis.py);
- a DataParallel point of 1,024 images over 3 GPUs (342, 342, 340: the store's
  batch_per_gpu is the largest share) has a global batch of 1,024, not 3 x 342 = 1,026.
"""

from __future__ import annotations

import json

import pytest
from sqlalchemy import insert, select

from campaign.harvest import plots
from campaign.harvest.run import _tables
from campaign.store import open_store
from campaign_sql.schema import attempt, rank_timing

ITERS = 4


def _lines(ax) -> dict[str, tuple[list, list]]:
    """legend label -> (x data, y data) of every labelled line with data."""
    return {ln.get_label(): (list(ln.get_xdata()), list(ln.get_ydata())) for ln in ax.lines
            if len(ln.get_xdata()) and not ln.get_label().startswith("_")}


def _store(tmp_path, cid: str, points: list[dict], walls: list[float]) -> str:
    """A SQLite store holding one campaign of completed ``points``, each with one rank row
    whose timed window (ITERS iterations) took its wall seconds and took its global batch
    per iteration."""
    url = f"sqlite:///{tmp_path}/store.db"
    rows = [dict(idx=i, repeat=0, iterations=ITERS, executor="slurm", state="completed", **p)
            for i, p in enumerate(points)]
    with open_store(url, create=True) as s:
        pids = s.register({"id": cid, "created_at": 1.0}, rows)
        with s.engine.begin() as conn:
            conn.execute(insert(attempt), [dict(point_id=p, attempt_no=0, state="completed") for p in pids])
            ids = dict(conn.execute(select(attempt.c.point_id, attempt.c.id)).all())
            conn.execute(insert(rank_timing), [
                dict(attempt_id=ids[pid], rank=0, warmup_iterations=1, warmup_s=1.0, iterations=ITERS, wall_s=wall,
                     iter_mean_s=wall / ITERS, iter_median_s=wall / ITERS, images=p["images"] * ITERS,
                     data_wait_s=0.0, compute_s=wall, comm_s=0.0)
                for pid, p, wall in zip(pids, points, walls)])
    return url


# ---------------------------------------------------------------- the grid, planned

def test_a_nodes_by_gpus_grid_plans_every_placement_and_refuses_the_rest_alone(ws):
    res = ws.launch("-m", "platform=a100", "nodes=1,2", "gpus=1,2,4,8", "experiment=smoke", "dry_run=json")
    assert res.returncode == 0, res.stderr
    # (a machine without a running SLURM adds its notes: what a launch would be refused here for)
    assert [line for line in res.stderr.splitlines() if not line.startswith("note: ")] == [
        "refused: point platform=a100 nodes=1 gpus=8 experiment=smoke: a100 has 4 GPUs per node; 8 needs nodes=2",
        "refused: point platform=a100 nodes=2 gpus=1 experiment=smoke: gpus=1 does not divide over nodes=2; "
        "use a multiple of 2"]
    planned = [json.loads(line) for line in res.stdout.splitlines()]
    # (nodes, GPUs per node the job asks for): every placement a100 (4 GPUs per node) holds
    assert sorted((p["resources"]["nodes"], p["resources"]["gpus_per_node"]) for p in planned) \
        == [(1, 1), (1, 2), (1, 4), (2, 1), (2, 2), (2, 4)]
    # a point over several nodes says so: 4 GPUs on one node and on two are two points
    labels = {p["label"] for p in planned}
    assert "platform=a100 gpus=4 trainer=synthetic experiment=smoke" in labels
    assert "platform=a100 gpus=4 nodes=2 trainer=synthetic experiment=smoke" in labels
    assert len(labels) == len(planned)
    assert not ws.db.exists()  # a dry run stores nothing


# ---------------------------------------------------------------- the grid, harvested

GRID = [(1, 1), (1, 2), (1, 4), (2, 2), (2, 4)]  # (nodes, gpus): the grid less gpus=1 nodes=2


def _grid_point(nodes: int, gpus: int) -> dict:
    return dict(platform="a100", trainer="synthetic", experiment="strong_scaling", dataset="synthetic", gpus=gpus,
                nodes=nodes, batch_per_gpu=64 // gpus, images=64,
                config={"experiment": {"name": "strong_scaling", "scaling": "strong", "global_batch": 64}},
                overrides=[f"nodes={nodes}", f"gpus={gpus}"])


@pytest.fixture
def grid_store(tmp_path):
    # the time of a point: 16 s / GPUs, plus 1 s for each node boundary crossed
    walls = [16.0 / g + (n - 1) for n, g in GRID]
    return _store(tmp_path, "20260102-000000-grid", [_grid_point(n, g) for n, g in GRID], walls)


def test_each_point_of_a_grid_keeps_its_own_nodes_and_gpus_row(grid_store):
    with open_store(grid_store, readonly=True) as s:
        tables = _tables(s, "20260102-000000-grid", None, ("scaling", "throughput", "placement"))
    scaling = tables["scaling"]
    assert sorted(zip(scaling["nodes"], scaling["gpus"], scaling["placement"])) == [
        (1, 1, "1x1"), (1, 2, "1x2"), (1, 4, "1x4"), (2, 2, "2x1"), (2, 4, "2x2")]
    time = {(n, g): t for n, g, t in zip(scaling["nodes"], scaling["gpus"], scaling["time_s"])}
    assert time == {(n, g): 16.0 / g + (n - 1) for n, g in GRID}  # one point each, never a median of two
    speedup = dict(zip(zip(scaling["nodes"], scaling["gpus"]), scaling["speedup"]))
    assert speedup[(2, 4)] == pytest.approx(16.0 / 5.0)  # against the one 1-GPU baseline (16 s)
    assert scaling["repeats"].to_list() == [1] * len(GRID)
    placement = tables["placement"]  # equal GPU counts side by side: 2 and 4 GPUs, on one node and on two
    assert sorted(zip(placement["gpus"], placement["placement"], placement["span"])) == [
        (2, "1x2", "intra-node"), (2, "2x1", "inter-node"), (4, "1x4", "intra-node"), (4, "2x2", "inter-node")]


def test_a_grid_draws_a_line_per_node_count_against_gpus_and_per_gpus_per_node_against_nodes(grid_store):
    with open_store(grid_store, readonly=True) as s:
        scaling = _tables(s, "20260102-000000-grid", None, ("scaling",))["scaling"]
    lines = {k: v for k, v in _lines(plots.time_figure(scaling).axes[0]).items() if not k.startswith("ideal")}
    assert lines == {"1 node": ([1, 2, 4], [16.0, 8.0, 4.0]), "2 nodes": ([2, 4], [9.0, 5.0])}
    ax = plots.time_figure(scaling, "nodes").axes[0]
    assert ax.get_xlabel() == "nodes"
    assert _lines(ax) == {"1 GPU/node": ([1, 2], [16.0, 9.0]), "2 GPUs/node": ([1, 2], [8.0, 5.0]),
                          "4 GPUs/node": ([1], [4.0])}


# ---------------------------------------------------------------- the real global batch

def _dp_point(gpus: int, scaling: str = "strong") -> dict:
    """A DataParallel point: a global batch of 1,024 scattered over ``gpus`` (torch.chunk:
    the largest share is ceil(1024 / gpus)), or 256 images per GPU (``weak``)."""
    exp = {"name": "dataparallel_study", "scaling": scaling}
    exp.update(global_batch=1024) if scaling == "strong" else exp.update(images_per_gpu=256)
    batch = -(-1024 // gpus) if scaling == "strong" else 256
    return dict(platform="v100", trainer="frozen_backbone", experiment=f"dp_{scaling}", dataset="mnist", gpus=gpus,
                nodes=1, batch_per_gpu=batch, images=1024 if scaling == "strong" else 256 * gpus,
                config={"experiment": exp}, overrides=[f"gpus={gpus}"])


def test_an_uneven_split_reports_the_real_global_batch(tmp_path):
    points = [_dp_point(g) for g in (1, 2, 3, 4)] + [_dp_point(g, "weak") for g in (1, 3)]
    walls = [8.0, 4.0, 3.0, 2.0, 8.0, 8.0]
    url = _store(tmp_path, "20260103-000000-dpdp", points, walls)
    with open_store(url, readonly=True) as s:
        tables = _tables(s, "20260103-000000-dpdp", None, ("scaling", "throughput", "model"))
    tp = {(e, g): r for e, g, r in zip(tables["throughput"]["experiment"], tables["throughput"]["gpus"],
                                       tables["throughput"].iter_rows(named=True))}
    # 1,024 over 3 GPUs is 1,024 (342 + 342 + 340), not 3 x 342; even splits unchanged
    assert [tp[("dp_strong", g)]["global_batch"] for g in (1, 2, 3, 4)] == [1024, 1024, 1024, 1024]
    assert tp[("dp_strong", 3)]["batch_per_gpu"] == 342  # the stored largest share, as before
    assert [tp[("dp_weak", g)]["global_batch"] for g in (1, 3)] == [256, 768]  # batch per GPU x GPUs
    # images/s from what the ranks counted: 1,024 x 4 iterations in 3 s
    assert tp[("dp_strong", 3)]["images_per_s"] == pytest.approx(1024 * ITERS / 3.0)
    # the ideal at constant images/s per GPU: T_iter(1) x (1,024 / 3) / 1,024 = 2 s / 3
    assert tp[("dp_strong", 3)]["ideal_iter_s"] == pytest.approx(2.0 / 3)
    assert tp[("dp_strong", 2)]["ideal_iter_s"] == pytest.approx(1.0)
    sc = {(e, g): r for e, g, r in zip(tables["scaling"]["experiment"], tables["scaling"]["gpus"],
                                       tables["scaling"].iter_rows(named=True))}
    # the same work at every N: 1,024 x 4 images, so no "other work" note for 3 GPUs
    assert [sc[("dp_strong", g)]["images_planned"] for g in (1, 2, 3, 4)] == [1024 * ITERS] * 4
    assert not sc[("dp_strong", 3)]["note"]
    model = tables["model"].filter((tables["model"]["experiment"] == "dp_strong")
                                   & (tables["model"]["kind"] == "measured"))
    # time per image over the real images: 3 s / (1,024 x 4)
    assert dict(zip(model["gpus"], model["t_image_s"]))[3] == pytest.approx(3.0 / (1024 * ITERS))


# ---------------------------------------------------------------- the cluster's own limit: nodes per partition

class _Plan:
    def __init__(self, nodes: int, partition="a100", gpus_per_node=1, tasks_per_node=1, cpus_per_task=1):
        from campaign.backends.resources import Resources

        self.nodes = nodes
        self.resources = Resources(nodes=nodes, tasks_per_node=tasks_per_node, gpus_per_node=gpus_per_node,
                                   cpus_per_task=cpus_per_task, timeout_min=5, partition=partition)


def test_slurm_refuses_a_point_spanning_more_nodes_than_its_partition_has(monkeypatch):
    from campaign.backends import slurm
    from campaign.common.proc import CommandError, Completed

    seen = []

    def sinfo(argv, **kw):
        seen.append(argv)
        # one line per partition and node group (state, gres, cores): a100's 1 idle + 2 allocated nodes are 3
        return Completed(list(argv), 0, "a100|1|gpu:4|64\na100|2|gpu:4|64\nv100|2|gpu:4|64\n", "")

    monkeypatch.setattr(slurm.shutil, "which", lambda name: f"/usr/bin/{name}")
    monkeypatch.setattr(slurm, "run", sinfo)
    plans = [_Plan(1), _Plan(3), _Plan(4), _Plan(4, "v100"), _Plan(2, None)]
    assert slurm.SlurmBackend().placement_refusals(plans) == {
        2: "SLURM partition 'a100' has 3 node(s); nodes=4 cannot be placed there (use nodes<=3 or another "
           "platform.partition)",
        3: "SLURM partition 'v100' has 2 node(s); nodes=4 cannot be placed there (use nodes<=2 or another "
           "platform.partition)"}
    assert seen == [["sinfo", "-h", "-a", "-e", "-o", "%R|%D|%G|%c"]]
    assert slurm.SlurmBackend().placement_refusals([_Plan(1)]) == {}
    assert slurm.SlurmBackend().placement_refusals([_Plan(2, None)]) == {}  # no partition: the cluster's default
    assert len(seen) == 2  # nothing asked for a point without a partition

    def silent(argv, **kw):
        raise CommandError(argv, "no answer within 30 s")

    monkeypatch.setattr(slurm, "run", silent)  # no answer: none refused here (preflight says why)
    assert slurm.SlurmBackend().placement_refusals(plans) == {}


@pytest.mark.parametrize("gres, gpus", [
    ("gpu:4", 4), ("gpu:a100:4(S:0-1)", 4), ("gpu:2,mps:200", 2), ("(null)", 0), ("", 0),
    ("gpu:a100:2(S:0),gpu:v100:1(S:1)", 3), ("gpu:tesla:4(S:0,1)", 4), ("mps:100", 0),
    ("gpu:a100:4(IDX:0-3)", 4), ("gpu:1g.10gb:7", 7), ("gpu:2,shard:8", 2),
    ("gpu", None), ("gpu:a100", None), ("gpus_extra:3", 0),  # a gpu item not read: unknown, never a refusal
])
def test_gres_gpus_reads_sinfo_gres(gres, gpus):
    from campaign.backends.slurm_nodes import gres_gpus

    assert gres_gpus(gres) == gpus


def test_a_point_needs_enough_nodes_with_its_gpus_and_cores():
    from campaign.backends.slurm_nodes import partition_nodes, placement_problem

    # one big node (8 GPUs, 128 cores) and two small ones (4 GPUs, 64 cores) in a100; v100 elsewhere
    groups = partition_nodes("a100|1|gpu:a100:8(S:0-1)|128\na100|2|gpu:a100:4(S:0)|64\nv100|9|gpu:2|32\n", {"a100"})
    assert groups == {"a100": [(1, 8, 128), (2, 4, 64)]}
    a100 = groups["a100"]
    assert placement_problem(_Plan(3, gpus_per_node=4).resources, a100) is None
    assert placement_problem(_Plan(1, gpus_per_node=8).resources, a100) is None
    assert placement_problem(_Plan(2, gpus_per_node=8).resources, a100) == (
        "SLURM partition 'a100' has 1 node(s) of its 3 with 8 GPU(s) and 1 core(s) a node; nodes=2 cannot be "
        "placed there (use nodes<=1 or another platform.partition)")
    assert placement_problem(_Plan(1, gpus_per_node=16).resources, a100) == (
        "SLURM partition 'a100' has at most 8 GPU(s) a node (gres); 16 GPU(s) a node cannot be placed there "
        "(spread the GPUs over more nodes, or set platform.gpus_per_node<=8 or another platform.partition)")
    assert placement_problem(_Plan(1, gpus_per_node=4, tasks_per_node=4, cpus_per_task=64).resources, a100) == (
        "SLURM partition 'a100' has at most 128 core(s) a node; 4 task(s) x 64 core(s) = 256 a node cannot be "
        "placed there (set platform.cpus_per_task lower, or another platform.partition)")
    assert placement_problem(_Plan(2, gpus_per_node=0, tasks_per_node=2, cpus_per_task=64).resources, a100) == (
        "SLURM partition 'a100' has 1 node(s) of its 3 with 0 GPU(s) and 128 core(s) a node; nodes=2 cannot be "
        "placed there (use nodes<=1 or another platform.partition)")
    assert placement_problem(_Plan(2).resources, None) is None  # nothing known: nothing refused
    # what sinfo gives as a minimum (64+: nodes of 64 and more cores) or not at all (N/A), or a gres
    # item it cannot read: unknown, so only the figures known decide
    many_cores = _Plan(2, tasks_per_node=4, cpus_per_task=32).resources
    for line in ("a100|2|gpu:4|N/A", "a100|4|gpu:4|64+"):
        assert partition_nodes(line)["a100"][0][2] is None
        assert placement_problem(many_cores, partition_nodes(line)["a100"]) is None
    assert placement_problem(_Plan(1, gpus_per_node=8).resources, partition_nodes("a100|2|gpu|64")["a100"]) is None
    # a partition with no node visible (a cloud cluster's come later): nothing known, nothing refused
    assert placement_problem(_Plan(2, gpus_per_node=8).resources, partition_nodes("a100|0|(null)|0")["a100"]) is None


@pytest.mark.slurm
def test_a_grid_on_the_local_cluster_leaves_out_what_its_partition_cannot_place(ws):
    import subprocess

    out = subprocess.run(["sinfo", "-h", "-p", "a100", "-o", "%D"], capture_output=True, text=True, env=ws.env)
    have = sum(int(n) for n in out.stdout.split() if n.isdigit())
    if not 2 <= have < 4:
        pytest.skip(f"the local SLURM cluster's partition a100 has {have} node(s); this test needs 2 or 3")
    res = ws.launch("-m", "platform=a100", "nodes=1,2,4", "gpus=4", "experiment=smoke", "dry_run=json")
    assert res.returncode == 0, res.stderr
    assert res.stderr.splitlines() == [
        f"refused: point platform=a100 nodes=4 gpus=4 experiment=smoke: SLURM partition 'a100' has {have} node(s); "
        f"nodes=4 cannot be placed there (use nodes<={have} or another platform.partition)"]
    planned = [json.loads(line) for line in res.stdout.splitlines()]
    assert [(p["idx"], p["resources"]["nodes"]) for p in planned] == [(0, 1), (1, 2)]
    alone = ws.launch("platform=a100", "nodes=4", "gpus=4", "experiment=smoke")  # one point: refused, nothing stored
    assert alone.returncode == 2 and alone.stderr == (
        f"error: point platform=a100 nodes=4 gpus=4 experiment=smoke: SLURM partition 'a100' has {have} node(s); "
        f"nodes=4 cannot be placed there (use nodes<={have} or another platform.partition)\n")
    assert not ws.db.exists()


@pytest.mark.slurm
def test_a_point_wanting_more_gpus_a_node_than_the_partition_has_is_refused(ws):
    # the catalogue lets a platform claim 8 GPUs a node; the local cluster's a100 nodes have
    # gres gpu:4 (scripts/local-slurm.sh), which sbatch would refuse only at submission
    import subprocess

    out = subprocess.run(["sinfo", "-h", "-p", "a100", "-o", "%G"], capture_output=True, text=True, env=ws.env)
    if out.stdout.split() != ["gpu:4"]:
        pytest.skip(f"the local SLURM cluster's a100 nodes have gres {out.stdout.split()}; this test needs gpu:4")
    res = ws.launch("-m", "platform=a100", "gpus=4,8", "platform.gpus_per_node=8", "experiment=smoke", "dry_run=json")
    assert res.returncode == 0, res.stderr
    assert res.stderr.splitlines() == [
        "refused: point platform=a100 gpus=8 platform.gpus_per_node=8 experiment=smoke: SLURM partition 'a100' has "
        "at most 4 GPU(s) a node (gres); 8 GPU(s) a node cannot be placed there (spread the GPUs over more nodes, "
        "or set platform.gpus_per_node<=4 or another platform.partition)"]
    planned = [json.loads(line) for line in res.stdout.splitlines()]
    assert [p["resources"]["gpus_per_node"] for p in planned] == [4]
    alone = ws.launch("platform=a100", "gpus=8", "platform.gpus_per_node=8", "experiment=smoke")
    assert alone.returncode == 2 and alone.stderr.startswith("error: point platform=a100 gpus=8 ") \
        and "at most 4 GPU(s) a node" in alone.stderr and alone.stderr.count("\n") == 1
    assert not ws.db.exists()
