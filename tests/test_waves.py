"""The pure parts of resume, waves, retries and attempt numbering: which points a wave
takes under which caps, what SLURM's answers say of the caps, an sbatch that got no
answer found in the queue instead of submitted twice, the throttle in the sbatch
script, --max-retries, the overrides a resume takes, the attempt a job is."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from campaign.backends.base import Limit
from campaign.backends.resources import Resources
from campaign.backends.slurm_limits import (
    parse_assoc_max_submit,
    parse_config_value,
    parse_qos_max_submit,
    parse_queue,
    room_limits,
)
from campaign.common.errors import CampaignError, ConfigError, SubmitError
from campaign.launch.waves import plan_wave
from campaign.common.proc import CommandError, Completed


def _plan(platform="v100", qos=None, max_submit=None, account=None):
    return SimpleNamespace(config={"platform": {"name": platform, "qos": qos, "max_submit": max_submit,
                                                "account": account}})


def test_a_wave_fills_every_cap_in_sweep_order():
    limits = [Limit("the cluster's MaxJobCount=10", 3), Limit("QOS long", 1, frozenset({0, 1}))]
    wave = plan_wave(5, limits)
    assert wave.now == [0, 2, 3]  # 1 waits for the QOS, 4 for the cluster
    assert wave.later[1] == "waiting for room: QOS long; campaign resume submits it when jobs end"
    assert wave.later[4].startswith("waiting for room: the cluster's MaxJobCount=10")
    assert plan_wave(2, []).now == [0, 1] and plan_wave(2, [Limit("x", -5)]).now == []


def test_slurm_caps_are_read_from_its_answers():
    assert parse_config_value("MaxArraySize            = 1001\nMaxJobCount             = 10000\n", "MaxJobCount") == 10000
    assert parse_config_value("MaxJobCount = 0\n", "MaxJobCount") is None
    assert parse_assoc_max_submit("proj|50\nother|20\nroot|\n", None) == 20
    assert parse_assoc_max_submit("proj|50\nother|20\n", "proj") == 50
    assert parse_assoc_max_submit("root|\n", None) is None
    assert parse_qos_max_submit("normal||\nlong|4|\n") == {"long": 4}
    assert parse_queue("normal|proj\nlong|proj\n") == [("normal", "proj"), ("long", "proj")]


def test_room_is_what_each_cap_leaves_with_the_queue_counted():
    plans = [_plan(qos="long"), _plan(qos="long"), _plan(platform="a100")]
    limits = room_limits(plans, max_job_count=100, all_jobs=87, assoc_max_submit=10, qos_max_submit={"long": 2},
                         mine=[("long", "p"), ("normal", "p")])
    by_what = {lim.what: lim for lim in limits}
    assert by_what["the cluster's MaxJobCount=100 (11 kept free)"].room == 2  # 100 - (1 + 10 %) - 87
    assert by_what["your association's MaxSubmitJobs=10"].room == 8
    qos = by_what["MaxSubmitJobsPerUser=2 of QOS long"]
    assert qos.room == 1 and qos.used == 1 and qos.applies_to == frozenset({0, 1})
    assert plan_wave(3, limits).now == [0, 2]  # the QOS holds the second long point back


def test_max_submit_caps_the_campaigns_own_points_in_the_scheduler():
    from campaign.launch.waves import campaign_limits, in_flight

    plans = [_plan(platform="a100", max_submit=3), _plan(), _plan(platform="a100", max_submit=3)]
    flying = in_flight([{"platform": "a100", "state": s} for s in ("running", "pending", "failed", "completed")])
    assert flying == {"a100": 2}
    (cap,) = campaign_limits(plans, flying)
    assert cap.room == 1 and cap.applies_to == frozenset({0, 2})
    assert cap.what == "platform.max_submit=3 of platform a100 (this campaign's points in the scheduler at once)"
    assert plan_wave(3, [cap]).now == [0, 1]


def _runner(answers, calls):
    def run(argv, **kw):
        calls.append(list(argv))
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return Completed(list(argv), *answer)
    return run


def test_an_sbatch_that_got_no_answer_is_found_in_the_queue_not_submitted_twice(tmp_path):
    from campaign.backends.slurm import run_sbatch

    calls, sleeps, asked = [], [], []
    timeout = CommandError(["sbatch"], "no answer within 60 s")
    found = run_sbatch(tmp_path / "s.sh", runner=_runner([timeout], calls), sleep=sleeps.append,
                       find_queued=lambda: asked.append(1) or "4242")
    assert found == "Submitted batch job 4242\n" and len(calls) == 1 and sleeps == [1.0] and asked == [1]
    calls.clear()
    again = run_sbatch(tmp_path / "s.sh", runner=_runner([timeout, (0, "Submitted batch job 7\n", "")], calls),
                       sleep=sleeps.append, find_queued=lambda: None)
    assert again == "Submitted batch job 7\n" and len(calls) == 2  # not queued: tried again
    with pytest.raises(SubmitError, match="no answer within 60 s"):  # without a way to look, no answer is final
        run_sbatch(tmp_path / "s.sh", runner=_runner([timeout], []), sleep=sleeps.append)
    with pytest.raises(SubmitError, match=r"sbatch: no answer within 60 s \(the job is not in the queue\)"):
        run_sbatch(tmp_path / "s.sh", attempts=2, runner=_runner([timeout, timeout], []), sleep=sleeps.append,
                   find_queued=lambda: None)


def test_queued_with_comment_reads_squeue():
    from campaign.backends.slurm import queued_with_comment

    out = "101|(null)\n102|campaign-submission-abc\n"
    assert queued_with_comment("campaign-submission-abc", _runner([(0, out, "")], [])) == "102"
    assert queued_with_comment("campaign-submission-zzz", _runner([(0, out, "")], [])) is None
    assert queued_with_comment("x", _runner([CommandError(["squeue"], "no answer within 60 s")], [])) is None


def test_max_running_is_the_arrays_throttle(tmp_path):
    import campaign.backends.sbatch as sb

    res = Resources(nodes=1, tasks_per_node=1, gpus_per_node=1, cpus_per_task=1, timeout_min=5, partition="v100",
                    max_running=2)
    assert "#SBATCH --array=0-9%2" in sb.render_sbatch(sb.sbatch_parameters(res, "n"), tmp_path, None, 10)
    default = Resources(nodes=1, tasks_per_node=1, gpus_per_node=1, cpus_per_task=1, timeout_min=5)
    assert f"#SBATCH --array=0-999%{sb.DEFAULT_MAX_RUNNING}" in sb.render_sbatch(
        sb.sbatch_parameters(default, "n"), tmp_path, None, 1000)
    assert sb.group_key(res) != sb.group_key(default)  # a throttle of its own: an array of its own


def test_max_retries_option_is_the_config_key():
    from campaign.launch.main import max_retries_override

    assert max_retries_override(["-m", "--max-retries", "2", "gpus=1"]) == ["-m", "max_retries=2", "gpus=1"]
    assert max_retries_override(["--max-retries=0"]) == ["max_retries=0"]
    for bad in (["--max-retries"], ["--max-retries", "-1"], ["--max-retries=two"]):
        with pytest.raises(CampaignError, match="--max-retries takes a whole number"):
            max_retries_override(bad)


def test_retry_on_and_checkpoint_every_are_checked_at_launch():
    from campaign.launch.plan import check_recovery

    ok = {"max_retries": 1, "retry_on": ["node_fail", "failed"], "experiment": {"checkpoint_every": 0}}
    check_recovery(ok)
    with pytest.raises(ConfigError, match="retry_on: unknown state 'nodefail'; valid: failed, cancelled"):
        check_recovery(dict(ok, retry_on=["nodefail"]))
    with pytest.raises(ConfigError, match="max_retries must be an integer >= 0, got -1"):
        check_recovery(dict(ok, max_retries=-1))
    with pytest.raises(ConfigError, match="experiment.checkpoint_every must be an integer >= 0"):
        check_recovery(dict(ok, experiment={"checkpoint_every": -3}))


def test_resume_takes_values_and_refuses_what_makes_another_point():
    from campaign.launch.overrides import parse_overrides

    assert parse_overrides(["platform.time_limit_min=120", "trainer.params.fail_rank=null"]) == [
        ("platform.time_limit_min", 120), ("trainer.params.fail_rank", None)]
    for line, message in (("nodes=2", "changes what the point is (nodes)"), ("trainer=vit", "picks another trainer"),
                          ("seed=1,2", "is a sweep"), ("~platform.qos", "KEY=VALUE only"),
                          ("store.url=sqlite:///x.db", "changes what the point is (store.url)")):
        with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
            parse_overrides([line])


def test_a_job_numbers_its_attempt_from_its_submission(tmp_path, monkeypatch):
    """A resubmission (base 2) is attempt 2 on its first run and 3 after one SLURM requeue;
    locally a requeue is counted from the attempts of this submission that started."""
    import time

    from sqlalchemy import insert

    from campaign.store import open_store
    from campaign_sql.schema import attempt
    from trainers.writer import JobWriter

    url = f"sqlite:///{tmp_path}/c.db"
    with open_store(url, create=True) as s:
        (pid,) = s.register({"id": "c", "created_at": 1.0}, [dict(idx=0, platform="local", trainer="t", experiment="e",
                                                                   dataset="d", gpus=1, nodes=1, repeat=0,
                                                                   executor="local", state="registered")])
    writer = JobWriter(url)
    monkeypatch.setenv("SLURM_RESTART_COUNT", "1")
    assert writer.attempt_number(pid, 2) == 3
    monkeypatch.setenv("SLURM_RESTART_COUNT", "0")
    assert writer.attempt_number(pid, 2) == 2
    monkeypatch.delenv("SLURM_RESTART_COUNT")
    with writer.engine.begin() as conn:
        conn.execute(insert(attempt), [dict(point_id=pid, attempt_no=n, state="failed") for n in (0, 1)]
                     + [dict(point_id=pid, attempt_no=2, state="registered")])
    assert writer.attempt_number(pid, 2) == 2  # opened at submission, not started: this run is it
    with writer.engine.begin() as conn:
        conn.exec_driver_sql(f"update attempt set started_at = {time.time()} where attempt_no = 2")
    assert writer.attempt_number(pid, 2) == 3  # it started before: this is its requeue
    assert writer.attempt_number(pid, None) == 3  # a job of an older launch: counted as it always was
    writer.close()
    assert Path(tmp_path / "c.db").exists()


def test_a_requeued_job_closes_its_earlier_run(tmp_path, monkeypatch):
    """SLURM requeued a job (no checkpoint: a node failure with JobRequeue): its next run
    starts as the next attempt and the earlier one, which never said how it ended, is
    recorded requeued; another job's attempt is left alone."""
    from campaign.store import open_store
    from trainers.writer import JobWriter

    url = f"sqlite:///{tmp_path}/c.db"
    with open_store(url, create=True) as s:
        (pid,) = s.register({"id": "c", "created_at": 1.0}, [dict(idx=0, platform="v100", trainer="t", experiment="e",
                                                                   dataset="d", gpus=1, nodes=1, repeat=0,
                                                                   executor="slurm", state="registered")])
        assert s.open_attempts([pid], origin="launch") == {pid: 0}
    writer = JobWriter(url)
    monkeypatch.setenv("SLURM_RESTART_COUNT", "0")
    writer.start_attempt(pid, job_id="5_0", world_size=1, provenance={}, attempt_base=0)
    monkeypatch.setenv("SLURM_RESTART_COUNT", "1")
    key = writer.start_attempt(pid, job_id="5_0", world_size=1, provenance={}, attempt_base=0)
    writer.finish_attempt(key, pid, "completed")
    writer.close()
    with open_store(url, readonly=True) as s:
        rows = s.attempts("c")
    assert [(a["attempt_no"], a["state"], a["origin"]) for a in rows] == [(0, "requeued", "launch"),
                                                                         (1, "completed", "requeue")]
    assert rows[0]["reason"] == "requeued: attempt 1 of the same job started" and rows[0]["ended_at"]


