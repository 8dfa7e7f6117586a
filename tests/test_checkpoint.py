"""Checkpointing runs (experiment.checkpoint=true): a run stopped by the preemption
signal and resumed is the same run (same iterations once each, same training, its
timings one consistent set with the gap between attempts apart), in process and as a
real local job whose ranks get USR2 (what a local controller sends at the time limit).
A trainer that cannot resume is refused. (A timing run does not checkpoint:
tests/test_breakdown.py, on its campaign.)"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

torch = pytest.importorskip("torch")

from conftest import TINY, campaign_id_from, until  # noqa: E402
from job_specs import a_spec  # noqa: E402
from trainers import loop, preempt  # noqa: E402
from trainers.checkpoint import AWAIT_ENV, Checkpointer, Requeue  # noqa: E402
from trainers.dist import DistContext  # noqa: E402
from trainers.instrument import Recorder  # noqa: E402
from trainers.synthetic import SyntheticTrainer  # noqa: E402

WARMUP, TOTAL = 2, 12
CFG = {"trainer": {"name": "synthetic", "optimizer": "sgd", "lr": 0.05, "momentum": 0.9, "weight_decay": 0.0,
                   "params": {"width": 4, "depth": 2}},
       "dataset": {"channels": 3, "num_classes": 10, "image_size": 8, "length": 64}}
PLAN = {"batch_per_gpu": 4, "seed": 3, "warmup": WARMUP, "iterations": TOTAL - WARMUP}


@pytest.fixture
def ctx():
    saved = signal.getsignal(signal.SIGUSR2)
    yield DistContext(rank=0, world_size=1, local_rank=0, local_world_size=1, num_nodes=1,
                      device=torch.device("cpu"), backend="none", emulated=False, host="here")
    signal.signal(signal.SIGUSR2, saved)


def _attempt(ctx, folder, attempt_no, *, every=0, signal_after=None):
    spec = a_spec(7, checkpoint_dir=str(folder), config=CFG, plan=PLAN)
    trainer, rec = SyntheticTrainer(ctx, CFG, PLAN), Recorder(ctx.device, warmup=WARMUP)
    ckpt = Checkpointer(ctx, spec, TOTAL, every=every, attempt_no=attempt_no)
    ckpt.install()
    resumed = ckpt.load(trainer, rec)
    hook = ckpt.hook(trainer, rec)

    def between(done):
        if done == signal_after:
            os.kill(os.getpid(), signal.SIGUSR2)  # the handler only raises the checkpointer's flag
            time.sleep(0.01)
        hook(done)

    loop.train(trainer, rec, TOTAL, between)
    return trainer, rec, ckpt, resumed


def test_a_run_stopped_by_the_signal_resumes_as_the_same_run(ctx, tmp_path):
    with pytest.raises(Requeue, match=f"checkpointed at iteration 5 of {TOTAL} on SIGUSR2"):
        _attempt(ctx, tmp_path, 0, every=4, signal_after=5)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p7-r0-i5.pt"]  # the interval's i4 replaced
    trainer, rec, ckpt, resumed = _attempt(ctx, tmp_path, 1)
    assert resumed == 5
    rows = rec.rows()
    assert [r["iter"] for r in rows] == list(range(TOTAL)) and sum(r["warmup"] for r in rows) == WARMUP
    summary = rec.summary(rows)
    assert summary["iterations"] == TOTAL - WARMUP and summary["images"] == 4 * (TOTAL - WARMUP)
    info = ckpt.summary(rec)
    first, second = info["segments"]
    assert (first["attempt"], first["first_iter"], first["end_iter"]) == (0, 0, 5)
    assert (second["attempt"], second["first_iter"], second["end_iter"]) == (1, 5, TOTAL)
    assert info["resumed"] == 1 and second["gap_before_s"] >= 0 and info["gap_s"] == second["gap_before_s"]
    # the window is the segments' sum (the gap and the saving are not in it) and covers the timed iterations
    assert summary["wall_s"] == pytest.approx(first["wall_s"] + second["wall_s"], rel=1e-9)
    assert summary["wall_s"] >= sum(r["iter_s"] for r in rows if not r["warmup"])
    # the same training as a run never stopped (model, optimizer and data position restored)
    fresh, fresh_rec, _, _ = _attempt(ctx, tmp_path / "fresh", 0)
    assert [r["loss"] for r in rows] == pytest.approx([r["loss"] for r in fresh_rec.rows()], rel=1e-5)
    for a, b in zip(trainer.model.parameters(), fresh.model.parameters()):
        assert torch.allclose(a, b, atol=1e-6)
    ckpt.remove()
    assert list(tmp_path.glob("*.pt")) == []


def test_a_checkpoint_of_another_run_is_not_resumed(ctx, tmp_path):
    with pytest.raises(Requeue):
        _attempt(ctx, tmp_path, 0, signal_after=3)
    other = dict(PLAN, seed=4)
    spec = a_spec(7, checkpoint_dir=str(tmp_path), config=CFG, plan=other)
    trainer, rec = SyntheticTrainer(ctx, CFG, other), Recorder(ctx.device, warmup=WARMUP)
    assert Checkpointer(ctx, spec, TOTAL).load(trainer, rec) is None and rec.iterations_done == 0


def test_a_signal_while_the_rank_starts_stops_it_at_its_first_boundary(ctx, tmp_path):
    """The job's entry catches the signal before the rank's start-up (preempt.catch): it
    only raises the flag that the checkpointer takes over, keeping submitit's handler
    (here a stand-in) for the requeue, which is not called before the checkpoint."""
    requeued = []
    signal.signal(signal.SIGUSR2, lambda signum, _frame: requeued.append(signum))  # submitit's, in a job
    preempt.catch()
    os.kill(os.getpid(), signal.SIGUSR2)  # while the rank imports, meets its peers, registers...
    time.sleep(0.01)
    assert requeued == []
    spec = a_spec(7, checkpoint_dir=str(tmp_path), config=CFG, plan=PLAN)
    trainer, rec = SyntheticTrainer(ctx, CFG, PLAN), Recorder(ctx.device, warmup=WARMUP)
    ckpt = Checkpointer(ctx, spec, TOTAL, every=4)
    ckpt.install()
    assert ckpt.load(trainer, rec) is None
    with pytest.raises(Requeue, match=f"checkpointed at iteration 1 of {TOTAL} on SIGUSR2"):
        loop.train(trainer, rec, TOTAL, ckpt.hook(trainer, rec))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p7-r0-i1.pt"]
    before = signal.getsignal(signal.SIGTERM)
    try:
        ckpt.requeue()
    finally:
        signal.signal(signal.SIGTERM, before)  # the requeue ignores it (the next test)
    assert requeued == [signal.SIGUSR2]


def test_the_command_that_requeues_ignores_the_sigterm_its_requeue_sends(ctx, tmp_path):
    """``scontrol requeue`` has the controller end the job: its SIGTERM reaches the scontrol
    process too, which died of it under load before returning (the suite's run of
    test_usr2_requeues_a_checkpointing_run_that_resumes_where_it_stopped: "died with
    SIGTERM", a requeue stored as a failure). The requeue's command starts ignoring it."""
    seen = []

    def submitit_handler(signum, _frame):  # as submitit's: a command runs the requeue
        probe = "import signal; print(signal.getsignal(signal.SIGTERM) is signal.SIG_IGN)"
        seen.append(subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True).stdout.strip())

    before = signal.getsignal(signal.SIGTERM)
    try:
        ckpt = Checkpointer(ctx, a_spec(7, checkpoint_dir=str(tmp_path), config=CFG, plan=PLAN), TOTAL)
        ckpt._previous = submitit_handler  # what install() keeps of a job's handler
        ckpt.requeue()
    finally:
        signal.signal(signal.SIGTERM, before)
    assert seen == ["True"]


