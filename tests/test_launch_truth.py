"""A launch tells the truth: one exit-code policy (0 submitted or completed, 2 refused with
nothing stored, 3 stored but some point not submitted or failed, 130 interrupted), every
refusal one line, everything a point needs checked before it is stored, secrets out of
everything recorded, private files. On the local default; tests/test_slurm_launch.py
has the scheduler's cases."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import TINY, campaign_id_from, hydra_version_base_kept
from pg import drop_database

SLEEPY = ["trainer=sleep", "experiment.base_iterations=4", "experiment.warmup_iterations=0"]


def one_line_error(res, exit_code: int = 2) -> str:
    assert res.returncode == exit_code, res.stdout + res.stderr
    assert res.stderr.startswith("error: ") and res.stderr.count("\n") == 1, res.stderr
    assert "Traceback" not in res.stderr + res.stdout
    return res.stderr


# ------------------------------------------------------------------ refused before anything is stored (2)

REFUSED = [
    (["trainer.precision=fp8"], "trainer.precision=fp8: Invalid value 'fp8', expected one of [fp32, fp16, bf16]"),
    (["-m", "trainer.optimizer=sgd,adamx"], "trainer.optimizer=adamx: Invalid value 'adamx', expected one of [sgd, adamw]"),
    (["trainer=frozen_backbone", "trainer.params.engine=x"],
     "unknown trainer.params.engine 'x' for trainer=frozen_backbone; valid: ddp, dataparallel, vanilla"),
    (["trainer=synthetic", "+trainer.params.widht=4"], "unknown trainer.params.widht for trainer=synthetic (did you mean 'width'?); "
                                 "valid: width, depth, inject_data_delay_s, inject_comm_delay_s"),
    (["platform.device=tpu"], "platform.device=tpu: Invalid value 'tpu', expected one of [cpu, cuda]"),
    (["+gpu=2"], "unknown config key 'gpu' (did you mean 'gpus'?); valid keys at the top level: platform,"),
    (["gpu=2"], "unknown config key 'gpu' (did you mean 'gpus'?)"),
    (["+platform.partiton=x"], "unknown config key 'platform.partiton' (did you mean 'partition'?)"),
    (["platform.time_limit_min=-5"], "platform.time_limit_min must be > 0 (minutes), got -5"),
    (["platform.time_limit_min=0"], "platform.time_limit_min must be > 0 (minutes), got 0"),
    (["trainer=vit", "trainer.params.widht=4"], "trainer.params.widht is not in this trainer's conf file; if the "
                                                "trainer declares it (trainers/specs/ or its own module), set it with "
                                                "+trainer.params.widht=..., which the launch checks"),
    (["store.url=sqlite://"], "store URL 'sqlite://' is an in-memory database"),
    (["store.url=sqlite:///:memory:"], "store URL 'sqlite:///:memory:' is an in-memory database"),
    (["-m", "gpus=1", "store.url=sqlite:///a.db,sqlite:///b.db"],
     "store.url is one per campaign, but this sweep gives 2 ('sqlite:///a.db', 'sqlite:///b.db'); "
     "launch one campaign per store.url"),
    (["-m", "gpus=1", "results_dir=r1,r2"], "results_dir is one per campaign"),
]


@pytest.mark.parametrize("overrides,message", REFUSED, ids=[" ".join(o) for o, _ in REFUSED])
def test_refused_before_anything_is_stored(ws, overrides, message):
    tiny = [] if any(o.startswith("trainer=") for o in overrides) else TINY  # TINY sets synthetic's params
    err = one_line_error(ws.launch(*overrides, *tiny))
    assert message in err
    assert not ws.db.exists() and not (ws.results / "jobs").exists()


def test_a_results_dir_that_cannot_be_a_folder_is_refused(ws):
    (ws.path / "afile").write_text("")
    err = one_line_error(ws.launch(f"results_dir={ws.path / 'afile' / 'results'}", *TINY))
    assert f"the store's folder {ws.path / 'afile' / 'results'} is not writable" in err or "is not a folder" in err, err
    assert not ws.db.exists()


def test_an_unreachable_database_server_is_refused_and_its_password_never_shown(ws):
    pytest.importorskip("psycopg2")
    url = "postgresql+psycopg2://alice:s3cret-pw@127.0.0.1:1/none"
    err = one_line_error(ws.launch(f"store.url={url}", *TINY))
    assert "cannot reach results store postgresql+psycopg2://alice:***@127.0.0.1:1/none" in err
    assert "s3cret-pw" not in err
    assert not ws.db.exists()


def test_a_site_config_with_broken_yaml_names_the_file_and_line(ws):
    site = ws.path / "site" / "platform"
    site.mkdir(parents=True)
    (site / "mine.yaml").write_text("defaults: [a100, _self_]\nname: mine\npartition: gpu\n  bad: [1,\n")
    err = one_line_error(ws.launch(f"hydra.searchpath=[file://{ws.path / 'site'}]", "platform=mine", *TINY))
    assert err.startswith(f"error: {site / 'mine.yaml'}:4:6: invalid YAML: mapping values are not allowed here")


def test_a_misspelt_key_in_a_site_config_is_named_with_the_nearest(ws):
    site = ws.path / "site" / "platform"
    site.mkdir(parents=True)
    (site / "mine.yaml").write_text("defaults: [a100, _self_]\nname: mine\npartiton: gpu\n")
    err = one_line_error(ws.launch(f"hydra.searchpath=[file://{ws.path / 'site'}]", "platform=mine", *TINY))
    assert err.startswith("error: platform/mine.yaml: unknown config key 'platform.partiton' (did you mean 'partition'?)")


# ------------------------------------------------------------------ 0 and 3, the campaign kept honest


@pytest.mark.slow
def test_foreground_point_whose_rank_fails_exits_3_naming_it_and_ends_its_peers(ws):
    """Rank 1 of 2 raises mid-run. Rank 0, which alone would sleep on for days (the sleep
    trainer's ranks never communicate), is ended with it, as srun --kill-on-bad-exit does on
    SLURM; the foreground launch exits 3 naming the point, rank 1's error and the rerun; the
    point's reason is rank 1's error, with rank 1's log, in status's table too. (A bad
    optimizer name no longer gets as far as a job: the launch refuses it, above.)"""
    from test_spine import _processes_with

    res = ws.launch("trainer=sleep", "gpus=2", "+trainer.params.fail_rank=1", "+trainer.params.fail_at_iteration=2",
                    "experiment.base_iterations=100000000", "experiment.until_time_limit=true",
                    "experiment.warmup_iterations=1", "trainer.params.a_s=0.001", "trainer.params.c_s=0", timeout=300)
    err = one_line_error(res, 3)
    cid = campaign_id_from(res.stdout)
    assert err.startswith(f"error: campaign {cid}: 1 of 1 point(s) failed (#0 platform=local gpus=2 trainer=sleep "
                          "experiment=weak_scaling: rank 1: RuntimeError: injected failure"), err
    assert f"details: campaign status {cid}; rerun with: campaign resume {cid} (or a new campaign: campaign launch " \
           "trainer=sleep" in err
    assert ws.query("select state from point") == [("failed",)]
    folder = str(next(ws.results.glob("jobs/*/")))
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and _processes_with(folder):
        time.sleep(0.5)
    assert _processes_with(folder) == []  # no rank of the job is left running
    wait = ws.campaign("status", "--wait", "--interval", "2", "--timeout", "30")
    assert wait.returncode == 1
    assert "failed" in wait.stdout and "injected failure (trainer.params.fail_rank=1)" in wait.stdout
    assert "(log: " in wait.stdout and "_log.err" in wait.stdout
    doc = json.loads(ws.campaign("status", "--json").stdout)
    (point,) = doc["points"]
    assert point["state"] == "failed"
    assert point["reason"].startswith("rank 1: RuntimeError: injected failure (trainer.params.fail_rank=1) at iteration 2")
    assert point["log_path"].endswith("_1_log.err")  # the failing rank's log, not rank 0's
    assert point["reason"].endswith(f"(log: {point['log_path']})")
    (reason,) = ws.query("select reason from attempt")[0]
    assert point["reason"].startswith(reason)


@pytest.mark.slow
def test_waiting_sweep_submits_its_waves_itself_and_exits_3_when_a_point_fails(ws):
    # point 0 completes, point 1 fails at once (one rank each); one point in the scheduler at a
    # time: the waiting launch submits the second wave (point 1) itself once point 0 has ended
    res = ws.launch("-m", "gpus=1", *SLEEPY, "+trainer.params.fail_rank=null,0", "platform.max_submit=1",
                    "hydra.launcher.wait=true", timeout=300)
    err = one_line_error(res, 3)
    assert "1 of 2 point(s) failed (#1 platform=local gpus=1" in err and "rank 0: RuntimeError" in err
    assert "(or a new campaign: campaign launch -m gpus=1 trainer=sleep" in err
    assert ws.query("select p.idx, p.state, a.origin from point p join attempt a on a.point_id = p.id "
                    "order by p.idx") == [(0, "completed", "launch"), (1, "failed", "launch")]
    # 0 when all complete: tests/test_slurm_launch.py's waiting launch (the same exit-code policy)


@pytest.mark.slow
def test_points_that_cannot_be_submitted_are_not_left_registered_and_retry_submits_them(ws):
    """The job folder cannot be made (a file is in its way: NotADirectoryError): every point is
    stored `rejected` with the reason, exit 3 names them and the retry, which works once fixed."""
    ws.results.mkdir(parents=True)
    (ws.results / "jobs").write_text("in the way")
    res = ws.launch("-m", "gpus=1", "seed=0,1", *SLEEPY)
    err = one_line_error(res, 3)
    cid = campaign_id_from(res.stdout)
    assert err.startswith(f"error: campaign {cid}: none of its 2 point(s) was submitted (#0 platform=local gpus=1")
    assert "not submitted: NotADirectoryError" in err or "not submitted: FileExistsError" in err, err
    assert err.rstrip().endswith(f"once the cause is fixed, submit them with: campaign resume {cid}")
    states = ws.query("select state, reason, job_id from point order by idx")
    assert [s for s, _, _ in states] == ["rejected", "rejected"] and all(r for _, r, _ in states)
    assert all(j is None for _, _, j in states)
    (ws.results / "jobs").unlink()
    again = ws.run(sys.executable, "-m", "campaign", "launch", "--retry", cid)  # the older spelling, an alias
    assert again.returncode == 0, again.stdout + again.stderr
    assert again.stderr.startswith("note: campaign launch --retry is campaign resume --state rejected,lost,waiting")
    assert f"campaign {cid}: resubmitted 2 point(s) as new attempts (2 submitted)" in again.stdout
    wait = ws.campaign("status", cid, "--wait", "--interval", "2")
    assert wait.returncode == 0 and "2 point(s): 2 completed" in wait.stdout, wait.stdout
    nothing = ws.campaign("resume", cid)
    assert nothing.returncode == 0 and nothing.stdout.strip() == f"campaign {cid}: nothing to resume (2 completed)"
    attempts = ws.query("select p.idx, a.attempt_no, a.state, a.origin from attempt a join point p on p.id = a.point_id "
                        "order by 1, 2")
    assert attempts == [(0, 0, "rejected", "launch"), (0, 1, "completed", "resume"),
                        (1, 0, "rejected", "launch"), (1, 1, "completed", "resume")]


def test_ctrl_c_in_a_foreground_launch_is_130_and_one_line(ws):
    proc = subprocess.Popen([sys.executable, "-m", "campaign.launch", "trainer=sleep", "experiment.base_iterations=400",
                             "trainer.params.a_s=0.05"], cwd=ws.path, env=ws.env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 120
        line = ""
        while "submitted in the foreground" not in line and time.time() < deadline:
            line = proc.stdout.readline()
        assert "submitted in the foreground" in line, line
        cid = line.split()[1].rstrip(":")
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert err.startswith(f"error: interrupted; campaign {cid} was stored and submitted: campaign status {cid}")
    assert err.count("\n") == 1 and "Traceback" not in err
    ws.campaign("cancel", cid)


# ------------------------------------------------------------------ secrets and private files


def test_recorded_command_and_overrides_come_from_hydra_and_are_redacted(ws):
    # a file where the job folders go: the campaign is stored, its point rejected, no job runs
    ws.results.mkdir(parents=True)
    (ws.results / "jobs").write_text("in the way")
    res = ws.launch("-m", "gpus=1", *TINY)
    one_line_error(res, 3)
    (command, overrides), = ws.query("select command, overrides from campaign")
    assert command == "campaign launch -m gpus=1 " + " ".join(TINY)
    assert json.loads(overrides) == ["gpus=1", *TINY]


@pytest.mark.postgres
def test_a_store_password_is_nowhere_on_disk_nor_on_the_terminal(ws):
    """Launch on PostgreSQL with a password: the point's config, the campaign's command line,
    provenance, submitit's pickles, Hydra's multirun.yaml and the terminal say ***; the
    job still writes its rows (the real URL reached it through its environment)."""
    import uuid

    sqlalchemy = pytest.importorskip("sqlalchemy")
    pytest.importorskip("psycopg2")
    admin_url = os.environ.get("CAMPAIGN_TEST_PG", "postgresql+psycopg2://campaign:campaign@127.0.0.1:15432/campaign")
    password = sqlalchemy.engine.make_url(admin_url).password
    try:
        admin = sqlalchemy.create_engine(admin_url, isolation_level="AUTOCOMMIT")
        name = f"campaign_test_{uuid.uuid4().hex[:8]}"
        with admin.connect() as conn:
            conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
    except Exception as exc:
        pytest.skip(f"no PostgreSQL at {admin_url} ({type(exc).__name__})")
    url = admin_url.rsplit("/", 1)[0] + "/" + name
    try:
        res = ws.launch("-m", "gpus=1", f"store.url={url}", *SLEEPY)
        assert res.returncode == 0, res.stderr
        cid = campaign_id_from(res.stdout)
        wait = ws.campaign("status", cid, "--store", url, "--wait", "--interval", "2")
        assert "1 completed" in wait.stdout, wait.stdout + wait.stderr
        engine = sqlalchemy.create_engine(url)
        with engine.connect() as conn:
            stored = [str(r) for r in conn.exec_driver_sql("select command, overrides from campaign")]
            stored += [str(r) for r in conn.exec_driver_sql("select config, overrides from point")]
            stored += [str(r) for r in conn.exec_driver_sql("select provenance from attempt")]
        engine.dispose()
        assert stored and all(f":{password}@" not in s for s in stored), [s[max(0, s.find(f":{password}@") - 300):s.find(f":{password}@") + 50] for s in stored if f":{password}@" in s]
        assert any(":***@" in s for s in stored)
        on_disk = [p for p in ws.results.rglob("*") if p.is_file()]
        assert any(p.name == "multirun.yaml" for p in on_disk)
        for p in on_disk:
            assert f":{password}@".encode() not in p.read_bytes(), p
        assert f":{password}@" not in res.stdout + res.stderr
    finally:
        drop_database(admin, name)
        admin.dispose()


# 022 is the loosest umask a user has (group and others read). The launch and the job make their
# files under their umask | 077 (campaign.backends.entry.private_umask): a stricter umask, 077 or
# 027 (once cases here too), gives them the very same 077, so 022 is the case that can leak.
# The launch is a single point's, in the foreground: it completes the point and exits 0.
@pytest.mark.slow
def test_store_results_logs_and_job_folders_are_private_and_a_single_point_runs_in_the_foreground(ws):
    res = ws.run(sys.executable, "-c", f"import os, sys; os.umask(0o022); sys.argv = ['x', 'gpus=1', *{SLEEPY!r}];"
                 "from campaign.cli.launch import launch_main; sys.exit(launch_main())")
    assert res.returncode == 0, res.stderr
    assert "1 point(s): 1 completed" in res.stdout, res.stdout
    made = [ws.results, *ws.results.rglob("*")]
    assert any(p.name.endswith("_log.err") for p in made) and any(p.name == "campaign.db" for p in made)
    for p in made:
        if p.is_symlink():
            continue
        mode = stat.S_IMODE(p.stat().st_mode)
        assert mode & 0o077 == 0, f"{p} is {oct(mode)}"
        assert mode == (0o700 if p.is_dir() else mode & 0o600), f"{p} is {oct(mode)}"


def test_redaction_helper():
    from campaign.common.redact import has_secret, redact, redact_obj

    assert redact("postgresql+psycopg://u:p%40ss:w@h:5432/db") == "postgresql+psycopg://u:***@h:5432/db"
    assert redact("store.url=postgresql://u:pw@h/db") == "store.url=postgresql://u:***@h/db"
    assert redact("postgresql://h/db?user=u&password=pw&x=1") == "postgresql://h/db?user=u&password=***&x=1"
    assert redact("sqlite:///results/campaign.db") == "sqlite:///results/campaign.db"
    # a sweep point's override as Hydra writes it, ':' escaped
    assert redact(r"store.url=postgresql\://u\:pw@h\:5432/db") == r"store.url=postgresql\://u\:***@h\:5432/db"
    assert redact(redact("mysql://u:pw@h/db")) == "mysql://u:***@h/db"
    assert not has_secret("sqlite:///x.db") and has_secret("postgresql://u:pw@h/db")
    assert redact_obj({"a": ["x://u:p@h"], "b": 1}) == {"a": ["x://u:***@h"], "b": 1}


def test_every_platform_of_the_catalogue_is_valid_for_its_dataclass():
    """Each conf/platform/*.yaml composes against PlatformSpec (types, enums, no unknown key)
    and passes the launch's platform checks."""
    from hydra import compose, initialize_config_module
    from omegaconf import OmegaConf

    from campaign.catalogue.config import register
    from campaign.launch.validate import check_known_keys
    from campaign.launch.placement import check_platform

    register()
    root = Path(__file__).resolve().parents[1] / "conf" / "platform"
    names = sorted(p.stem for p in root.glob("*.yaml"))
    assert "local" in names and "v100" in names
    with hydra_version_base_kept(), initialize_config_module(version_base="1.3", config_module="campaign_conf"):
        for name in names:
            cfg = compose("config", overrides=[f"platform={name}"])
            plain = OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)
            check_known_keys(plain)
            check_platform(plain["platform"])
            assert plain["platform"]["name"] == name


@pytest.mark.usefixtures("hydra_restore_singletons")
@pytest.mark.slow
def test_a_waiting_campaign_sweep_returns_each_points_real_jobreturn(hydra_sweep_runner, tmp_path, monkeypatch):
    """Campaign's own app under the launcher with wait=true: each JobReturn has the point's
    config, its overrides, its job folder and rank 0's return value; status COMPLETED."""
    from campaign.catalogue.config import register

    register()
    monkeypatch.setenv("CAMPAIGN_RESULTS", str(tmp_path / "results"))
    monkeypatch.chdir(tmp_path)
    sweep = hydra_sweep_runner(calling_file=None, calling_module="campaign.launch.main", task_function=None,
                               config_path="pkg://campaign_conf", config_name="config",
                               overrides=["gpus=1", "seed=0,1", "hydra.launcher.wait=true", *SLEEPY],
                               temp_dir=tmp_path / "sweep")  # two sleep points of one rank each
    with sweep:
        returns = sweep.returns[0]
        assert [r.status.name for r in returns] == ["COMPLETED", "COMPLETED"]
        assert [r.overrides[:2] for r in returns] == [["gpus=1", "seed=0"], ["gpus=1", "seed=1"]]
        assert [r.cfg.seed for r in returns] == [0, 1] and returns[0].cfg.experiment.base_iterations == 4
        # rank 0's summary (the weak-scaling 4/N, no warm-up: tests/test_spine.py's rank rows)
        assert [r.return_value["iterations"] for r in returns] == [4, 4]
        assert all(Path(r.working_dir).parent == tmp_path / "results" / "jobs" for r in returns)