def test_resume_chooses_what_did_not_complete_and_leaves_the_rest():
    from campaign.launch.resume import RESUMABLE, choose, due, parse_states

    states = ["completed", "running", "pending", "requeued", "spooled", "registered", "waiting", "failed", "timeout",
              "cancelled", "lost", "rejected", "node_fail", "preempted", "out_of_memory"]
    points = [{"id": i, "state": s} for i, s in enumerate(states)]
    chosen, left = choose(points)
    assert [p["state"] for p in chosen] == ["waiting", "failed", "timeout", "cancelled", "lost", "rejected", "node_fail",
                                            "preempted", "out_of_memory"]
    assert left == {"completed": 1, "running": 1, "pending": 1, "requeued": 1, "spooled": 1, "registered": 1}
    chosen, _ = choose(points, parse_states("failed,timeout"))
    assert [p["state"] for p in chosen] == ["failed", "timeout"]
    assert "completed" not in RESUMABLE and "running" not in RESUMABLE
    retry_on = {"max_retries": 2, "retry_on": ["node_fail"]}
    waiting, retry = due([{"id": 1, "state": "node_fail", "retries": 1, "config": retry_on},
                          {"id": 2, "state": "node_fail", "retries": 2, "config": retry_on},
                          {"id": 3, "state": "failed", "retries": 0, "config": retry_on},
                          {"id": 4, "state": "waiting", "retries": 0, "config": {}}])
    assert [p["id"] for p in retry] == [1] and [p["id"] for p in waiting] == [4]


