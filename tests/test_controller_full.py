"""An sbatch that meets a full SLURM controller (issue 26): its points, and those of the
arrays after it, stay ``waiting`` for the next wave, never ``rejected``; sbatch is not
called again for them; the launch says so and exits 0; ``campaign resume`` submits them
once the controller takes jobs. Fake SLURM commands on PATH (no cluster), the caps read
from a fake ``scontrol show config``."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

from campaign.backends.resources import Resources
from campaign.common.proc import Completed
from conftest import EMULATED_GPUS, campaign_id_from
from job_specs import a_spec

FULL = ("sbatch: error: Slurm temporarily unable to accept job, sleeping and retrying\n"
        "sbatch: error: Batch job submission failed: Resource temporarily unavailable\n")
SMALL = ["trainer.params.width=4", "trainer.params.depth=2", "dataset.image_size=8", "experiment=smoke",
         "platform.cpus_per_task=1", EMULATED_GPUS]


@pytest.mark.skipif(shutil.which("srun") is None, reason="submitit's SlurmExecutor needs srun on PATH")
def test_the_arrays_after_a_full_controller_wait_untried(tmp_path, monkeypatch):
    """Three resource groups: the first array goes, the second meets the cap, the third
    is never handed to sbatch; both wait with sbatch's own words."""
    from campaign.backends import slurm

    calls = []

    def fake_run(argv, **kw):
        calls.append(list(argv))
        if argv[0] == "squeue":  # the lookup of a submission by its comment: not queued
            return Completed(list(argv), 0, "", "")
        if len(calls) == 1:
            return Completed(list(argv), 0, "Submitted batch job 101\n", "")
        return Completed(list(argv), 1, "", FULL)

    monkeypatch.setattr(slurm, "run", fake_run)
    backend = slurm.SlurmBackend()
    backend._max_array = 1001
    base = {"nodes": 1, "tasks_per_node": 1, "gpus_per_node": 1, "cpus_per_task": 1, "timeout_min": 5,
            "constraint": None, "account": None, "qos": None, "mem_gb": None, "extra_sbatch": []}
    items = [(SimpleNamespace(resources=Resources(**dict(base, partition=part))), a_spec(pid, campaign_id="c1"))
             for pid, part in [(1, "v100"), (2, "a100"), (3, "a100"), (4, "a100_nvlink")]]
    out = backend.submit(items, tmp_path / "jobs", None)
    assert [c[0] for c in calls] == ["sbatch", "sbatch"]  # the third array: untried
    assert [s.job_id for s in out] == ["101_0", None, None, None]
    assert [s.error for s in out] == [None] * 4
    why = ("waiting for room: SLURM's controller takes no more jobs now (sbatch: Slurm temporarily unable to accept "
           "job, sleeping and retrying); campaign resume submits it when jobs end")
    assert [s.waiting for s in out] == [None, why, why, why]
    # nothing left of the array that did not go (its pickles and script)
    assert sorted(p.name for p in (tmp_path / "jobs").iterdir() if not p.name.startswith(".")) == [
        "101_0_submitted.pkl", "101_submission.sh"]


def _fake_slurm(bin_dir: Path, state: Path, max_job_count: int) -> None:
    """sinfo, scontrol, squeue (an empty cluster), sacctmgr (no accounting), srun, sacct
    and an sbatch that answers the cap while ``state/full`` exists (``state/sbatch.log``:
    one line per call)."""
    bin_dir.mkdir()
    scripts = {
        "sinfo": "printf 'v100\\na100\\na100_nvlink\\n'",
        "scontrol": f"printf 'MaxArraySize            = 1001\\nMaxJobCount             = {max_job_count}\\n'",
        "squeue": "exit 0",
        "sacct": "exit 0",
        "sacctmgr": "echo 'sacctmgr: error: no accounting' >&2; exit 1",
        "srun": "exit 0",
        "sbatch": (f"echo call >> {state}/sbatch.log\n"
                   f"if [ -e {state}/full ]; then cat {state}/full.txt >&2; exit 1; fi\n"
                   f"n=$(wc -l < {state}/sbatch.log); echo \"Submitted batch job $((500 + n))\""),
    }
    (state / "full.txt").write_text(FULL)
    for name, body in scripts.items():
        path = bin_dir / name
        path.write_text(f"#!/bin/sh\n{body}\n")
        path.chmod(0o755)


