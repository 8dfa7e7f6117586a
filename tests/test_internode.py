"""Inter-node for real: the rendezvous that fails fast (trainers/rendezvous.py), harvest's
intra- vs inter-node marks (placement), and ``nodes=2`` points of every trainer and
engine that supports them run across the two nodes of the local SLURM cluster
(scripts/local-slurm.sh: n1, n2, one slurmd each, on this machine; marker ``slurm``,
skipped unless the cluster has two nodes).

On that cluster the ranks of two "nodes" share this machine and talk over loopback:
these tests check launch, placement and correctness, not a fabric's bandwidth.
"""

from __future__ import annotations

import csv
import io
import json
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import polars as pl
import pytest

from campaign.harvest.placement import placement_table
from campaign.harvest.views import scaling_table, throughput_table
from trainers import rendezvous as rdv
from conftest import EMULATED_GPUS
from trainers.rendezvous import Master, RendezvousError

REPO = Path(__file__).resolve().parents[1]


# ---------------------------------------------------------------- the rendezvous (no cluster)

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_jobs_master_port_is_outside_the_ephemeral_range():
    """Every rank derives the port from the job id; one an outgoing connection could hold
    (Linux's ephemeral range) made rank 0 fail with EADDRINUSE."""
    from trainers.dist import MASTER_PORTS, _master_port

    ports = {_master_port(str(job)) for job in range(2000)} | {_master_port(f"{job}_3") for job in range(500)}
    assert min(ports) >= MASTER_PORTS[0] and max(ports) <= MASTER_PORTS[1] < 32768 and len(ports) > 1000
    assert _master_port("885_0") == _master_port("885_0")  # every rank agrees
    low = Path("/proc/sys/net/ipv4/ip_local_port_range")
    if low.exists():
        assert max(ports) < int(low.read_text().split()[0]), "this machine's ephemeral range starts lower"


def test_master_host_from_override_slurm_torchrun_or_loopback():
    slurm = {"SUBMITIT_EXECUTOR": "slurm", "SLURM_JOB_NODELIST": "n[1-2]"}
    assert rdv.master_host({**slurm, "CAMPAIGN_MASTER_ADDR": "m0"}, 2) == ("m0", "CAMPAIGN_MASTER_ADDR")
    assert rdv.master_host(slurm, 2) == ("n1", "SLURM_JOB_NODELIST")  # scontrol, else submitit's parser
    assert rdv.master_host(slurm, 1) == ("127.0.0.1", "local")  # one node: loopback
    # a shell's MASTER_ADDR is not a submitit job's; torchrun's is
    assert rdv.master_host({**slurm, "MASTER_ADDR": "elsewhere"}, 2)[0] == "n1"
    assert rdv.master_host({"MASTER_ADDR": "h7"}, 2) == ("h7", "MASTER_ADDR")
    assert rdv.master_host({"SUBMITIT_EXECUTOR": "local"}, 1) == ("127.0.0.1", "local")


