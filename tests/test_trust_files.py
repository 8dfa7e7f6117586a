"""Files in job folders are read as untrusted, job folders are made fresh (issue 30).

Each test crafts a job or results folder as someone who can write it would (a log that
is a symlink to /dev/zero, a FIFO, a 100 MB sparse file, a folder made before the
launch, world-writable, a symlink, another user's) and asserts a refusal or a safe
result: no read command hangs or grows past its bounds, nothing is written where
someone else could swap it. Tests run as root: "another user" is nobody (uid 65534).
"""

from __future__ import annotations

import json
import os
import stat
import sys
import time
from pathlib import Path

import pytest

from campaign.common.errors import ConfigError
from campaign.store import open_store
from campaign.common.untrusted import (TAIL_BYTES, Tail, check_shared_folder, make_job_folder, open_append, read_bytes,
                                read_tail, write_new)
from conftest import TINY, campaign_id_from, point_config

CID = "20260101-000000-bbbb"
NOBODY = 65534
BIG = 100 * 1024 * 1024
END = "Traceback (most recent call last):\n  File \"x.py\", line 1, in <module>\nRuntimeError: at the very end\n"


def _fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


def _sparse(path: Path, tail: str = "") -> Path:
    with open(path, "wb") as fh:
        fh.truncate(BIG)
        fh.seek(BIG)
        fh.write(f"\n{tail}".encode())  # the traceback on lines of its own after 100 MB of zeros
    return path


# ---------------------------------------------------------------- the one reading helper

def test_read_tail_refuses_what_is_not_a_regular_file_without_blocking(tmp_path):
    (tmp_path / "zero").symlink_to("/dev/zero")
    (tmp_path / "folder").mkdir()
    started = time.monotonic()
    assert read_tail(tmp_path / "zero") == Tail(None, "is not a regular file (a symbolic link)")
    assert read_tail(_fifo(tmp_path / "fifo")) == Tail(None, "is not a regular file (a FIFO)")  # no writer: no hang
    assert read_tail(tmp_path / "folder") == Tail(None, "is not a regular file (a directory)")
    assert read_tail("/dev/zero") == Tail(None, "is not a regular file (a device)")  # a store may name it directly
    assert read_tail(tmp_path / "missing") == Tail(None, "No such file or directory")
    assert time.monotonic() - started < 5


def test_read_tail_reads_only_the_bounded_tail_of_a_huge_file(tmp_path):
    got = read_tail(_sparse(tmp_path / "big", END))
    assert got.reason is None and len(got.text) == TAIL_BYTES and got.text.endswith(END)
    assert read_tail(tmp_path / "big", 10).text == END[-10:]
    (tmp_path / "bad").write_bytes(b"ok \xff\xfe end")
    assert read_tail(tmp_path / "bad").text == "ok \ufffd\ufffd end"  # undecodable bytes replaced


def test_read_bytes_gives_a_small_file_whole_and_refuses_a_larger_one(tmp_path):
    (tmp_path / "small").write_bytes(b"abc")
    assert read_bytes(tmp_path / "small", 3) == (b"abc", None)
    assert read_bytes(tmp_path / "small", 2) == (None, "is larger than 2 bytes (3)")
    assert read_bytes(_sparse(tmp_path / "big"), 1024)[1] == f"is larger than 1024 bytes ({BIG + 1})"
    (tmp_path / "link").symlink_to(tmp_path / "small")
    assert read_bytes(tmp_path / "link", 1024) == (None, "is not a regular file (a symbolic link)")


def test_a_log_path_the_store_names_is_read_as_untrusted(tmp_path):
    """SLURM's failure reason reads the log at the stored log_path: a device or FIFO is not read."""
    from campaign.backends.joblogs import log_exception
    from campaign.backends.slurm import SlurmBackend

    assert SlurmBackend._error_line({"log_path": "/dev/zero", "job_id": "5"}) is None
    fifo = _fifo(tmp_path / "5_0_log.err")
    assert SlurmBackend._error_line({"log_path": str(fifo), "job_id": "5"}) is None
    assert log_exception(str(_sparse(tmp_path / "6_0_log.err", END))) == "RuntimeError: at the very end"