# A local job's ranks agree on their rendezvous port through a file that a requeued job
# (the same job id, its ranks started again) finds from its run before.
_RANK = """
import os, sys, time
from pathlib import Path
env = {"rank": int(os.environ["SUBMITIT_LOCAL_GLOBALID"]), "job_id": os.environ["SUBMITIT_LOCAL_JOB_ID"]}
folder = Path(os.environ["CAMPAIGN_JOB_FOLDER"])
if env["rank"] == 0:
    if sys.argv[1] == "publish":
        from trainers import dist  # (imports torch: a rank 0 that ends without publishing needs neither)
    while not (folder / "go").exists():
        time.sleep(0.02)
    print(dist._local_port(env) if sys.argv[1] == "publish" else "ended")
else:
    from trainers import dist
    (folder / "ready").touch()
    try:
        print(dist._local_port(env, wait_s=120))
    except RuntimeError as exc:
        print(exc)
"""
_CONTROLLER = """
import os, subprocess, sys, time
from pathlib import Path
folder = Path(os.environ["CAMPAIGN_JOB_FOLDER"])
ranks = [subprocess.Popen([sys.executable, "-c", sys.argv[1], sys.argv[2]], stdout=subprocess.PIPE, text=True,
                          env=dict(os.environ, SUBMITIT_LOCAL_GLOBALID=str(k))) for k in (0, 1)]
while not (folder / "ready").exists():  # rank 1 reads the port file first: rank 0 is late
    time.sleep(0.02)
time.sleep(0.5)
(folder / "go").touch()
print("|".join(r.communicate()[0].strip() for r in ranks))
"""