# ---------------------------------------------------------------- headroom under MaxJobCount (issue 26)

@pytest.mark.parametrize("cap,records,reserve,room", [
    (10000, 0, 1001, 8999),  # the local SLURM, empty: 1 the controller never admits + 1,000 (10 %)
    (10000, 12, 1001, 8987),  # 12 jobs of anyone's already hold records
    (10000, 9500, 1001, -501),  # fuller than the headroom: nothing goes (plan_wave reads it as 0)
    (5, 0, 2, 3),  # 10 % of 5 rounds up to 1
    (1001, 0, 102, 899),  # 100.1 rounds up to 101
])
def test_max_job_count_leaves_the_controller_its_headroom(cap, records, reserve, room):
    from campaign.backends.slurm_limits import max_job_count_reserve

    assert max_job_count_reserve(cap) == reserve
    (limit,) = room_limits([_plan()], max_job_count=cap, all_jobs=records, assoc_max_submit=None, qos_max_submit={},
                           mine=[])
    assert limit.room == room and limit.used == records
    assert limit.what == f"the cluster's MaxJobCount={cap} ({reserve} kept free)"
    # what slurmctld admits (records + n >= MaxJobCount is refused): a full wave still fits with the reserve to spare
    n = len(plan_wave(20000, [limit]).now)
    assert n == max(0, room) and (n == 0 or records + n == cap - reserve < cap)