# ---------------------------------------------------------------- status on a crafted job folder

DEAD = ["999999981", "999999982", "999999983", "999999984", "999999985"]  # no such processes


def _crafted(url: str, results: Path) -> Path:
    """Five running local points whose jobs are gone; their logs are a symlink to /dev/zero,
    a FIFO, a 100 MB sparse file ending in a traceback, a directory, and none at all (with a
    FIFO as the folder's controllers.log)."""
    folder = results / "jobs" / CID
    folder.mkdir(parents=True)
    (folder / f"{DEAD[0]}_0_log.err").symlink_to("/dev/zero")
    _fifo(folder / f"{DEAD[1]}_0_log.err")
    _sparse(folder / f"{DEAD[2]}_0_log.err", END)
    (folder / f"{DEAD[3]}_0_log.err").mkdir()
    _fifo(folder / "controllers.log")
    rows = [dict(idx=i, platform="local", trainer="synthetic", experiment="smoke", dataset="synthetic", gpus=1,
                 nodes=1, repeat=0, executor="local", state="running", iterations=8, batch_per_gpu=4, job_id=job,
                 job_folder=str(folder), reason=None, log_path=str(folder / f"{job}_0_log.err"),
                 config=point_config()) for i, job in enumerate(DEAD)]
    with open_store(url, create=True) as s:
        s.register({"id": CID, "created_at": time.time() - 3600, "name": "crafted", "results_dir": str(results)}, rows)
    return folder


# Runs a command as its child and reports its peak memory (ru_maxrss, KiB) with its result.
_MEASURED = ("import json, resource, subprocess, sys\n"
             "p = subprocess.run(sys.argv[1:], capture_output=True, text=True, timeout=60)\n"
             "peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss\n"
             "print(json.dumps([p.returncode, p.stdout, p.stderr, peak]))")


def _measured(ws, *args):
    res = ws.run(sys.executable, "-c", _MEASURED, sys.executable, "-m", "campaign", *args, timeout=90)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def test_status_reads_a_crafted_job_folder_promptly_within_bounds(ws):
    folder = _crafted(ws.store_url, ws.results)
    started = time.monotonic()
    code, out, err, peak_kib = _measured(ws, "status", CID, "--json")
    assert code == 0, err
    assert time.monotonic() - started < 60 and peak_kib < 400 * 1024 and len(out) < 20_000
    reasons = [(p["state"], p["reason"]) for p in json.loads(out)["points"]]
    unread = "job ended without reporting results (killed?); its log {0}_0_log.err is not a regular file ({1}), " \
             "not read (log: {2}/{0}_0_log.err)"
    assert reasons == [
        ("failed", unread.format(DEAD[0], "a symbolic link", folder)),
        ("failed", unread.format(DEAD[1], "a FIFO", folder)),
        ("failed", f"rank 0: RuntimeError: at the very end (the job ended without reporting it) "
                   f"(log: {folder}/{DEAD[2]}_0_log.err)"),
        ("failed", unread.format(DEAD[3], "a directory", folder)),
        # no "see controllers.log" either: it is a FIFO
        ("lost", f"nothing answers: no process of local job {DEAD[4]} and no log in {folder} "
                 f"(log: {folder}/{DEAD[4]}_0_log.err)"),
    ]
    code, out, err, peak_kib = _measured(ws, "status", CID)
    assert code == 0 and peak_kib < 400 * 1024 and len(out) < 20_000, err
    assert "5 point(s): 4 failed, 1 lost" in out


# ---------------------------------------------------------------- writes never follow links

