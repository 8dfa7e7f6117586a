"""A resubmission rebuilds, never trusts (issue #30): ``campaign resume``, automatic retries
(``status --wait --submit``) and waves resubmit a point only when its stored config, its
overrides and its campaign's results folder carry the launcher's signature
(campaign/common/signing.py), its config's results_dir is the campaign's, and its job would get
no masked secret. Each attack is a store written as someone who can write it would: a
crafted ``dataset.root``, ``platform.extra_sbatch`` lines, ``trainer.module``, a moved
results_dir (the point's or the campaign's), a signature copied from another point or
made with another key. Each is refused in one line, exit 2, before anything is planned,
imported or submitted: no attempt row, no job folder, the store byte for byte as it was."""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import stat

import pytest

from campaign.common.errors import ConfigError
from conftest import Workspace, campaign_id_from
from test_postgres import pg_url  # noqa: F401  (fixture: a fresh database on the test server)

SLEEPY = ["trainer=sleep", "experiment=smoke", "experiment.base_iterations=4", "trainer.params.a_s=0.002",
          "trainer.params.c_s=0.0"]
UNSIGNED = ("point #1: its stored config is not signed with your key (changed in the store since launch, launched "
            "by another user, or launched before campaign signed configs); nothing was submitted: launch it anew")


def _wait(ws, cid, *extra):
    return ws.campaign("status", cid, "--wait", "--interval", "0.5", "--timeout", "240", *extra, timeout=300)