def test_the_headroom_is_read_from_scontrol_and_every_users_records(monkeypatch):
    """A fake ``scontrol show config`` (MaxJobCount = 20) and ``squeue -a -r -t all`` (7 records,
    ended ones included): room 20 - 3 - 7 = 10; without squeue's answer the cap is left out."""
    import campaign.backends.slurm_limits as sl

    monkeypatch.setattr(sl, "_caps_cache", {})
    config = "MaxArraySize            = 1001\nMaxJobCount             = 20\nMinJobAge               = 600 sec\n"
    answers = {"squeue": (0, "".join(f"{i}\n" for i in range(7)), ""), "sacctmgr": (1, "", "no accounting")}
    calls = []

    def runner(argv, **kw):
        calls.append(list(argv))
        return Completed(list(argv), *answers[argv[0]])

    (limit,) = sl.slurm_limits([_plan()], config, runner)
    assert limit.room == 10 and limit.used == 7 and limit.what == "the cluster's MaxJobCount=20 (3 kept free)"
    assert ["squeue", "-h", "-a", "-r", "-t", "all", "-o", "%i"] in calls
    answers["squeue"] = (1, "", "slurm_load_jobs error: Unable to contact slurm controller")
    assert sl.slurm_limits([_plan()], config, runner) == []


FULL_STDERR = ("sbatch: error: Slurm temporarily unable to accept job, sleeping and retrying\n"
               "sbatch: error: Batch job submission failed: Resource temporarily unavailable\n")


def test_sbatch_messages_that_say_the_controller_is_full():
    import campaign.backends.sbatch as sb

    assert sb.controller_full(FULL_STDERR) == "Slurm temporarily unable to accept job, sleeping and retrying"
    assert sb.controller_full("sbatch: error: Batch job submission failed: Resource temporarily unavailable") == \
        "Batch job submission failed: Resource temporarily unavailable"
    assert sb.controller_full("sbatch: error: Slurm job queue full, sleeping and retrying\n") == \
        "Slurm job queue full, sleeping and retrying"
    assert sb.controller_full("error: MaxJobCount limit from slurm.conf reached (10000)")
    for other in ("", "sbatch: error: Batch job submission failed: Socket timed out on send/recv operation",
                  "sbatch: error: Unable to contact slurm controller (connect failure)",
                  "sbatch: error: invalid partition specified: nosuch"):
        assert sb.controller_full(other) is None
    reason = sb.full_reason(sb.controller_full(FULL_STDERR))
    from campaign.launch.waves import RESUME_HINT

    assert reason == ("waiting for room: SLURM's controller takes no more jobs now (sbatch: Slurm temporarily "
                      f"unable to accept job, sleeping and retrying); {RESUME_HINT}")