def test_writes_in_a_job_folder_never_follow_a_link_nor_block(tmp_path):
    target = tmp_path / "victim"
    target.write_text("theirs")
    (tmp_path / "controllers.log").symlink_to(target)
    with pytest.raises(OSError) as exc:
        open_append(tmp_path / "controllers.log")
    assert "Too many levels of symbolic links" in str(exc.value)
    with pytest.raises(OSError):  # a FIFO with nobody reading: refused at once, never waited on
        open_append(_fifo(tmp_path / "fifo.log"))
    (tmp_path / "script.sh").symlink_to(target)
    with pytest.raises(FileExistsError):
        write_new(tmp_path / "script.sh", b"#!/bin/sh\n")
    assert target.read_text() == "theirs"
    os.close(open_append(tmp_path / "own.log"))
    assert stat.S_IMODE(os.stat(tmp_path / "own.log").st_mode) == 0o600


def test_the_local_backend_refuses_a_controllers_log_that_is_a_link(tmp_path):
    from campaign.backends.local import detached_stdio

    target = tmp_path / "victim"
    target.write_text("theirs")
    (tmp_path / "controllers.log").symlink_to(target)
    with pytest.raises(OSError), detached_stdio(tmp_path / "controllers.log"):
        pass
    assert target.read_text() == "theirs"


# ---------------------------------------------------------------- job folders made fresh

def _refusal(folder: Path, problem: str) -> str:
    return (f"job folder {folder} {problem}: another user could swap the files submitted there; "
            f"remove it (rm -r {folder}) or choose another results_dir, and submit again")


def test_a_launch_makes_its_job_folder_fresh_and_private(tmp_path):
    folder = tmp_path / "results" / "jobs" / CID
    assert make_job_folder(folder, fresh=True, shared=(tmp_path / "results",)) == folder
    assert stat.S_IMODE(os.lstat(folder).st_mode) == 0o700
    with pytest.raises(ConfigError) as exc:
        make_job_folder(folder, fresh=True)
    assert str(exc.value) == (f"job folder {folder} exists already: this launch did not make it, so it is not used; "
                              f"remove it (rm -r {folder}) and launch again")
    assert make_job_folder(folder, fresh=False) == folder  # its own campaign's resume uses it again


@pytest.mark.parametrize("craft, problem", [
    (lambda f: (f.mkdir(), f.chmod(0o777)), "is writable by others (drwxrwxrwx)"),
    (lambda f: (f.mkdir(mode=0o700), os.chown(f, NOBODY, NOBODY)), f"belongs to another user (uid {NOBODY})"),
    (lambda f: (f.parent.joinpath("elsewhere").mkdir(mode=0o700), f.symlink_to(f.parent / "elsewhere")),
     "is a symbolic link, not a folder"),
], ids=["world-writable", "someone-elses", "symlink"])
def test_a_job_folder_someone_else_made_is_refused(tmp_path, craft, problem):
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    craft(jobs / CID)
    with pytest.raises(ConfigError) as exc:
        make_job_folder(jobs / CID, fresh=False)
    assert str(exc.value) == _refusal(jobs / CID, problem)


def test_a_jobs_folder_of_another_user_is_refused(tmp_path):
    jobs = tmp_path / "jobs"
    jobs.mkdir(mode=0o755)
    os.chown(jobs, NOBODY, NOBODY)
    with pytest.raises(ConfigError) as exc:
        make_job_folder(jobs / CID, fresh=False)
    assert str(exc.value) == (f"results folder {jobs} belongs to another user (uid {NOBODY}), who could swap the job "
                              "folders in it; choose another results_dir")
    assert not (jobs / CID).exists()