def test_a_launch_into_a_full_controller_leaves_its_points_waiting_and_resume_submits_them(ws, tmp_path):
    """MaxJobCount 5 on an empty cluster: a wave of 5 - (1 + 1) = 3 of the 4 points; sbatch
    answers the cap on the first array: all 4 wait (3 for the controller, 1 for the cap),
    none rejected, exit 0, one sbatch call. Once the controller takes jobs, ``campaign
    resume`` submits the next wave (3), the 4th still waiting for MaxJobCount."""
    state = tmp_path / "state"
    state.mkdir()
    (state / "full").touch()
    _fake_slurm(tmp_path / "bin", state, max_job_count=5)
    ws.env["PATH"] = f"{tmp_path / 'bin'}:{os.environ['PATH']}"
    res = ws.launch("-m", "platform=v100,a100", "gpus=1,2", *SMALL)
    assert res.returncode == 0, res.stdout + res.stderr
    cid = campaign_id_from(res.stdout)
    assert f"campaign {cid}: 0 of 4 point(s) submitted" in res.stdout
    assert (f"4 point(s) wait for room (SLURM's controller takes no more jobs now (sbatch: Slurm temporarily unable "
            f"to accept job, sleeping and retrying)): campaign resume {cid}") in res.stdout
    assert "rejected" not in res.stdout and "Traceback" not in res.stderr
    assert (state / "sbatch.log").read_text().count("call") == 1
    rows = ws.query("select idx, state, reason from point where campaign_id = ? order by idx", cid)
    assert [r[1] for r in rows] == ["waiting"] * 4
    assert [r[2].split(" (")[0] for r in rows] == ["waiting for room: SLURM's controller takes no more jobs now"] * 3 \
        + ["waiting for room: the cluster's MaxJobCount=5"]
    assert ws.query("select count(*), min(state), max(state) from attempt") == [(4, "waiting", "waiting")]

    (state / "full").unlink()
    again = ws.campaign("resume", cid)
    assert again.returncode == 0, again.stdout + again.stderr
    assert f"campaign {cid}: resubmitted 4 point(s) as new attempts (3 submitted)" in again.stdout
    rows = ws.query("select idx, state, job_id from point where campaign_id = ? order by idx", cid)
    assert [r[1] for r in rows] == ["pending", "pending", "pending", "waiting"]
    assert all(re.fullmatch(r"50\d_0", r[2]) for r in rows[:3]) and rows[3][2] is None
    # each point kept its one attempt (attempt 0: opened at launch, used when it went)
    assert ws.query("select count(*), max(attempt_no) from attempt") == [(4, 0)]


@pytest.mark.skipif(shutil.which("srun") is None, reason="submitit's SlurmExecutor needs srun on PATH")
def test_a_hydra_apps_array_into_a_full_controller_is_left_unsubmitted_with_one_line(tmp_path, monkeypatch):
    """``submit_callables`` (a Hydra app's points, campaign/launch/generic.py): sbatch meets
    a full controller once, never retried; every call comes back unsubmitted with one line
    naming the controller and what to do; nothing of the array is left in its folder; the
    campaign sweeper's error says the same, not "failed, see the logs"."""
    from hydra.core.utils import JobReturn, JobStatus

    from campaign.backends import slurm
    from campaign.common.errors import LaunchIncomplete, SubmitError
    from campaign.launch.generic import _return
    from campaign.launch.sweep import check_returns
    from omegaconf import OmegaConf

    calls = []

    def fake_run(argv, **kw):
        calls.append(list(argv))
        if argv[0] == "squeue":
            return Completed(list(argv), 0, "", "")
        return Completed(list(argv), 1, "", FULL)

    monkeypatch.setattr(slurm, "run", fake_run)
    res = Resources(nodes=1, tasks_per_node=1, gpus_per_node=0, cpus_per_task=1, timeout_min=5, partition="v100",
                    constraint=None, account=None, qos=None, mem_gb=None, extra_sbatch=())
    (tmp_path / "jobs").mkdir(mode=0o700)
    out = slurm.SlurmBackend().submit_callables([print, print, print], tmp_path / "jobs", res, "my app")
    assert [c[0] for c in calls] == ["sbatch"]
    why = ("SLURM's controller takes no more jobs now (sbatch: Slurm temporarily unable to accept job, sleeping and "
           "retrying); none of the array's 3 job(s) went: launch the sweep again when jobs end")
    assert [(job, type(err), str(err)) for job, err in out] == [(None, SubmitError, why)] * 3
    assert [p.name for p in (tmp_path / "jobs").iterdir() if not p.name.startswith(".")] == []
    assert list((tmp_path / "jobs").glob(".submission_file_*")) == []

    cfg = OmegaConf.create({"a": 1, "hydra": {"job": {"name": "my_app"}}})
    returns = [_return(cfg, [f"+a={i}"], outcome, wait=True) for i, outcome in enumerate(out[:2])]
    assert [r.status for r in returns] == [JobStatus.FAILED] * 2
    assert str(returns[0]._return_value) == f"job not submitted: {why}"
    with pytest.raises(LaunchIncomplete) as info:
        check_returns(SimpleNamespace(), returns)
    assert str(info.value) == f"2 of 2 job(s) failed (+a=0; +a=1): job not submitted: {why}"
    failed = JobReturn(overrides=["+a=2"], status=JobStatus.FAILED)
    failed.return_value = ValueError("boom")
    with pytest.raises(LaunchIncomplete, match=r"^3 of 3 job\(s\) failed \(.*\); their logs are in"):
        check_returns(SimpleNamespace(), [*returns, failed])  # a job that ran and failed: its logs, as before