def test_the_node_list_is_expanded_without_scontrol_too(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # no scontrol: submitit's parser (pinned, test_private_api.py)
    assert rdv.slurm_hostnames("n[1-2],gpu[07-08]") == ["n1", "n2", "gpu07", "gpu08"]
    assert rdv.slurm_node_addr("n1") is None


def test_unresolvable_master_fails_at_once_naming_host_and_port():
    with pytest.raises(RendezvousError) as err:
        rdv.resolve("nosuch.invalid", 29500, "CAMPAIGN_MASTER_ADDR", node_addr=lambda _: "127.0.0.1")
    msg = str(err.value)
    assert msg.startswith("cannot resolve the master nosuch.invalid:29500 (from CAMPAIGN_MASTER_ADDR): ")
    assert "\n" not in msg


def test_a_node_name_that_does_not_resolve_is_found_through_slurms_node_addr():
    m = rdv.resolve("nosuch-node.invalid", 29500, "SLURM_JOB_NODELIST", node_addr=lambda _: "127.0.0.1")
    assert m == Master("nosuch-node.invalid", "127.0.0.1", 29500, "SLURM_JOB_NODELIST")
    assert str(m) == "nosuch-node.invalid:29500 (127.0.0.1)"
    with pytest.raises(RendezvousError, match=r"^cannot resolve the master n9\.invalid:1234 \(from SLURM_JOB_NODELIST\): "
                                              r".*; SLURM knows no other address of it$"):
        rdv.resolve("n9.invalid", 1234, "SLURM_JOB_NODELIST", node_addr=lambda _: None)
    with pytest.raises(RendezvousError, match="nor its SLURM NodeAddr 'also.invalid'"):
        rdv.resolve("n9.invalid", 1234, "SLURM_JOB_NODELIST", node_addr=lambda _: "also.invalid")


def test_rank_0_refuses_a_master_address_of_another_machine():
    rdv.check_local(Master("lo", "127.0.0.1", 1, "local"))
    with pytest.raises(RendezvousError, match=r"^the master h:1 \(192\.0\.2\.1\) is not an address of this node"):
        rdv.check_local(Master("h", "192.0.2.1", 1, "MASTER_ADDR"))  # TEST-NET-1: nobody's


def test_a_rank_waits_for_rank_0_then_gives_up_naming_the_master():
    port = _free_port()
    m = Master("n1", "127.0.0.1", port, "SLURM_JOB_NODELIST")
    with pytest.raises(RendezvousError) as err:
        rdv.wait_reachable(m, timeout_s=1.0)
    assert str(err.value).startswith(f"cannot reach the master n1:{port} (127.0.0.1) (from SLURM_JOB_NODELIST) after ")
    assert "connection refused; rank 0 never listened there" in str(err.value)
    with socket.socket() as server:
        server.bind(("127.0.0.1", port))
        server.listen()
        assert rdv.wait_reachable(m, timeout_s=5.0) < 5.0


# One interpreter (it imports torch once) meets the four rendezvous below one after another,
# each on a port of its own, and prints one JSON line per case: the error and its seconds.
_RANKS = textwrap.dedent("""
    import json, os, sys, time
    from trainers import dist
    for rank, addr, port in json.loads(sys.argv[1]):
        os.environ.update(RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK=str(rank), MASTER_ADDR=addr,
                          MASTER_PORT=str(port))
        t = time.monotonic()
        try:
            dist.setup(want_device="cpu", timeout_s=600, rendezvous_timeout_s=float(sys.argv[2]))
            line = "met its peer"
        except Exception as exc:
            line = f"{type(exc).__name__} {exc} | {round(time.monotonic() - t)}"
        print(json.dumps(line), flush=True)
""")
MEETINGS = [
    (0, "nosuch.invalid", "RendezvousError cannot resolve the master nosuch.invalid:{port} (from MASTER_ADDR)"),
    (1, "nosuch.invalid", "RendezvousError cannot resolve the master nosuch.invalid:{port} (from MASTER_ADDR)"),
    # rank 0 alone: its peer never joins; rank 1 alone: rank 0 never listens
    (0, "127.0.0.1", "RendezvousError rendezvous at the master 127.0.0.1:{port} (from MASTER_ADDR) failed: "),
    (1, "127.0.0.1", "RendezvousError cannot reach the master 127.0.0.1:{port} (from MASTER_ADDR) after "),
]


@pytest.fixture(scope="module")
def lone_ranks() -> list[tuple[int, str]]:
    """(port, what setup() said) for each of MEETINGS: setup() with a 10-minute process-group
    timeout and a 3-second rendezvous, in one child process."""
    ports: list[int] = []
    while len(ports) < len(MEETINGS):
        port = _free_port()
        if port not in ports:
            ports.append(port)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SUBMITIT_", "SLURM_", "CAMPAIGN_"))}
    cases = [[rank, addr, port] for (rank, addr, _), port in zip(MEETINGS, ports)]
    done = subprocess.run([sys.executable, "-c", _RANKS, json.dumps(cases), "3"], capture_output=True, text=True,
                          timeout=300, env=env, cwd=REPO)
    said = [json.loads(line) for line in done.stdout.splitlines() if line.startswith('"')]
    assert len(said) == len(MEETINGS), done.stdout + done.stderr
    return list(zip(ports, said))


@pytest.mark.parametrize("case", range(len(MEETINGS)), ids=[f"{r}-{a}" for r, a, _ in MEETINGS])
@pytest.mark.slow
def test_no_rank_waits_out_the_process_group_timeout(lone_ranks, case):
    """setup() with a 10-minute process-group timeout and a 3-second rendezvous: every
    failure to meet ends within the rendezvous timeout, one line naming host and port."""
    port, out = lone_ranks[case]
    assert out.startswith(MEETINGS[case][2].format(port=port)), out
    assert int(out.rsplit("|", 1)[1]) < 60  # bounded by the rendezvous (3 s), never the 600 s timeout


def test_the_failing_rank_is_named_from_its_own_log(tmp_path):
    """srun kills rank 0 when rank 1 fails before the attempt is stored: the point's
    reason comes from rank 1's log."""
    from campaign.backends.slurm import SlurmBackend

    (tmp_path / "7_0_0_log.err").write_text("srun: error: n2: task 1: Exited with exit code 1\n")
    (tmp_path / "7_0_1_log.err").write_text(
        "Traceback (most recent call last):\n  File \"x\", line 1\n"
        "trainers.rendezvous.RendezvousError: cannot resolve the master n1:2 (from SLURM_JOB_NODELIST): x\n")
    line = SlurmBackend._error_line({"job_id": "7_0", "log_path": str(tmp_path / "7_0_0_log.err")})
    assert line == "rank 1: trainers.rendezvous.RendezvousError: cannot resolve the master n1:2 (from SLURM_JOB_NODELIST): x"


# ---------------------------------------------------------------- the cluster script's knobs

@pytest.mark.parametrize("knobs,message", [
    ({"LOCAL_SLURM_NODES": "2", "LOCAL_SLURM_GPUS": "7"},
     "LOCAL_SLURM_GPUS=7 does not split evenly over LOCAL_SLURM_NODES=2 nodes"),
    ({"LOCAL_SLURM_NODES": "0"}, "LOCAL_SLURM_NODES must be at least 1"),
    ({"LOCAL_SLURM_NODES": "two"}, "LOCAL_SLURM_NODES='two' is not a whole number"),
    ({"LOCAL_SLURM_PORT": "80"}, "LOCAL_SLURM_PORT=80: its ports 80..83 must lie in 1024..65535"),
    ({"LOCAL_SLURM_CLUSTER": "My Cluster"}, "LOCAL_SLURM_CLUSTER='My Cluster': lower-case letters, digits and _ only"),
])
def test_local_slurm_refuses_bad_knobs_before_touching_anything(tmp_path, knobs, message):
    if os.geteuid() != 0:
        pytest.skip("local-slurm.sh start runs as root")
    env = {**os.environ, "LOCAL_SLURM_BASE": str(tmp_path / "c"), "LOCAL_SLURM_LINK_ETC": "0",
           "LOCAL_SLURM_PORT": "7917", "LOCAL_SLURM_DB_PORT": "13506", **knobs}
    done = subprocess.run(["bash", str(REPO / "scripts" / "local-slurm.sh"), "start"], capture_output=True, text=True,
                          env=env, timeout=60)
    assert done.returncode == 1 and message in done.stderr, done.stderr
    assert len(done.stderr.splitlines()) == 1 and not (tmp_path / "c").exists()


# ---------------------------------------------------------------- placement in harvest (pure)

def _points(rows: list[tuple[int, int, float]]) -> pl.DataFrame:
    """(gpus, nodes, time_s) points of one weak-scaling series: 4 images per GPU, 40/N
    iterations (the same 160 images at every N)."""
    return pl.DataFrame([
        {"platform": "v100", "trainer": "vit", "experiment": "weak", "variant": "", "image": None, "gpus": g,
         "nodes": n, "repeat": 0, "time_s": t, "iter_median_s": t / (40 // g), "images": 160, "batch_per_gpu": 4,
         "iterations": 40 // g} for g, n, t in rows])


def test_intra_and_inter_node_points_are_never_one_median():
    p = _points([(1, 1, 100.0), (4, 1, 30.0), (4, 2, 40.0), (8, 2, 25.0)])
    s = scaling_table(p)
    got = {(r["gpus"], r["placement"]): r for r in s.iter_rows(named=True)}
    assert sorted(got) == [(1, "1x1"), (4, "1x4"), (4, "2x2"), (8, "2x4")]
    assert got[(4, "1x4")]["repeats"] == got[(4, "2x2")]["repeats"] == 1
    # every series against the same one-node 1-GPU baseline
    assert got[(4, "1x4")]["speedup"] == pytest.approx(100 / 30)
    assert got[(4, "2x2")]["speedup"] == pytest.approx(100 / 40)
    assert got[(8, "2x4")]["speedup"] == pytest.approx(100 / 25) and got[(8, "2x4")]["note"] == ""
    t = {(r["gpus"], r["placement"]): r for r in throughput_table(p).iter_rows(named=True)}
    assert t[(4, "2x2")]["throughput_speedup"] == pytest.approx(100 / 40)


def test_placement_table_compares_at_equal_gpu_counts():
    p = _points([(1, 1, 100.0), (4, 1, 30.0), (4, 2, 40.0), (8, 2, 25.0)])
    t = placement_table(scaling_table(p), throughput_table(p))
    rows = [(r["gpus"], r["placement"], r["span"], r["gpus_per_node"]) for r in t.iter_rows(named=True)]
    assert rows == [(4, "1x4", "intra-node", 4), (4, "2x2", "inter-node", 2), (8, "2x4", "inter-node", 4)]
    r = {row["placement"]: row for row in t.iter_rows(named=True)}
    assert r["1x4"]["throughput_vs_one_node"] == pytest.approx(1.0)
    assert r["2x2"]["throughput_vs_one_node"] == pytest.approx(30.0 / 40.0)
    assert r["2x2"]["time_vs_one_node"] == pytest.approx(40.0 / 30.0)
    assert r["2x4"]["throughput_vs_one_node"] is None and r["2x4"]["note"] == "no one-node point at 8 GPUs to compare with"
    assert placement_table(scaling_table(_points([(1, 1, 9.0), (2, 1, 5.0)])),
                           throughput_table(_points([(1, 1, 9.0), (2, 1, 5.0)]))).height == 0


def test_placement_figure_draws_one_bar_per_placement():
    from campaign.harvest.plots import speedup_figure
    from campaign.harvest.plots_bars import placement_figure

    p = _points([(1, 1, 100.0), (2, 1, 60.0), (2, 2, 70.0), (4, 1, 30.0), (4, 2, 40.0)])
    fig = placement_figure(placement_table(scaling_table(p), throughput_table(p)))
    ax = fig.axes[0]
    # images/s per GPU: 160 images / time / GPUs
    assert [round(b.get_height(), 3) for b in ax.patches] == [round(160 / t / g, 3) for g, t in
                                                               ((2, 60), (2, 70), (4, 30), (4, 40))]
    assert [t.get_text() for t in ax.texts] == ["1x2", "2x1", "1x4", "2x2"]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["2 GPUs", "4 GPUs"]
    legend = [t.get_text() for t in speedup_figure(scaling_table(p)).axes[0].get_legend().get_texts()]
    assert legend[:2] == ["1 node", "2 nodes"]
    assert placement_figure(placement_table(scaling_table(p.filter(pl.col("nodes") == 1)),
                                            throughput_table(p.filter(pl.col("nodes") == 1)))) is None


# ---------------------------------------------------------------- nodes=2 on the two-node cluster

ONE_CPU = ["platform.cpus_per_task=1", "experiment=smoke", EMULATED_GPUS]


def _two_nodes() -> str | None:
    """None when the local cluster is up with two nodes in partition a100, else why not."""
    from test_slurm import _cluster_up

    why = _cluster_up()
    if why:
        return why
    out = subprocess.run(["sinfo", "-h", "-p", "a100", "-o", "%D"], capture_output=True, text=True).stdout
    nodes = sum(int(x) for x in out.split() if x.isdigit())
    if nodes < 2:
        return (f"the local SLURM cluster has {nodes} node(s) in partition a100; nodes=2 points need two "
                "(sudo LOCAL_SLURM_NODES=2 bash scripts/local-slurm.sh start)")
    return None


def _inter_node_campaigns() -> dict:
    """name -> (overrides, GPU counts, node counts, engine, phases harvest must show)."""
    from test_trainers_slurm import CAMPAIGNS, HAS_DEEPSPEED

    # (trainer=sleep's ranks across two nodes, four on each: tests/test_model_slurm.py's 2 x 4
    # point, checked by ranks_run_on_their_nodes)
    out = {
        "synthetic": (["trainer=synthetic", "trainer.params.width=4", "trainer.params.depth=2", "dataset.image_size=8"],
                      "1,2", "1,2", None, {"forward", "backward", "step"}),
    }
    for name in ("frozen_backbone.ddp", "vit.ddp", "vit.deepspeed"):
        overrides, engine, phases = CAMPAIGNS[name]
        if engine != "deepspeed" or HAS_DEEPSPEED:
            out[name] = (overrides + ["experiment.base_iterations=4"], "2", "2", engine, phases)
    # the micro SwinV2 point is also the requeue's (test_a_two_rank_micro_swinv2_survives_a_slurm_requeue...)
    out["swinv2_upernet"] = (SWINV2_REQUEUED, "2", "2", None, CAMPAIGNS["swinv2_upernet"][2])
    return out


# A micro SwinV2 + UPerNet point of 2 ranks (64x64 crops, synthetic data), checkpointed every 3rd
# of its 9 iterations (16 base ones, halved at 2 GPUs, and a warm-up); launched with AWAIT_ENV=3.
SWINV2_REQUEUED = ["trainer=swinv2_upernet", "trainer.params.variant=micro", "trainer.params.drop_path_rate=0.0",
                   "dataset=ade20k", "dataset.name=synthetic", "dataset.image_size=64", "dataset.num_workers=0",
                   "experiment.images_per_gpu=2", "experiment.base_iterations=16", "experiment.checkpoint=true",
                   "experiment.checkpoint_every=3"]
AWAIT_ENV = "CAMPAIGN_INJECT_AWAIT_SIGNAL_AT"  # trainers.checkpoint.AWAIT_ENV (imported there with torch)


def _signal_at_its_checkpoint(ws, cid: str) -> str:
    """``scancel --signal=USR2`` of campaign ``cid``'s job once both its ranks saved iteration 3
    and wait (AWAIT_ENV); "" when signalled, else why not (its test says so, the others run on)."""
    from conftest import until

    folder = ws.results / "jobs" / cid / "checkpoints"
    try:
        until(lambda: len(list(folder.glob("p*-r[01]-i3.pt"))) == 2, 600, "iteration 3's checkpoint of both ranks",
              every=0.5)
    except AssertionError as exc:
        return str(exc)
    (job,) = ws.query("select job_id from point where campaign_id = ?", cid)[0]
    done = ws.run("scancel", "--signal=USR2", job)
    return "" if done.returncode == 0 else f"scancel: {done.stderr}"


@pytest.fixture(scope="module")
def two_node_site(tmp_path_factory):
    """Every campaign launched at once (the cluster runs them side by side), then waited on."""
    why = _two_nodes()
    if why:
        pytest.skip(why)
    from conftest import Workspace, campaign_id_from

    ws = Workspace(tmp_path_factory.mktemp("two nodes"))
    ids, launched = {}, {}
    saved = dict(ws.env)
    # a master nobody can resolve: the point must fail in seconds, not after dist_timeout_min
    ws.env["CAMPAIGN_MASTER_ADDR"] = "nosuch.invalid"
    res = ws.launch("-m", "platform=a100", "gpus=2", "nodes=2", "trainer=synthetic", "platform.time_limit_min=3",
                    *ONE_CPU)
    ws.env = saved
    assert res.returncode == 0, res.stdout + res.stderr
    ids["rendezvous"] = campaign_id_from(res.stdout)
    for name, (overrides, gpus, nodes, _, _) in _inter_node_campaigns().items():
        saved = dict(ws.env)
        if name == "swinv2_upernet":  # its ranks wait after iteration 3 for the preemption signal
            ws.env[AWAIT_ENV] = "3"
        res = ws.launch("-m", "platform=a100", f"gpus={gpus}", f"nodes={nodes}", *ONE_CPU, *overrides)
        ws.env = saved
        assert res.returncode == 0, res.stdout + res.stderr
        ids[name], launched[name] = campaign_id_from(res.stdout), res
    signalled = _signal_at_its_checkpoint(ws, ids["swinv2_upernet"])
    for cid in ids.values():
        ws.campaign("status", cid, "--wait", "--interval", "2", "--timeout", "900", timeout=1000)
    yield ws, ids, launched, signalled
    for cid in ids.values():
        ws.campaign("cancel", cid)


def _hostnames(nodelist: str) -> list[str]:
    return subprocess.run(["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True,
                          check=True).stdout.split()


def ranks_run_on_their_nodes(ws, cid: str, engine: str | None = None, phases: frozenset | set = frozenset()) -> None:
    """Every point of campaign ``cid`` completed; each rank of its nodes=2 points on the node
    SLURM put it on (block distribution: ranks 0..k-1 on the first node), recorded by rank 0 for
    all and by each rank in its own row; rows from every rank; harvest marks the placement and
    shows ``phases`` for them."""
    doc = json.loads(ws.campaign("status", cid, "--json").stdout)
    assert all(p["state"] == "completed" for p in doc["points"]), doc["points"]
    rows = ws.query(
        "select p.id, p.gpus, p.nodes, p.job_id, a.provenance, r.rank, r.host, r.iterations from point p "
        "join attempt a on a.point_id = p.id join rank_timing r on r.attempt_id = a.id "
        "where p.campaign_id = ? and p.nodes = 2 order by p.gpus, r.rank", cid)
    assert rows, "no nodes=2 point ran"
    by_point: dict = {}
    for pid, gpus, nodes, job_id, prov, rank, host, iterations in rows:
        by_point.setdefault(pid, (gpus, job_id, json.loads(prov), []))[3].append((rank, host, iterations))
    for gpus, job_id, prov, ranks in by_point.values():
        assert [r for r, _, _ in ranks] == list(range(gpus))  # a row from every rank
        assert all(it > 0 for _, _, it in ranks)
        nodes = _hostnames(prov["slurm_nodelist"])
        assert len(nodes) == 2 and prov["nodes"] == 2 and prov["world_size"] == gpus and prov["emulated_gpus"] is True
        per_node = gpus // 2
        expected = [nodes[r // per_node] for r in range(gpus)]
        assert prov["rank_nodes"] == expected, prov["rank_nodes"]
        assert [h for _, h, _ in ranks] == expected  # each rank's own record agrees
        assert prov["master"].startswith(f"{nodes[0]}:")  # the first node of the allocation
        sacct = subprocess.run(["sacct", "-j", job_id, "-X", "-n", "-P", "-o", "NNodes,NodeList"], capture_output=True,
                               text=True, check=True).stdout.split()
        assert sacct == [f"2|{prov['slurm_nodelist']}"]
    out = ws.campaign("harvest", cid, "--to", "csv")
    assert out.returncode == 0, out.stderr
    table = list(csv.DictReader(io.StringIO(out.stdout)))
    inter = [r for r in table if r["nodes"] == "2"]
    assert sorted(r["placement"] for r in inter) == sorted(f"2x{g // 2}" for g, _, _, _ in by_point.values())
    if phases:
        out = ws.campaign("harvest", cid, "--table", "breakdown", "--to", "csv")
        seen = {r["phase"] for r in csv.DictReader(io.StringIO(out.stdout)) if r["nodes"] == "2"}
        assert phases <= seen, sorted(seen)
        if engine == "deepspeed":  # the timed gradient all-reduce of 2 ranks (its 1-rank job: test_trainers_slurm)
            assert "comm_exposed" in seen, sorted(seen)


@pytest.mark.slurm
@pytest.mark.slow
@pytest.mark.parametrize("name", ["synthetic", "frozen_backbone.ddp", "vit.ddp", "vit.deepspeed", "swinv2_upernet"])
def test_every_trainer_runs_across_two_nodes(two_node_site, name):
    """Each trainer's and engine's nodes=2 points: every rank on its node (ranks_run_on_their_nodes)."""
    ws, ids, _, _ = two_node_site
    if name not in ids:
        pytest.skip("DeepSpeed is not installed")
    _, _, _, engine, phases = _inter_node_campaigns()[name]
    ranks_run_on_their_nodes(ws, ids[name], engine, phases)


@pytest.mark.slurm
@pytest.mark.slow
def test_harvest_shows_intra_and_inter_node_apart(two_node_site):
    ws, ids, launched, _ = two_node_site
    # gpus=1 nodes=2 does not divide: refused, the sweep's other three points run (the sleep
    # trainer's 2x4 point of tests/test_model_slurm.py is the case of several ranks a node)
    assert "refused: point platform=a100 gpus=1 nodes=2" in launched["synthetic"].stderr
    out = ws.campaign("harvest", ids["synthetic"], "--to", "csv")
    scaling = list(csv.DictReader(io.StringIO(out.stdout)))
    assert sorted((r["gpus"], r["placement"]) for r in scaling) == [("1", "1x1"), ("2", "1x2"), ("2", "2x1")]
    t1 = next(float(r["time_s"]) for r in scaling if r["gpus"] == "1")
    for r in scaling:  # intra- and inter-node series against the same 1-GPU baseline
        assert float(r["speedup"]) == pytest.approx(t1 / float(r["time_s"]))
    out = ws.campaign("harvest", ids["synthetic"], "--table", "placement", "--to", "csv")
    assert out.returncode == 0, out.stderr
    table = list(csv.DictReader(io.StringIO(out.stdout)))
    assert [(r["gpus"], r["placement"], r["span"]) for r in table] == [
        ("2", "1x2", "intra-node"), ("2", "2x1", "inter-node")]
    ips = {r["placement"]: float(r["images_per_s"]) for r in table}
    for r in table:
        assert float(r["throughput_vs_one_node"]) == pytest.approx(float(r["images_per_s"]) / ips["1x2"])
    shown = ws.campaign("harvest", ids["synthetic"]).stdout
    assert " placement " in shown and " 2x1 " in shown


@pytest.mark.slurm
@pytest.mark.slow
def test_an_unresolvable_master_fails_the_point_fast_with_its_reason(two_node_site):
    ws, ids, _, _ = two_node_site
    (p,) = json.loads(ws.campaign("status", ids["rendezvous"], "--json").stdout)["points"]
    assert p["state"] == "failed", p  # not timeout: the 3-minute limit was never reached
    assert p["reason"].startswith("trainers.rendezvous.RendezvousError: cannot resolve the master nosuch.invalid:")
    assert "(from CAMPAIGN_MASTER_ADDR)" in p["reason"]
    # the bound: under a minute, where torch.distributed alone waits dist_timeout_min (10)
    assert p["elapsed_s"] < 60, p
    shown = ws.campaign("status", ids["rendezvous"]).stdout
    assert "cannot resolve the master nosuch.invalid:" in shown


@pytest.mark.slurm
@pytest.mark.slow
def test_a_two_rank_micro_swinv2_survives_a_slurm_requeue_as_one_timed_run(two_node_site):
    """The micro SwinV2 point of 2 ranks, one a node (emulated GPUs: gloo on CPU; 9 iterations,
    every 3rd saved): both ranks wait after iteration 3 (AWAIT_ENV) until ``scancel
    --signal=USR2`` reaches them, agree to stop, checkpoint at 4, and SLURM requeues the
    same job; the second attempt's two ranks both resume at 4, and each rank's timed window
    is its two segments' sum, the gap between them apart. (The 1-rank case is this one's
    rank 0; tests/test_resume_slurm.py requeues a run signalled mid-loop; the bitwise resume
    on CPU: tests/test_mmseg_checkpoint.py.)"""
    ws, ids, _, signalled = two_node_site
    assert signalled == "", signalled
    cid = ids["swinv2_upernet"]
    (point,) = json.loads(ws.campaign("status", cid, "--json").stdout)["points"]
    assert point["state"] == "completed", point
    attempts = ws.query("select a.attempt_no, a.state, a.origin, a.reason, a.job_id from attempt a join point p "
                        "on p.id = a.point_id where p.campaign_id = ? order by a.attempt_no", cid)
    assert [(n, s, o) for n, s, o, _, _ in attempts] == [(0, "requeued", "launch"), (1, "completed", "requeue")]
    assert attempts[0][4] == attempts[1][4]  # the same SLURM job, requeued
    assert attempts[0][3] == "checkpointed at iteration 4 of 9 on SIGUSR2 (preemption or time limit); requeued"
    # each rank: one consistent set of rows, all in the completed attempt, each iteration once
    rows = ws.query("select a.attempt_no, i.rank, count(*), count(distinct i.iter), min(i.iter), max(i.iter), "
                    "sum(i.warmup) from iteration i join attempt a on a.id = i.attempt_id join point p on "
                    "p.id = a.point_id where p.campaign_id = ? group by a.attempt_no, i.rank", cid)
    assert rows == [(1, 0, 9, 9, 0, 8, 1), (1, 1, 9, 9, 0, 8, 1)]
    timings = ws.query("select r.rank, r.extra, r.wall_s, r.iterations from rank_timing r join attempt a on "
                       "a.id = r.attempt_id join point p on p.id = a.point_id where p.campaign_id = ? order by r.rank",
                       cid)
    assert [r for r, _, _, _ in timings] == [0, 1]
    for rank, extra, wall, iterations in timings:
        info = json.loads(extra)["checkpoint"]
        segments = info["segments"]
        # both ranks resumed at the same iteration: the one the attempt checkpointed at
        assert [(s["attempt"], s["first_iter"], s["end_iter"]) for s in segments] == [(0, 0, 4), (1, 4, 9)], rank
        assert info["resumed"] == 1 and iterations == 8, rank
        # one timed run: the window is the segments' sum; the gap between attempts is apart from it
        assert segments[1]["gap_before_s"] > 0 and info["gap_s"] == segments[1]["gap_before_s"], rank
        assert wall == pytest.approx(sum(s["wall_s"] for s in segments), rel=1e-6), rank
    table = json.loads(ws.campaign("harvest", cid, "--table", "attempts", "--to", "json").stdout)
    assert [(r["attempt"], r["state"], r["iterations"]) for r in table] == [(0, "requeued", "0-3"),
                                                                            (1, "completed", "4-8")]
    assert table[1]["gap_before_s"] > 0
    assert list((ws.results / "jobs" / cid / "checkpoints").glob("*.pt")) == []  # removed once the run completed