def test_a_results_dir_others_can_write_needs_the_sticky_bit(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    with pytest.raises(ConfigError) as exc:
        check_shared_folder(shared, "results_dir")
    assert str(exc.value) == (f"results_dir {shared} is writable by others (drwxrwxrwx) without the sticky bit: they "
                              f"could swap the jobs' files; run chmod g-w,o-w {shared} (or chmod +t {shared} for a "
                              "shared folder)")
    shared.chmod(0o1777)  # like /tmp: nobody can rename what is not theirs
    check_shared_folder(shared, "results_dir")
    assert make_job_folder(shared / "jobs" / CID, fresh=True, shared=(shared,)).is_dir()


def test_a_results_dir_campaign_makes_is_not_group_writable_under_umask_002(tmp_path):
    from campaign.launch.preflight import check_writable_folder

    old = os.umask(0o002)  # common on clusters
    try:
        check_writable_folder(tmp_path / "results", "results_dir")
        make_job_folder(tmp_path / "results" / "jobs" / CID, fresh=True, shared=(tmp_path / "results",))
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(tmp_path / "results").st_mode) == 0o755
    assert stat.S_IMODE(os.stat(tmp_path / "results" / "jobs").st_mode) == 0o755
    assert stat.S_IMODE(os.stat(tmp_path / "results" / "jobs" / CID).st_mode) == 0o700


def test_a_launch_into_a_world_writable_results_dir_is_refused_before_anything_is_stored(ws):
    ws.results.mkdir()
    ws.results.chmod(0o777)
    res = ws.launch(*TINY)
    assert res.returncode == 2 and res.stderr == (
        f"error: results_dir {ws.results} is writable by others (drwxrwxrwx) without the sticky bit: they could swap "
        f"the jobs' files; run chmod g-w,o-w {ws.results} (or chmod +t {ws.results} for a shared folder)\n"), res.stderr
    assert not ws.db.exists() and not (ws.results / "jobs").exists()


def test_a_launch_whose_job_folder_exists_already_stores_nothing(tmp_path, monkeypatch):
    from campaign.launch import submit

    monkeypatch.setattr(submit, "new_campaign_id", lambda: CID)
    folder = tmp_path / "results" / "jobs" / CID
    folder.mkdir(parents=True)
    url = f"sqlite:///{tmp_path}/results/campaign.db"
    with pytest.raises(ConfigError) as exc:
        submit.register_and_submit([], store_url=url, results_dir=str(tmp_path / "results"), name=None, overrides=[],
                                   command="campaign launch")
    assert str(exc.value) == (f"job folder {folder} exists already: this launch did not make it, so it is not used; "
                              f"remove it (rm -r {folder}) and launch again")
    assert not (tmp_path / "results" / "campaign.db").exists()


@pytest.mark.parametrize("craft, problem", [
    (lambda f: (f.mkdir(), f.chmod(0o777)), "is writable by others (drwxrwxrwx)"),
    (lambda f: (f.mkdir(mode=0o700), os.chown(f, NOBODY, NOBODY)), f"belongs to another user (uid {NOBODY})"),
    (lambda f: f.symlink_to(f.parent.parent / "elsewhere"), "is a symbolic link, not a folder"),
], ids=["world-writable", "someone-elses", "symlink"])
def test_resume_into_a_job_folder_someone_else_made_submits_nothing_there(ws, craft, problem):
    """The launch could not make its folder (a file in the way); before the resume someone
    else makes it: the resume refuses the point, naming the folder and the fix, and no
    pickle lands in the crafted folder."""
    ws.results.mkdir(parents=True)
    (ws.results / "jobs").write_text("in the way")
    res = ws.launch(*TINY)
    assert res.returncode == 3, res.stdout + res.stderr
    cid = campaign_id_from(res.stdout)
    (ws.results / "jobs").unlink()
    (ws.results / "jobs").mkdir()
    (ws.results / "elsewhere").mkdir()
    folder = ws.results / "jobs" / cid
    craft(folder)
    again = ws.campaign("resume", cid)
    assert again.returncode == 3 and again.stderr == (
        f"error: campaign {cid}: 1 of 1 point(s) were not submitted (#0: {_refusal(folder, problem)}); "
        f"once the cause is fixed: campaign resume {cid}\n"), again.stderr
    assert ws.query("select state, reason from point") == [("rejected", _refusal(folder, problem))]
    assert list((ws.results / "elsewhere").iterdir()) == []
    if not folder.is_symlink():
        assert list(folder.iterdir()) == []
