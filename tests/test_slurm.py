"""The SLURM executor: sacct/squeue parsing and state mapping, sbatch retries and
grouping (pure, no cluster), then real campaigns on the local cluster of
scripts/local-slurm.sh (marker ``slurm``; skipped when it is not up).
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest

from campaign.backends import sacct as sa
from campaign.backends.base import Observed
from campaign.backends.resources import Resources
from campaign.common.errors import SubmitError
from campaign.common.proc import Completed
from conftest import EMULATED_GPUS, until
from job_specs import a_spec

REPO = Path(__file__).resolve().parents[1]
TINY_TRAINER = ["trainer.params.width=4", "trainer.params.depth=2", "dataset.image_size=8"]
# The platforms ask for their real nodes' cores per GPU (10-16); the test node has 16 in all.
ONE_CPU = ["platform.cpus_per_task=1", EMULATED_GPUS]

# ---------------------------------------------------------------- sacct / squeue / states (pure)

SACCT = """\
2_0|COMPLETED|0:0|00:00:05|vm|1795259390|1795259395|None
2_1|FAILED|1:0|00:00:03|vm|1795259390|1795259393|None
2_[2-5%2]|PENDING|0:0|00:00:00|None assigned|Unknown|Unknown|JobArrayTaskLimit
7|CANCELLED by 0|0:15|00:00:09|vm|1795259390|1795259399|None
8_3|TIMEOUT|0:0|00:01:12|vm|1795259390|1795259462|None
"""


def test_parse_sacct_expands_array_ranges_and_reads_unix_times():
    rows = sa.parse_sacct(SACCT)
    assert sorted(rows) == ["2_0", "2_1", "2_2", "2_3", "2_4", "2_5", "7", "8_3"]
    assert rows["2_0"] == sa.SacctRow("2_0", "COMPLETED", "0:0", "00:00:05", "vm", 1795259390.0, 1795259395.0, None)
    assert rows["2_4"].state == "PENDING" and rows["2_4"].reason == "JobArrayTaskLimit" and rows["2_4"].start is None
    assert rows["2_4"].node_list == ""


@pytest.mark.parametrize(
    "field,ids",
    [("123", ["123"]), ("123_4", ["123_4"]), ("123_[1-3,7]", ["123_1", "123_2", "123_3", "123_7"]),
     ("123_[0-1%2]", ["123_0", "123_1"]), ("123.batch", []), ("123_4.0", []), ("", [])],
)
def test_expand_job_ids(field, ids):
    assert sa.expand_job_ids(field) == ids


def test_parse_squeue():
    out = sa.parse_squeue("2_4|PENDING|JobArrayTaskLimit\n2_3|RUNNING|None\n9|PENDING|Resources\n")
    assert out == {"2_4": ("PENDING", "JobArrayTaskLimit"), "2_3": ("RUNNING", None), "9": ("PENDING", "Resources")}


def test_max_array_size_from_scontrol():
    assert sa.parse_max_array_size("KillWait                = 5 sec\nMaxArraySize            = 4001\n") == 4001
    assert sa.parse_max_array_size("nothing here") == 1001


STATES = [
    ("COMPLETED", "completed"), ("FAILED", "failed"), ("CANCELLED", "cancelled"), ("CANCELLED by 0", "cancelled"),
    ("TIMEOUT", "timeout"), ("OUT_OF_MEMORY", "out_of_memory"), ("NODE_FAIL", "node_fail"),
    ("PREEMPTED", "preempted"), ("REQUEUED", "requeued"), ("BOOT_FAIL", "boot_fail"), ("DEADLINE", "deadline"),
    ("PENDING", "pending"), ("RUNNING", "running"), ("COMPLETING", "running"), ("SUSPENDED", "running"),
    ("REQUEUE_HOLD", "requeued"), ("OUT_OF_ME+", "out_of_memory"), ("REVOKED", "cancelled"),
]


@pytest.mark.parametrize("slurm,state", STATES, ids=[s for s, _ in STATES])
def test_every_slurm_state_is_mapped(slurm, state):
    assert sa.map_state(slurm)[0] == state


def test_unknown_state_keeps_the_stores_view():
    assert sa.map_state("WEIRD_NEW_STATE") == (None, None)
    assert sa.observation(sa.SacctRow("1", "WEIRD_NEW_STATE"), None, {}) is None


def _row(state, **kw):
    return sa.SacctRow("5_0", state, kw.pop("exit_code", "0:0"), kw.pop("elapsed", "00:00:07"), "vm", 100.0, 107.0, **kw)


@pytest.mark.parametrize(
    "row,queued,point,error_line,expect",
    [
        # sacct lags behind sbatch: a job it does not know yet stays pending (squeue's view if any)
        (None, None, {"state": "pending"}, None, Observed("pending", "submitted; not in SLURM's accounting yet")),
        (None, ("PENDING", "Priority"), {"state": "pending"}, None, Observed("pending", "Priority")),
        (None, None, {"state": "pending", "job_id": "5_0", "submitted_at": 1000.0 - 301}, None,
         Observed("lost", "SLURM knows no job 5_0 (neither sacct nor squeue)")),
        (None, None, {"state": "pending", "job_id": "5_0", "submitted_at": 1000.0 - 30}, None,
         Observed("pending", "submitted; not in SLURM's accounting yet")),
        (None, ("RUNNING", None), {"state": "pending"}, None, Observed("running")),
        (_row("PENDING", reason="Priority"), ("PENDING", "Resources"), {}, None, Observed("pending", "Resources")),
        (_row("PENDING", reason="PartitionConfig"), None, {}, None, Observed("pending", "PartitionConfig")),
        (_row("RUNNING"), None, {}, None, Observed("running", started_at=100.0, node_list="vm")),
        (_row("COMPLETED"), None, {"attempt_state": "completed"}, None,
         Observed("completed", started_at=100.0, ended_at=107.0, node_list="vm")),
        (_row("COMPLETED"), None, {"state": "running", "attempt_state": "running"}, None,
         Observed("failed", "job ended without reporting results (SLURM: COMPLETED, exit code 0); see the log",
                  100.0, 107.0, "vm")),
        (_row("FAILED", exit_code="1:0"), None, {}, None, Observed("failed", "SLURM: FAILED with exit code 1 on vm", 100.0, 107.0, "vm")),
        (_row("FAILED", exit_code="1:0"), None, {}, "RuntimeError: boom", Observed("failed", "RuntimeError: boom", 100.0, 107.0, "vm")),
        (_row("CANCELLED by 1000"), None, {}, None, Observed("cancelled", "cancelled by uid 1000", 100.0, 107.0, "vm")),
        (_row("TIMEOUT", elapsed="00:01:12"), None, {}, None, Observed("timeout", "time limit reached after 00:01:12", 100.0, 107.0, "vm")),
        (_row("OUT_OF_MEMORY"), None, {}, None, Observed("out_of_memory", "out of memory on vm; raise platform.mem_per_gpu_gb", 100.0, 107.0, "vm")),
        (_row("NODE_FAIL"), None, {}, None, Observed("node_fail", "node failure on vm", 100.0, 107.0, "vm")),
        (_row("REQUEUED"), None, {}, None, Observed("requeued", "requeued by SLURM")),
    ],
)
def test_observation(row, queued, point, error_line, expect):
    assert sa.observation(row, queued, point, error_line, now=1000.0) == expect


# ---------------------------------------------------------------- sbatch retries (pure)

def _runner(answers, calls):
    def run(argv, **kw):
        calls.append((argv, kw))
        rc, out, err = answers.pop(0)
        return Completed(list(argv), rc, out, err)
    return run


def test_sbatch_retries_transient_failures_with_backoff(tmp_path, monkeypatch):
    from campaign.backends.slurm import run_sbatch

    monkeypatch.setenv("SBATCH_PARTITION", "nosuch")
    monkeypatch.setenv("SLURM_JOB_ID", "42")
    calls, sleeps = [], []
    answers = [(1, "", "sbatch: error: Batch job submission failed: Socket timed out on send/recv operation"),
               (1, "", "sbatch: error: Batch job submission failed: Unable to contact slurm controller (connect failure)"),
               (0, "Submitted batch job 77\n", "")]
    out = run_sbatch(tmp_path / "s.sh", runner=_runner(answers, calls), sleep=sleeps.append)
    assert out == "Submitted batch job 77\n" and sleeps == [1.0, 2.0] and len(calls) == 3
    env = calls[0][1]["env"]
    assert "SBATCH_PARTITION" not in env and "SLURM_JOB_ID" not in env and env["PATH"] == os.environ["PATH"]


def test_sbatch_gives_up_after_bounded_attempts(tmp_path):
    from campaign.backends.slurm import run_sbatch

    calls, sleeps = [], []
    answers = [(1, "", "sbatch: error: Socket timed out on send/recv operation")] * 3
    with pytest.raises(SubmitError, match="Socket timed out"):
        run_sbatch(tmp_path / "s.sh", attempts=3, runner=_runner(list(answers), calls), sleep=sleeps.append)
    assert len(calls) == 3 and sleeps == [1.0, 2.0]


def test_sbatch_refusal_is_not_retried(tmp_path):
    from campaign.backends.slurm import run_sbatch

    calls, sleeps = [], []
    answers = [(1, "", "sbatch: error: Batch job submission failed: Requested node configuration is not available")]
    with pytest.raises(SubmitError, match=r"^Batch job submission failed: Requested node configuration is not available$"):
        run_sbatch(tmp_path / "s.sh", runner=_runner(answers, calls), sleep=sleeps.append)
    assert len(calls) == 1 and sleeps == []


@pytest.mark.skipif(shutil.which("srun") is None, reason="submitit's SlurmExecutor needs srun on PATH")
def test_submit_one_array_per_group_split_at_max_array_size(tmp_path, monkeypatch):
    """Five points, two resource groups, MaxArraySize 2: arrays of 2+2 and 1; the
    group whose partition sbatch refuses is rejected point by point, with its message."""
    from campaign.backends import slurm

    scripts = []

    def fake_run(argv, **kw):
        text = Path(argv[1]).read_text()
        scripts.append(text)
        if "--partition=nosuch" in text:
            return Completed(list(argv), 1, "", "sbatch: error: invalid partition specified: nosuch\n")
        return Completed(list(argv), 0, f"Submitted batch job {100 + len(scripts)}\n", "")

    monkeypatch.setattr(slurm, "run", fake_run)
    backend = slurm.SlurmBackend()
    backend._max_array = 2
    base = {"nodes": 1, "tasks_per_node": 1, "gpus_per_node": 1, "cpus_per_task": 1, "timeout_min": 5,
            "constraint": None, "account": None, "qos": None, "mem_gb": None, "extra_sbatch": []}
    items = [(SimpleNamespace(resources=Resources(**dict(base, partition=part))), a_spec(pid, campaign_id="c1"))
             for pid, part in [(1, "v100"), (2, "nosuch"), (3, "v100"), (4, "v100"), (5, "nosuch")]]
    out = backend.submit(items, tmp_path / "jobs", None)
    assert [s.point_id for s in out] == [1, 2, 3, 4, 5]
    assert [s.job_id for s in out] == ["101_0", None, "101_1", "102_0", None]
    assert out[0].log_path == str(tmp_path / "jobs" / "101_0_0_log.err")
    assert out[1].error == out[4].error == "invalid partition specified: nosuch"
    assert [re.search(r"--array=(\S+)", s).group(1) for s in scripts] == ["0-1%2", "0-0%1", "0-1%2"]
    assert "--job-name=c1-v100-1x1-part2" in scripts[1]
    names = sorted(p.name for p in (tmp_path / "jobs").iterdir() if not p.name.startswith("."))
    # nothing left of the refused arrays (submitit keeps a dot-symlink to each submitted script)
    assert names == ["101_0_submitted.pkl", "101_1_submitted.pkl", "101_submission.sh", "102_0_submitted.pkl",
                     "102_submission.sh"]
    assert len(list((tmp_path / "jobs").glob(".submission_file_*"))) == 2


def _fake_slurm(monkeypatch, answers: dict):
    """``campaign.backends.slurm.run`` answering each command (argv[0]) from ``answers``."""
    from campaign.backends import slurm

    calls = []

    def fake_run(argv, **kw):
        calls.append(list(argv))
        rc, out, err = answers[argv[0]]
        return Completed(list(argv), rc, out, err)

    monkeypatch.setattr(slurm, "run", fake_run)
    return slurm.SlurmBackend(), calls


def test_observe_is_one_sacct_and_one_squeue(monkeypatch):
    backend, calls = _fake_slurm(monkeypatch, {
        "sacct": (0, "5_0|COMPLETED|0:0|00:00:05|vm|100|105|None\n5_[1-2]|PENDING|0:0|00:00:00|None assigned|Unknown|Unknown|Priority\n"
                     "6_0|TIMEOUT|0:0|00:01:10|vm|100|170|None\n", ""),
        "squeue": (0, "5_1|PENDING|Resources\n5_2|PENDING|Priority\n", ""),
    })
    points = [{"id": 1, "job_id": "5_0", "state": "running", "attempt_state": "completed"},
              {"id": 2, "job_id": "5_1", "state": "pending"}, {"id": 3, "job_id": "5_2", "state": "pending"},
              {"id": 4, "job_id": "6_0", "state": "running"}, {"id": 5, "job_id": None, "state": "registered"}]
    seen = backend.observe(points)
    assert calls == [["sacct", "-j", "5,6", "-X", "-n", "-P", f"--format={sa.SACCT_FORMAT}"],
                     ["squeue", "-h", "-r", "-j", "5_1,5_2", "-o", "%i|%T|%r"]]
    assert {k: (v.state, v.reason) for k, v in seen.items()} == {
        1: ("completed", None), 2: ("pending", "Resources"), 3: ("pending", "Priority"),
        4: ("timeout", "time limit reached after 00:01:10")}


def test_sacct_failure_is_a_scheduler_error_with_its_message(monkeypatch):
    from campaign.common.errors import SchedulerError

    backend, _ = _fake_slurm(monkeypatch, {"sacct": (1, "", "sacct: error: Problem talking to the database: Connection refused\n")})
    with pytest.raises(SchedulerError, match="^sacct: error: Problem talking to the database: Connection refused$"):
        backend.observe([{"id": 1, "job_id": "5_0", "state": "pending"}])


def test_cancel_is_one_scancel(monkeypatch):
    backend, calls = _fake_slurm(monkeypatch, {"scancel": (0, "", "")})
    done = backend.cancel([{"id": 1, "job_id": "5_1"}, {"id": 2, "job_id": "5_0"}, {"id": 3, "job_id": None}])
    assert calls == [["scancel", "--", "5_0", "5_1"]] and done == [1, 2]


def test_more_gpus_than_a_node_is_refused_before_submission(ws):
    res = ws.launch("-m", "platform=v100", "gpus=8", "experiment=smoke")
    assert res.returncode == 2
    assert res.stderr == "error: point platform=v100 gpus=8 experiment=smoke: v100 has 4 GPUs per node; 8 needs nodes=2\n"
    assert not ws.db.exists()


# ---------------------------------------------------------------- the real local cluster

def _cluster_up() -> str | None:
    """None when scripts/local-slurm.sh says the cluster answers, else why not."""
    if shutil.which("sinfo") is None:
        return "SLURM client tools not installed (run: sudo bash scripts/local-slurm.sh start)"
    try:
        proc = subprocess.run(["bash", str(REPO / "scripts" / "local-slurm.sh"), "status"], capture_output=True,
                              text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"scripts/local-slurm.sh status failed: {exc}"
    if proc.returncode != 0:
        return "local SLURM cluster not up (run: sudo bash scripts/local-slurm.sh start)"
    return None


@pytest.fixture(scope="module")
def cluster():
    why = _cluster_up()
    if why:
        pytest.skip(why)


class Site:
    """A results folder with a space in its name, shared by every campaign below."""

    def __init__(self, path: Path):
        from conftest import Workspace

        self.ws = Workspace(path)
        self.store = ["--store", self.ws.store_url]
        self.launched: list[str] = []

    def launch(self, *overrides: str, env: dict | None = None, expect: int = 0, cli: bool = False,
               timeout: float = 120):
        """``python -m campaign.launch -m OVERRIDES`` (``cli``: ``campaign launch``, as the README
        writes it); ``expect``: its exit status."""
        from conftest import campaign_id_from

        saved = dict(self.ws.env)
        self.ws.env.update(env or {})
        try:
            res = (self.ws.campaign("launch", "-m", *overrides, timeout=timeout) if cli
                   else self.ws.launch("-m", *overrides, timeout=timeout))
        finally:
            self.ws.env = saved
        assert res.returncode == expect, res.stdout + res.stderr
        self.launched.append(campaign_id_from(res.stdout))
        return self.launched[-1], res

    def cancel_all(self) -> None:
        """Leave no job behind (long ones would burn this machine's CPUs for a day)."""
        for cid in self.launched:
            self.campaign("cancel", cid, timeout=60)

    def campaign(self, *args: str, timeout: float = 240):
        return self.ws.campaign(*args, *self.store, timeout=timeout)

    def wait(self, cid: str, timeout: float = 200):
        return self.campaign("status", cid, "--wait", "--interval", "1", "--timeout", str(timeout), timeout=timeout + 30)

    def points(self, cid: str) -> list[dict]:
        res = self.campaign("status", cid, "--json")
        return json.loads(res.stdout)["points"]


# A job meant to run until its time limit or its cancellation sleeps instead of computing
# (trainers/sleep.py: 0.2 s an iteration at one rank), so that it costs this machine's CPUs next to
# nothing while it waits; the synthetic trainer would train flat out for its whole minute.
IDLE = ["trainer=sleep", "trainer.params.a_s=0.05", "trainer.params.c_s=0", "experiment=smoke",
        "experiment.base_iterations=100000000", "experiment.until_time_limit=true"]
# A job whose check is SLURM's side of it (its constraint, its array) sleeps its few smoke
# iterations: its rank imports less than the synthetic trainer's and trains nothing.
QUICK = ["trainer=sleep", "trainer.params.a_s=0.001", "trainer.params.c_s=0", "experiment=smoke"]


@pytest.fixture(scope="module")
def site(cluster, tmp_path_factory):
    """Every campaign launched at once, the longest first; the tests then wait on theirs. The two
    waiting launches (hydra.launcher.wait=true) come last: each returns once its jobs ended."""
    s = Site(tmp_path_factory.mktemp("slurm site"))
    s.timeout = s.launch("platform=v100", "platform.time_limit_min=1", *ONE_CPU, *IDLE)
    # The README's headline sweep as it writes it (campaign launch -m platform=v100,a100 gpus=1,2,4;
    # tiny jobs) without platform.compute_capability=null: the test SLURM's partitions say their
    # GPUs are emulated (issue #39, tests/test_emulated_gpus.py). Inherited SBATCH_*/SLURM_* must
    # not reach sbatch: they would override the script's options.
    s.sweep = s.launch("platform=v100,a100", "gpus=1,2,4", "experiment=smoke", "platform.cpus_per_task=1",
                       "platform.time_limit_min=10", *TINY_TRAINER, cli=True, timeout=300,
                       env={"SBATCH_PARTITION": "nosuch", "SBATCH_TIMELIMIT": "0", "SLURM_JOB_ID": "1"})
    # (an unknown partition is refused at launch, before anything is stored: tests/test_slurm_launch.py)
    s.rejected = s.launch("platform=v100", "platform.constraint=a100_40g,nosuchfeature", "repeats=2", *ONE_CPU, *QUICK,
                          expect=3)
    # hydra.launcher.wait=true on SLURM: exit 0 once both jobs completed ...
    s.nvlink = s.launch("platform=a100_nvlink_40,a100_nvlink_80", "gpus=1", *ONE_CPU, *QUICK, "hydra.launcher.wait=true",
                        timeout=600)
    # ... and exit 3 naming the failed point, after SLURM ended its job. Rank 1 of 2 fails at
    # iteration 2; rank 0 alone would sleep on for far longer than the time limit (the sleep
    # trainer's ranks never communicate).
    s.failing = s.launch("platform=v100", "gpus=2", "trainer=sleep", "+trainer.params.fail_rank=1",
                         "+trainer.params.fail_at_iteration=2", "trainer.params.a_s=0.001", "trainer.params.c_s=0",
                         "experiment=smoke", "experiment.base_iterations=100000000", "experiment.until_time_limit=true", "platform.time_limit_min=2",
                         *ONE_CPU, "hydra.launcher.wait=true", expect=3, timeout=600)
    yield s
    s.cancel_all()


@pytest.fixture(scope="module")
def sweep(site):
    cid, res = site.sweep
    return cid, res, site.wait(cid, timeout=600)


@pytest.mark.slurm
def test_cancelled_jobs_show_as_cancelled(site):
    # first in the module, so that its jobs hold the cluster's GPUs only for a moment
    cid, _ = site.launch("platform=v100", "repeats=2", *ONE_CPU, *IDLE)
    points = until(lambda: (ps := site.points(cid)) and all(p["job_id"] for p in ps) and ps, 30, "job ids", every=1)
    res = site.campaign("cancel", cid, "--point", str(points[0]["idx"]))
    assert res.returncode == 0 and res.stdout == f"campaign {cid}: cancelled 1 point(s)\n", res.stderr
    # the other one from outside campaign: only sacct can tell
    subprocess.run(["scancel", points[1]["job_id"]], check=True)
    wait = site.wait(cid, timeout=60)
    assert wait.returncode == 1
    points = site.points(cid)
    assert [p["state"] for p in points] == ["cancelled", "cancelled"]
    assert points[0]["reason"].startswith("cancelled by campaign cancel (log: ")
    # sacct says who cancelled it if it had started; a task removed while pending has no row
    assert points[1]["reason"].startswith((f"cancelled by uid {os.getuid()} (log: ",
                                           "array task removed before it started (scancel)"))
    jobs = ",".join({p["job_id"].split("_")[0] for p in points})  # a task cancelled while pending has no row of its own
    out = subprocess.run(["sacct", "-j", jobs, "-X", "-n", "-P", "-o", "State"], capture_output=True, text=True).stdout
    assert out.split() and all(s.startswith("CANCELLED") for s in out.splitlines())


SWEEP = [("v100", 1), ("v100", 2), ("v100", 4), ("a100", 1), ("a100", 2), ("a100", 4)]


@pytest.mark.slurm
def test_the_readme_headline_sweep_submits_all_six_points_and_completes(site, sweep):
    """``campaign launch -m platform=v100,a100 gpus=1,2,4`` as the README writes it, without
    ``platform.compute_capability=null``: six points submitted, none refused, all completed."""
    cid, res, wait = sweep
    assert f"campaign {cid}: 6 of 6 point(s) submitted" in res.stdout and "refused" not in res.stderr, res.stderr
    assert wait.returncode == 0, wait.stdout + wait.stderr
    assert "6 point(s): 6 completed" in wait.stdout
    rows = site.ws.query(
        "select p.platform, p.gpus, p.job_id, p.log_path, count(r.rank), a.provenance from point p "
        "join attempt a on a.point_id = p.id join rank_timing r on r.attempt_id = a.id "
        "where p.campaign_id = ? group by p.id order by p.idx", cid)
    assert [(r[0], r[1], r[4]) for r in rows] == [(platform, gpus, gpus) for platform, gpus in SWEEP]
    for platform, gpus, job_id, log_path, _, prov in rows:
        assert re.fullmatch(r"\d+_0", job_id)  # one array (of one point) per resource group
        assert log_path.endswith(f"/{job_id}_0_log.err") and Path(log_path).exists()
        prov = json.loads(prov)
        assert prov["emulated_gpus"] is True and prov["backend"] == ("gloo" if gpus > 1 else "none")
        assert prov["world_size"] == gpus and prov["slurm_nodelist"]
    script = Path(rows[1][3]).parent / f"{rows[1][2].split('_')[0]}_submission.sh"
    text = script.read_text()
    for line in ("--partition=v100", "--gpus-per-node=2", "--ntasks-per-node=2", "--cpus-per-task=1", "--array=0-0%1"):
        assert f"#SBATCH {line}\n" in text


@pytest.mark.slurm
def test_harvest_gives_a_speedup_table(site, sweep):
    cid, _, _ = sweep
    res = site.campaign("harvest", cid, "--to", "csv")
    assert res.returncode == 0, res.stderr
    rows = list(csv.DictReader(io.StringIO(res.stdout)))
    assert sorted((r["platform"], r["gpus"]) for r in rows) == sorted((p, str(g)) for p, g in SWEEP)
    for r in rows:
        t1 = next(float(x["time_s"]) for x in rows if x["platform"] == r["platform"] and x["gpus"] == "1")
        assert float(r["speedup"]) == pytest.approx(t1 / float(r["time_s"]))


@pytest.mark.slurm
def test_harvest_breaks_the_synthetic_trainers_time_into_its_phases(site, sweep):
    """The synthetic trainer's computation/communication breakdown at every GPU count of the
    sweep, with the timed gradient all-reduce of more than one rank (the other trainers' and
    engines': tests/test_trainers_slurm.py)."""
    cid, _, _ = sweep
    out = site.campaign("harvest", cid, "--table", "breakdown", "--to", "csv")
    assert out.returncode == 0, out.stdout + out.stderr
    table = list(csv.DictReader(io.StringIO(out.stdout)))
    for platform, gpus in SWEEP:
        seen = {r["phase"] for r in table if r["platform"] == platform and int(r["gpus"]) == gpus}
        assert {"forward", "backward", "step"} <= seen, (platform, gpus, sorted(seen))
        assert ("comm_exposed" in seen) == (gpus > 1), (platform, gpus, sorted(seen))


@pytest.mark.slurm
def test_nvlink_platforms_submit_with_their_constraint(site):
    """Launched with hydra.launcher.wait=true: its exit 0 came once both jobs completed."""
    cid, _ = site.nvlink
    points = site.points(cid)
    assert [p["state"] for p in points] == ["completed", "completed"], points  # no wait of ours
    jobs = [p["job_id"].split("_")[0] for p in points]

    def sacct():  # the store hears of completion before SLURM sees the job's processes end
        out = subprocess.run(["sacct", "-j", ",".join(jobs), "-X", "-n", "-P", "-o", "JobID,Partition,Constraints,State"],
                             capture_output=True, text=True, check=True).stdout
        got = sorted(tuple(line.split("|")[1:]) for line in out.splitlines())
        return got if all(g[2] == "COMPLETED" for g in got) else None

    got = until(sacct, 30, "sacct to show both jobs COMPLETED", every=1)
    assert got == [("a100_nvlink", "a100_40g", "COMPLETED"), ("a100_nvlink", "a100_80g", "COMPLETED")]


@pytest.mark.slurm
def test_rejected_group_reports_slurms_message_while_the_other_runs(site):
    cid, res = site.rejected
    assert f"campaign {cid}: 2 of 4 point(s) submitted" in res.stdout
    msg = "Batch job submission failed: Invalid feature specification"
    assert res.stdout.count(f"rejected: {msg}") == 2
    # exit status 3: stored, two points not submitted, named with SLURM's message and the retry
    assert res.stderr.startswith(f"error: campaign {cid}: 2 of 4 point(s) were not submitted (#2 platform=v100 gpus=1")
    assert f"not submitted: {msg}" in res.stderr and f"campaign resume {cid}" in res.stderr
    wait = site.wait(cid)
    assert wait.returncode == 1  # not every point completed
    points = site.points(cid)
    assert [p["state"] for p in points] == ["completed", "completed", "rejected", "rejected"]
    assert points[0]["job_id"].split("_")[0] == points[1]["job_id"].split("_")[0]  # one array of two
    assert {points[0]["job_id"][-2:], points[1]["job_id"][-2:]} == {"_0", "_1"}
    assert points[2]["reason"] == points[3]["reason"] == msg


@pytest.mark.slurm
def test_job_past_its_time_limit_shows_as_timeout(site):
    cid, _ = site.timeout
    wait = site.wait(cid, timeout=180)  # SLURM checks limits every 30 s: a 1-minute job ends 60-90 s in
    assert wait.returncode == 1
    (p,) = site.points(cid)
    assert p["state"] == "timeout", p
    assert re.match(r"time limit reached after 00:01:\d\d \(log: .*_0_log\.err\)$", p["reason"])


@pytest.mark.slurm
def test_a_failing_rank_ends_the_job_and_is_named(site):
    """srun --kill-on-bad-exit: rank 1's error ends rank 0 too (else the point would run
    into its 2-minute time limit), and the reason is rank 1's, with rank 1's log. Its launch
    waited (hydra.launcher.wait=true): exit 3, one line naming the point and rank 1's error."""
    cid, launched = site.failing
    assert "1 of 1 point(s) failed (#0 platform=v100 gpus=2 trainer=sleep" in launched.stderr, launched.stderr
    assert "rank 1: RuntimeError: injected failure" in launched.stderr and launched.stderr.count("\n") == 1
    wait = site.wait(cid, timeout=300)
    assert wait.returncode == 1
    (p,) = site.points(cid)
    assert p["state"] == "failed", p
    assert p["reason"].startswith("rank 1: RuntimeError: injected failure (trainer.params.fail_rank=1) at iteration 2")
    assert re.search(r"\(log: .*_1_log\.err\)$", p["reason"]), p["reason"]


@pytest.mark.slurm
def test_hostile_names_and_paths_reach_slurm_intact(cluster, tmp_path):
    """What submitit's quoting writes, SLURM reads back exactly (held job, then cancelled)."""
    from campaign.backends import sbatch as sb

    folder = tmp_path / "it's a 'results' dir #1 $(id)" / "jobs"
    folder.mkdir(parents=True)
    res = {"nodes": 1, "tasks_per_node": 1, "gpus_per_node": 1, "cpus_per_task": 1, "timeout_min": 5,
           "partition": "v100", "constraint": None, "account": None, "qos": None, "mem_gb": None,
           "extra_sbatch": ["--comment=a'; echo foo #x", "--hold"]}
    params = dict(sb.sbatch_parameters(Resources(**res), "x"), job_name="a'; echo foo")  # unsanitised, on purpose
    script = folder / "s.sh"
    script.write_text(sb.render_sbatch(params, folder, None, 1))
    out = subprocess.run(["sbatch", str(script)], capture_output=True, text=True, check=True).stdout
    job = out.split()[-1]
    try:
        info = subprocess.run(["squeue", "-h", "-j", job, "-o", "%j|%k"], capture_output=True, text=True).stdout
        show = subprocess.run(["scontrol", "show", "job", job], capture_output=True, text=True).stdout
    finally:
        subprocess.run(["scancel", job])
    assert info.strip() == "a'; echo foo|a'; echo foo #x"
    # the array is not split yet (held): SLURM shows a placeholder task index
    assert re.search(rf"^\s*StdErr={re.escape(str(folder))}/{job}_\d+_0_log\.err$", show, re.M), show


@pytest.mark.slurm
def test_max_array_size_is_read_from_the_cluster(cluster):
    from campaign.backends.slurm import SlurmBackend

    assert SlurmBackend().max_array_size() == int(
        re.search(r"MaxArraySize\s*=\s*(\d+)", subprocess.run(["scontrol", "show", "config"], capture_output=True,
                                                                text=True).stdout).group(1))


def test_array_task_cancelled_while_pending_is_cancelled_not_pending():
    """scancel of a still-pending array task leaves no sacct row of its own, while its
    siblings have theirs: after sacct's lag it is cancelled (not pending for 5 minutes)."""
    point = {"job_id": "602_1", "submitted_at": 900.0}
    got = sa.observation(None, None, point, now=1000.0, siblings_known=True)
    assert got.state == "cancelled" and "removed before it started" in got.reason
    assert sa.observation(None, None, point, now=905.0, siblings_known=True).state == "pending"  # sacct's lag
    assert sa.observation(None, None, point, now=1000.0, siblings_known=False).state == "pending"