def _digest(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def launched(tmp_path_factory):
    """One real local campaign, ended: point 0 completed, point 1 failed (an automatic
    retry due: retry_on=[failed], --max-retries 1). Each test attacks a copy of its store."""
    ws = Workspace(tmp_path_factory.mktemp("trust-launch"))
    # one rank each: point 0 (fail_rank=null) completes, point 1 (fail_rank=0) fails at once
    res = ws.launch("-m", "gpus=1", *SLEEPY, "+trainer.params.fail_rank=null,0", "--max-retries", "1",
                    "retry_on=[failed]")
    assert res.returncode == 0, res.stdout + res.stderr
    cid = campaign_id_from(res.stdout)
    _wait(ws, cid)
    assert ws.query("select idx, state from point order by idx") == [(0, "completed"), (1, "failed")]
    return ws, cid


@pytest.fixture
def copy(launched, tmp_path):
    """A workspace whose store is a copy of the launched campaign's (the attacker's canvas)."""
    src, cid = launched
    ws = Workspace(tmp_path)
    ws.results.mkdir(parents=True)
    with sqlite3.connect(src.db) as a, sqlite3.connect(ws.db) as b:
        a.backup(b)
    return ws, cid


def _config(ws, idx: int) -> dict:
    return json.loads(ws.query("select config from point where idx = ?", idx)[0][0])


def _write(ws, sql: str, *params) -> None:
    con = sqlite3.connect(ws.db)
    try:
        con.execute(sql, params)
        con.commit()
    finally:
        con.close()


def _tamper(ws, idx: int, change) -> dict:
    config = _config(ws, idx)
    change(config)
    _write(ws, "update point set config = ? where idx = ?", json.dumps(config), idx)
    return config


def _refused(ws, message: str, *argv: str, note: str = "") -> None:
    """``campaign resume`` refuses with exactly ``error: message`` (after ``note``), exit 2,
    nothing written."""
    before = _digest(ws.db)
    attempts = ws.query("select count(*) from attempt")
    res = ws.campaign("resume", *argv)
    assert (res.returncode, res.stdout, res.stderr) == (2, "", f"{note}error: {message}\n"), res.stdout + res.stderr
    assert _digest(ws.db) == before and ws.query("select count(*) from attempt") == attempts
    assert not (ws.results / "jobs").exists()


@pytest.mark.slow
def test_a_crafted_dataset_root_is_refused(copy, tmp_path):
    ws, cid = copy
    evil = tmp_path / "evil"
    evil.mkdir()
    (evil / "sitecustomize.py").write_text("open(__file__ + '.ran', 'w').close()\n")
    _tamper(ws, 1, lambda c: c["dataset"].update(root=str(evil)))
    _refused(ws, UNSIGNED)
    _refused(ws, UNSIGNED, "--dry-run")  # a dry run plans: refused as well
    assert sorted(p.name for p in evil.iterdir()) == ["sitecustomize.py"]


def test_extra_sbatch_lines_are_refused(copy):
    ws, cid = copy
    _tamper(ws, 1, lambda c: c["platform"].update(extra_sbatch=["--export=ALL,PYTHONPATH=/tmp/evil",
                                                                 "--chdir=/tmp/evil"]))
    _refused(ws, UNSIGNED, cid)


def test_a_trainer_module_named_by_the_store_is_never_imported(copy):
    ws, cid = copy
    (ws.path / "pwned.py").write_text("import pathlib\npathlib.Path(__file__).with_name('PWNED').touch()\n")
    _tamper(ws, 1, lambda c: c["trainer"].update(module="pwned"))
    _refused(ws, UNSIGNED)
    _refused(ws, UNSIGNED, "--dry-run")
    assert not (ws.path / "PWNED").exists()


def test_a_moved_results_dir_is_refused_naming_it(copy, tmp_path):
    ws, cid = copy
    evil = tmp_path / "evil-results"
    (campaign_dir,) = ws.query("select results_dir from campaign")[0]
    assert _config(ws, 1)["results_dir"] == campaign_dir  # a launch stores it absolute, as its campaign's
    _tamper(ws, 1, lambda c: c.update(results_dir=str(evil)))
    _refused(ws, f"point #1: its stored config's results_dir ({evil}) is not its campaign's ({campaign_dir}): changed "
                 "in the store since launch; nothing was submitted: launch it anew")
    assert not evil.exists()


def test_a_moved_campaign_results_dir_is_refused(copy, tmp_path):
    """The campaign row's results_dir is where the job folder and its pickle go: moved alone,
    it is not the points' (named); moved with every point's config, the signatures fail."""
    ws, cid = copy
    evil = tmp_path / "evil-results"
    (campaign_dir,) = ws.query("select results_dir from campaign")[0]
    _write(ws, "update campaign set results_dir = ?", str(evil))
    # no point verifies over the moved folder: the campaign is no longer taken as yours, only named
    theirs = (f"note: campaign {cid} is not yours: its points are not signed with your key (another user's, or "
              "launched with another key or before campaign signed points)\n")
    _refused(ws, f"point #1: its stored config's results_dir ({campaign_dir}) is not its campaign's ({evil}): changed "
                 "in the store since launch; nothing was submitted: launch it anew", cid, note=theirs)
    for idx in (0, 1):
        _tamper(ws, idx, lambda c: c.update(results_dir=str(evil)))
    _refused(ws, UNSIGNED, cid, note=theirs)
    assert not evil.exists()


def test_a_signature_copied_from_another_point_or_made_with_another_key_is_refused(copy):
    from campaign.common.signing import sign

    ws, cid = copy
    (first,) = ws.query("select signature from point where idx = 0")[0]
    _write(ws, "update point set signature = ? where idx = 1", first)
    _refused(ws, UNSIGNED)
    # the attacker's own key over the attacker's config: a valid signature, of someone else's
    config = _tamper(ws, 1, lambda c: c["dataset"].update(root="/tmp/evil"))
    row = dict(zip(("idx", "repeat", "platform", "executor", "batch_per_gpu", "iterations", "overrides"),
                   ws.query("select idx, repeat, platform, executor, batch_per_gpu, iterations, overrides "
                            "from point where idx = 1")[0]), config=config)
    row["overrides"] = json.loads(row["overrides"])
    (results,) = ws.query("select results_dir from campaign")[0]
    _write(ws, "update point set signature = ? where idx = 1", sign(os.urandom(32), cid, results, row))
    _refused(ws, UNSIGNED)
    _write(ws, "update point set signature = NULL where idx = 1")
    _refused(ws, UNSIGNED)


def test_an_automatic_retry_refuses_a_changed_point(copy):
    """``status --wait --submit`` (automatic retries; a launch that waits goes the same way):
    one line, exit 2, nothing submitted."""
    ws, cid = copy
    _tamper(ws, 1, lambda c: c["platform"].update(extra_sbatch=["--chdir=/tmp/evil"]))
    before = _digest(ws.db)
    res = _wait(ws, cid, "--submit")
    assert res.returncode == 2 and res.stderr.splitlines()[-1] == f"error: {UNSIGNED}", res.stdout + res.stderr
    assert "Traceback" not in res.stderr and "automatic retry" not in res.stderr
    assert _digest(ws.db) == before and not (ws.results / "jobs").exists()


def test_a_wave_refuses_a_changed_waiting_point_before_it_writes(copy):
    """A point waiting for room, its config changed: ``submit_due`` refuses before the store
    is opened to write, whichever other point is due."""
    from campaign.launch.resume import submit_due

    ws, cid = copy
    _write(ws, "update point set state = 'waiting', job_id = NULL, reason = 'waiting for room' where idx = 1")
    _tamper(ws, 1, lambda c: c["dataset"].update(root="/tmp/evil"))
    before = _digest(ws.db)
    with pytest.raises(ConfigError) as exc:
        submit_due(ws.store_url, cid)
    assert str(exc.value) == UNSIGNED
    assert _digest(ws.db) == before and not (ws.results / "jobs").exists()


def test_a_masked_secret_is_refused_naming_the_key_and_given_again(copy):
    """A value stored masked (a secret: never stored in clear) would reach the job as ``***``:
    refused, naming the key and how to give it; given with the resume, the point goes."""
    from campaign.common.signing import sign, signing_key

    ws, cid = copy
    config = _tamper(ws, 1, lambda c: c["container"].update(env={"HF_TOKEN": "***"}))
    cols = ("idx", "repeat", "platform", "executor", "batch_per_gpu", "iterations", "overrides")
    row = dict(zip(cols, ws.query(f"select {', '.join(cols)} from point where idx = 1")[0]), config=config)
    row["overrides"] = json.loads(row["overrides"])
    (results,) = ws.query("select results_dir from campaign")[0]
    # as the user's own launch stored it (signed: the value was masked before signing)
    _write(ws, "update point set signature = ? where idx = 1", sign(signing_key(), cid, results, row))
    _refused(ws, f"point #1: container.env.HF_TOKEN is stored masked (***; secrets are never stored in clear), and "
                 f"its job would get that; nothing was submitted: give it again: campaign resume {cid} "
                 "container.env.HF_TOKEN=...", "--dry-run")
    res = ws.campaign("resume", "--dry-run", cid, "container.env.HF_TOKEN=abc")
    assert res.returncode == 0 and f"campaign {cid}: would resubmit 1 point(s)" in res.stdout, res.stdout + res.stderr


@pytest.mark.slow
def test_a_resume_of_an_untouched_campaign_goes_and_its_overrides_are_signed(ws):
    """The launcher's own campaign resumes; a resume with overrides stores the new config
    signed, so a later resume of it goes too."""
    from campaign.common.signing import signing_key, verify

    # one point of one rank, failing until its resume says fail_rank=null (three jobs, not seven)
    res = ws.launch("-m", "gpus=1", *SLEEPY, "+trainer.params.fail_rank=0")
    assert res.returncode == 0, res.stderr
    cid = campaign_id_from(res.stdout)
    _wait(ws, cid)
    (old,) = ws.query("select signature from point where idx = 0")[0]
    again = ws.campaign("resume", cid, "platform.time_limit_min=7")
    assert again.returncode == 0 and "(1 submitted)" in again.stdout, again.stdout + again.stderr
    _wait(ws, cid)
    (new,) = ws.query("select signature from point where idx = 0")[0]
    assert _config(ws, 0)["platform"]["time_limit_min"] == 7 and new != old and len(new) == 64
    cols = ("idx", "repeat", "platform", "executor", "batch_per_gpu", "iterations", "overrides", "signature")
    row = dict(zip(cols, ws.query(f"select {', '.join(cols)} from point where idx = 0")[0]), config=_config(ws, 0))
    row["overrides"] = json.loads(row["overrides"])
    assert verify(signing_key(), cid, ws.query("select results_dir from campaign")[0][0], row)
    dry = ws.campaign("resume", cid, "--dry-run")
    assert dry.returncode == 0 and "would resubmit 1 point(s)" in dry.stdout, dry.stdout + dry.stderr
    done = ws.campaign("resume", cid, "trainer.params.fail_rank=null")
    assert done.returncode == 0 and "(1 submitted)" in done.stdout, done.stdout + done.stderr
    assert _wait(ws, cid).returncode == 0
    assert ws.query("select state from point order by idx") == [("completed",)]


# ---------------------------------------------------------------- the key itself

@pytest.fixture
def keydir(tmp_path, monkeypatch):
    folder = tmp_path / "cfg" / "campaign"
    monkeypatch.setenv("CAMPAIGN_CONFIG_DIR", str(folder))
    return folder


def test_the_key_is_made_private_on_first_use_and_kept(keydir):
    from campaign.common.signing import signing_key

    assert signing_key() is None and not keydir.exists()  # a resume never makes one
    key = signing_key(create=True)
    path = keydir / "signing.key"
    assert len(key) == 32 and path.read_bytes() == key
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and stat.S_IMODE(keydir.stat().st_mode) == 0o700
    assert signing_key(create=True) == key == signing_key()
    assert [p.name for p in keydir.iterdir()] == ["signing.key"]  # no temporary file left


@pytest.mark.parametrize("attack,message", [
    ("symlink", "is a symbolic link; campaign uses a regular file of yours only"),
    ("readable", "is readable or writable by others (mode 0640); make it yours alone: chmod 600 "),
    ("owner", "belongs to uid 4242, not to you (uid 0); remove it"),
    ("fifo", "is not a regular file"),
    ("short", "holds 5 bytes, not 32: damaged"),
])
def test_a_key_file_others_could_read_or_plant_is_refused(keydir, tmp_path, attack, message):
    from campaign.common.signing import signing_key

    key = signing_key(create=True)
    path = keydir / "signing.key"
    if attack == "symlink":
        planted = tmp_path / "planted.key"
        planted.write_bytes(key)
        planted.chmod(0o600)
        path.unlink()
        path.symlink_to(planted)
    elif attack == "readable":
        path.chmod(0o640)
    elif attack == "owner":
        if os.geteuid() != 0:
            pytest.skip("chown to another user needs root")
        os.chown(path, 4242, 4242)
        message = message.replace("(uid 0)", f"(uid {os.geteuid()})")
    elif attack == "fifo":
        path.unlink()
        os.mkfifo(path, 0o600)
    else:
        path.write_bytes(b"short")
    for create in (False, True):
        with pytest.raises(ConfigError) as exc:
            signing_key(create=create)
        assert str(exc.value).startswith(f"signing key {path} ") and message in str(exc.value)
        assert "\n" not in str(exc.value)


def test_the_key_folder_follows_xdg_then_home(tmp_path, monkeypatch):
    from campaign.common.signing import key_path

    monkeypatch.delenv("CAMPAIGN_CONFIG_DIR")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    assert key_path() == tmp_path / "xdg" / "campaign" / "signing.key"
    monkeypatch.setenv("XDG_CONFIG_HOME", "relative")  # not absolute: ignored, as XDG says
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert key_path() == tmp_path / "home" / ".config" / "campaign" / "signing.key"


def test_a_signature_covers_each_field_a_resubmission_trusts(keydir):
    from campaign.common.signing import SIGNED_COLUMNS, sign, signing_key, verify

    key = signing_key(create=True)
    row = {"idx": 3, "repeat": 0, "platform": "local", "executor": "local", "batch_per_gpu": 4, "iterations": 8,
           "overrides": ["gpus=1"], "config": {"results_dir": "/r", "dataset": {"root": None}, "x": [1.5, "é"]}}
    row["signature"] = sign(key, "c1", "/r", row)
    stored = json.loads(json.dumps(row))  # as it comes back from the store's JSON columns
    assert verify(key, "c1", "/r", stored)
    assert not verify(key, "c2", "/r", stored) and not verify(key, "c1", "/elsewhere", stored)
    assert not verify(os.urandom(32), "c1", "/r", stored)
    for column, value in [*((c, "other") for c in SIGNED_COLUMNS), ("overrides", ["gpus=2"]),
                          ("config", dict(stored["config"], dataset={"root": "/evil"}))]:
        assert not verify(key, "c1", "/r", dict(stored, **{column: value})), column


@pytest.mark.postgres
def test_a_signature_holds_through_postgresql_json(pg_url):  # noqa: F811
    """What a launch signs is what a resume reads back, through PostgreSQL's JSON columns too."""
    from campaign.common.signing import signing_key, verify
    from campaign.store import open_store
    from conftest import point_config

    row = dict(idx=0, platform="local", trainer="synthetic", experiment="smoke", dataset="synthetic", gpus=1, nodes=1,
               executor="local", state="failed", overrides=["gpus=1"], batch_per_gpu=4, iterations=8,
               config=point_config("dataset.root=/data/x"))
    row["config"]["dataset"]["root"] = "/data/é 1e-05"  # non-ASCII, as JSON may hold it
    with open_store(pg_url, create=True) as s:  # (SQLite: every other test of this file reads them back)
        s.register({"id": "c1", "created_at": 1.0, "results_dir": "/r"}, [row])
        (stored,) = s.points("c1")
    assert stored["signature"] and verify(signing_key(), "c1", "/r", stored)
    assert not verify(signing_key(), "c1", "/r", dict(stored, iterations=9))