def test_a_full_controller_is_not_retried_nor_taken_for_a_dead_one(tmp_path):
    """sbatch that says "full" and exits, or is stopped at the 60 s timeout while still saying
    so (it retries by itself for two minutes): ControllerFull after one call, never four 60 s
    waits; a job found queued all the same is submitted. A timeout with nothing said (a dead
    controller) keeps its handling: looked for, then tried again."""
    from campaign.backends.slurm import ControllerFull, run_sbatch

    calls, sleeps = [], []
    with pytest.raises(ControllerFull, match="^Slurm temporarily unable to accept job, sleeping and retrying$"):
        run_sbatch(tmp_path / "s.sh", runner=_runner([(1, "", FULL_STDERR)], calls), sleep=sleeps.append,
                   find_queued=lambda: None)
    assert len(calls) == 1 and sleeps == []
    stopped = CommandError(["sbatch"], "no answer within 60 s", stderr=FULL_STDERR.splitlines()[0] + "\n")
    calls.clear()
    with pytest.raises(ControllerFull):
        run_sbatch(tmp_path / "s.sh", runner=_runner([stopped, stopped], calls), sleep=sleeps.append,
                   find_queued=lambda: None)
    assert len(calls) == 1
    with pytest.raises(ControllerFull):  # without a way to look in the queue: full all the same
        run_sbatch(tmp_path / "s.sh", runner=_runner([stopped], []), sleep=sleeps.append)
    assert run_sbatch(tmp_path / "s.sh", runner=_runner([stopped], []), sleep=sleeps.append,
                      find_queued=lambda: "31") == "Submitted batch job 31\n"  # its last try got through
    dead = CommandError(["sbatch"], "no answer within 60 s")
    calls.clear()
    assert run_sbatch(tmp_path / "s.sh", runner=_runner([dead, (0, "Submitted batch job 8\n", "")], calls),
                      sleep=sleeps.append, find_queued=lambda: None) == "Submitted batch job 8\n"
    assert len(calls) == 2
    assert issubclass(ControllerFull, SubmitError)


@pytest.mark.slow
def test_a_timeout_keeps_what_the_program_said_until_then():
    """proc.run stops a program at its timeout and keeps its stderr so far: how a full
    controller is told from a dead one."""
    from campaign.common.proc import run

    with pytest.raises(CommandError, match="no answer within 3 s") as info:
        run(["/bin/sh", "-c", "echo 'queue full' >&2; exec sleep 30"], timeout=3)
    assert info.value.stderr == "queue full\n"


def test_a_cancelled_waiting_point_closes_its_open_attempt_only(tmp_path):
    """``campaign cancel`` of a waiting point ends its open attempt (never handed to a
    scheduler) as cancelled; an attempt that has a job is the job's to close."""
    from sqlalchemy import select

    from campaign.store import open_store
    from campaign_sql.schema import attempt

    row = dict(platform="local", trainer="t", experiment="e", dataset="d", gpus=1, nodes=1, repeat=0,
               executor="local", state="registered")
    with open_store(f"sqlite:///{tmp_path}/c.db", create=True) as s:
        waiting, running = s.register({"id": "c", "created_at": 1.0}, [dict(row, idx=0), dict(row, idx=1)])
        s.hold([waiting], "waiting for room")
        s.open_attempts([running], origin="launch")
        s.mark_submitted([{"point_id": running, "job_id": "7", "job_folder": None, "attempt_no": 0}])
        s.close_open_attempts([waiting, running], "cancelled", "cancelled by campaign cancel", 5.0)
        with s.engine.connect() as conn:
            got = conn.execute(select(attempt.c.point_id, attempt.c.state, attempt.c.reason, attempt.c.ended_at)
                               .order_by(attempt.c.point_id)).all()
    assert [tuple(r) for r in got] == [(waiting, "cancelled", "cancelled by campaign cancel", 5.0),
                                       (running, "pending", None, None)]