def _restarted_ranks(tmp_path, rank0: str, before: str) -> tuple[str, str]:
    """What the two ranks of local job 77, started again, say (rank 0 publishes its port,
    or ends without), given the port file of the run ``before``."""
    (tmp_path / "77.master_port").write_text(before)
    env = dict(os.environ, CAMPAIGN_JOB_FOLDER=str(tmp_path), SUBMITIT_LOCAL_JOB_ID="77", SUBMITIT_EXECUTOR="local")
    out = subprocess.run([sys.executable, "-c", _CONTROLLER, _RANK, rank0], env=env, capture_output=True, text=True,
                         timeout=300, cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    assert out.returncode == 0, out.stderr
    first, second = out.stdout.strip().split("|")
    return first, second


@pytest.mark.slow
def test_restarted_local_ranks_meet_at_their_rank_0s_port_not_the_run_befores(tmp_path):
    port0, port1 = _restarted_ranks(tmp_path, "publish", "34577")  # as written before ranks signed it
    assert port1 == port0 != "34577"


@pytest.mark.slow
def test_a_local_rank_whose_rank_0_ended_without_a_port_fails_at_once(tmp_path):
    said0, said1 = _restarted_ranks(tmp_path, "end", "34577 12345:678")  # its rank 0 (pid 12345), ended
    assert said0 == "ended"
    assert said1.startswith("rank 1: rank 0 of local job 77 (pid ") and \
        said1.endswith(") ended before it published the rendezvous port (see rank 0's log)"), said1


def test_a_trainer_that_cannot_resume_is_refused_at_launch(ws):
    res = ws.launch("-m", "trainer=vit", "experiment.checkpoint=true")
    assert res.returncode == 2 and res.stderr.startswith("error: ") and res.stderr.count("\n") == 1, res.stderr
    assert "trainer=vit cannot resume from a checkpoint (experiment.checkpoint=true); trainers that can: sleep, " \
           "swinv2_upernet, synthetic" in res.stderr
    assert not ws.db.exists()


def _ranks(job_id: str, folder: str) -> list[int]:
    """The ranks of a local job: its controller's own children (what the controller
    signals), not processes they may have forked."""
    from campaign.backends.local import ProcessTable

    table = ProcessTable()
    controllers = table.job(job_id, folder)[0]
    assert len(controllers) == len(set(controllers)), controllers  # each once (cancel signals each)
    return [r.pid for r in table.ranks.get(str(job_id), []) if r.ppid in controllers]


def _launch_checkpointing(ws, await_at: int) -> tuple[str, str, str]:
    """A 2-rank checkpointing run of 61 iterations (every 10th saved) whose ranks wait
    after iteration ``await_at`` until they have the signal (AWAIT_ENV; the first attempt
    only): the test's signal lands mid-run however slow the machine is. (campaign id, job
    id, job folder)"""
    ws.env[AWAIT_ENV] = str(await_at)
    res = ws.launch("-m", "gpus=2", "experiment=smoke", "experiment.base_iterations=120", "experiment.checkpoint=true",
                    "experiment.checkpoint_every=10", "+trainer.params.inject_data_delay_s=0.05", *TINY[2:])
    assert res.returncode == 0, res.stderr
    cid = campaign_id_from(res.stdout)
    (job_id, folder), = ws.query("select job_id, job_folder from point where campaign_id = ?", cid)
    return cid, job_id, folder


@pytest.fixture
def launch_checkpointing(ws):
    """``_launch_checkpointing``; a test that fails leaves no job waiting for its signal."""
    launched = []

    def launch(await_at: int) -> tuple[str, str, str]:
        cid, job_id, folder = _launch_checkpointing(ws, await_at)
        launched.append(cid)
        return cid, job_id, folder

    yield launch
    for cid in launched:
        ws.campaign("cancel", cid)


def _signal_ranks(job_id: str, folder: str) -> None:
    ranks = _ranks(job_id, folder)
    assert len(ranks) == 2, ranks
    for pid in ranks:  # what a local controller sends every rank at the time limit
        os.kill(pid, signal.SIGUSR2)


def _assert_resumed_twice(ws, cid: str) -> tuple[int, int]:
    """The point completed in three attempts, requeued twice then resumed, as one run; the
    iterations the first two stopped at."""
    done = ws.campaign("status", cid, "--wait", "--interval", "2", "--timeout", "300", timeout=360)
    assert done.returncode == 0, done.stdout + done.stderr
    attempts = ws.query("select attempt_no, state, origin, reason from attempt order by attempt_no")
    assert [(n, s, o) for n, s, o, _ in attempts] == [(0, "requeued", "launch"), (1, "requeued", "requeue"),
                                                      (2, "completed", "requeue")]
    stops = []
    for _, _, _, reason in attempts[:2]:
        stops.append(int(reason.split("checkpointed at iteration ")[1].split()[0]))
        assert reason.endswith("of 61 on SIGUSR2 (preemption or time limit); requeued"), reason
    first, second = stops
    assert 1 <= first < second < 61, stops
    # one consistent set of rows, all in the completed attempt: each iteration once per rank
    per_rank = ws.query("select i.rank, count(*), count(distinct i.iter), min(i.iter), max(i.iter), sum(i.warmup) "
                        "from iteration i join attempt a on a.id = i.attempt_id group by a.attempt_no, i.rank")
    assert per_rank == [(0, 61, 61, 0, 60, 1), (1, 61, 61, 0, 60, 1)]
    ((extra, wall, iterations),) = ws.query("select r.extra, r.wall_s, r.iterations from rank_timing r join attempt a "
                                            "on a.id = r.attempt_id where r.rank = 0")
    segments = json.loads(extra)["checkpoint"]["segments"]
    assert [(s["attempt"], s["first_iter"], s["end_iter"]) for s in segments] == [
        (0, 0, first), (1, first, second), (2, second, 61)]
    assert segments[1]["gap_before_s"] > 0 and segments[2]["gap_before_s"] > 0 and iterations == 60
    assert wall == pytest.approx(sum(s["wall_s"] for s in segments), rel=1e-6)
    table = json.loads(ws.campaign("harvest", cid, "--table", "attempts", "--to", "json").stdout)
    assert [(r["attempt"], r["iterations"]) for r in table] == [
        (0, f"0-{first - 1}"), (1, f"{first}-{second - 1}"), (2, f"{second}-60")]
    assert [r["gap_before_s"] for r in table[1:]] == [s["gap_before_s"] for s in segments[1:]]
    scaling = json.loads(ws.campaign("harvest", cid, "--to", "json").stdout)
    assert scaling[0]["time_s"] == pytest.approx(max(w for (w,) in ws.query("select wall_s from rank_timing")))
    assert list((ws.results / "jobs" / cid / "checkpoints").glob("*.pt")) == []  # removed once the run completed
    return first, second


def _torch_loaded(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/maps") as fh:
            return "libtorch" in fh.read()
    except OSError:
        return False


@pytest.mark.slow
def test_a_local_job_signalled_mid_run_and_while_it_starts_requeues_and_resumes_as_one_run(ws, launch_checkpointing):
    """One checkpointing job, signalled twice. Its ranks get USR2 mid-run (as from the local
    controller before the time limit): the job checkpoints, requeues itself, and its next
    attempt (the same job, its ranks started again: they meet at a new port) continues at that
    iteration. That attempt's ranks get USR2 while they import torch, meet and register (before
    their checkpointer exists): no rank is ended mid-way by submitit's handler, none loses the
    signal; the job stops at the first iteration boundary it can, checkpointed, and its third
    attempt completes the run: the completed attempt holds every timed iteration once."""
    cid, job_id, folder = launch_checkpointing(await_at=20)
    # iteration 20's file: both ranks have passed that boundary's agreement and wait after it
    until(lambda: list((ws.results / "jobs" / cid / "checkpoints").glob("p*-r1-i20.pt")), 240, "iteration 20's checkpoint",
          every=0.2)
    first_ranks = set(_ranks(job_id, folder))
    _signal_ranks(job_id, folder)
    # the requeued attempt's ranks (a resumed attempt does not wait at iteration 20): torch is
    # imported after the entry caught the signal (trainers/preempt.py)
    restarted = until(lambda: len(r := [p for p in _ranks(job_id, folder) if p not in first_ranks and _torch_loaded(p)])
                      == 2 and r, 240, "the requeued attempt's two ranks importing torch", every=0.2)
    for pid in restarted:
        os.kill(pid, signal.SIGUSR2)
    first, second = _assert_resumed_twice(ws, cid)
    assert first == 21  # the boundary after the one it waited at
