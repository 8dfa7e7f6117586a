"""Bad input: one line on stderr, exit status 2, no traceback, nothing stored or changed."""

from __future__ import annotations

import hashlib
import shutil
import sys

import pytest

from campaign_sql.schema import SCHEMA_VERSION
from conftest import TINY, Workspace

BAD_LAUNCHES = [
    (["platform=h200"], "error: unknown platform 'h200'; available: a100, a100_nvlink_40, a100_nvlink_80, a6000, h100, local, local_gpu, t4, v100"),
    (["-m", "platform=local,h200"], "unknown platform 'h200'; available: a100, a100_nvlink_40"),
    (["-m", "gpus=1", "nosuchkey=1,2"], "unknown config key 'nosuchkey'; valid keys: platform, experiment"),
    (["-m", "trainer=nosuch"], "error: unknown trainer 'nosuch'; available:"),
    (["experiment=nope"], "error: unknown experiment 'nope'; available:"),
    (["gpus=0"], "error: gpus must be a positive integer, got 0"),
    (["-m", "gpus=-1,1"], ": gpus must be a positive integer, got -1"),
    (["-m", "gpus=64,128"], "error: point gpus=64 "),
    (["-m", "platform=v100", "gpus=8", "dry_run=true"], "v100 has 4 GPUs per node; 8 needs nodes=2"),
    (["gpus=abc"], "error: gpus=abc: Value 'abc' of type 'str' could not be converted to Integer"),
    (["nosuchkey=1"], "error: unknown config key 'nosuchkey'"),
    (["-m", "experiment=strong_scaling", "experiment.global_batch=10", "platform.gpus_per_node=4", "gpus=1,3"], "does not split over 3 GPUs"),
    (["repeats=0"], "error: repeats must be >= 1"),
    (["platform.dist_timeout_min=0"], "platform.dist_timeout_min must be > 0 (minutes), got 0"),
    (["store.url=notaurl"], "error: store URL 'notaurl' is not a database URL"),
    # a sweep without -m: Hydra's hint verbatim, its key= examples no secret (issue 49)
    (["gpus=1,2"], "error: Ambiguous value for argument 'gpus=1,2' 1. To use it as a list, use key=[value1,value2] "
                   "2. To use it as string, quote the value: key=\\'value1,value2\\' 3. To sweep over it, add "
                   "--multirun to your command line\n"),
]


def _digest(path):
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.exists() else None


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Workspace:
    """One completed campaign (one point, gpus=1, TINY): the store the read commands below are
    given bad input against, made once for the module (each test works on its own copy). One
    rank is all they need: none of them reads more than that a campaign completed."""
    made = Workspace(tmp_path_factory.mktemp("finished"))
    assert made.launch("-m", "gpus=1", *TINY).returncode == 0
    assert made.campaign("status", "--wait", "--interval", "0.5").returncode == 0
    return made


@pytest.fixture
def done(finished, ws) -> Workspace:
    """``ws`` holding a copy of ``finished``'s results folder (store, job folders, records)."""
    shutil.copytree(finished.results, ws.results)
    return ws


@pytest.mark.parametrize("overrides,message", BAD_LAUNCHES, ids=[" ".join(o) for o, _ in BAD_LAUNCHES])
def test_bad_launch_is_one_line_exit_2_and_stores_nothing(ws, overrides, message):
    res = ws.launch(*overrides, *TINY)
    assert res.returncode == 2, res.stdout + res.stderr
    assert res.stderr.startswith(message) or message in res.stderr, res.stderr
    assert res.stderr.count("\n") == 1 and "Traceback" not in res.stderr
    assert not ws.db.exists()


@pytest.mark.slow
def test_bad_launch_leaves_an_existing_store_unchanged(done):
    ws = done
    before = _digest(ws.db)
    records = sorted(ws.results.rglob("multirun.yaml"))  # Hydra's record of the sweep that ran
    assert records
    kept = [_digest(r) for r in records]
    res = ws.launch("-m", *TINY, "gpus=1,2", "experiment.images_per_gpu=8,0")
    assert res.returncode == 2
    assert _digest(ws.db) == before
    # the refused sweep did not write its record over the last one's (review of 2026-11-26)
    assert sorted(ws.results.rglob("multirun.yaml")) == records and [_digest(r) for r in records] == kept


def test_points_a_platform_cannot_hold_are_left_out_with_the_reason(ws):
    res = ws.launch("-m", "gpus=1,64", "dry_run=false", *TINY)
    assert res.returncode == 0, res.stderr
    assert "refused: point gpus=64" in res.stderr and "gpus=64 does not fit" in res.stderr
    assert "1 of 1 point(s) submitted" in res.stdout
    assert ws.query("select gpus from point") == [(1,)]
    assert ws.campaign("cancel").returncode == 0  # its job has nothing to show here: no need to run it


@pytest.mark.parametrize(
    "argv,message",
    [
        (["status", "nosuch"], "error: no campaign 'nosuch'"),
        (["harvest", "--to", "xlsx"], "error: unknown format 'xlsx'; available: csv, json, markdown, parquet, table"),
        (["harvest", "--to", "parquet"], "error: parquet is binary: give a file with --out PATH"),
        (["status", "--bogus"], "error: unrecognized arguments: --bogus"),
        (["cancel", "--point", "99"], "error: campaign"),
    ],
)
@pytest.mark.slow
def test_bad_cli_input(done, argv, message):
    ws = done
    before = _digest(ws.db)
    res = ws.campaign(*argv)
    assert res.returncode == 2, res.stdout + res.stderr
    assert res.stderr.startswith(message), res.stderr
    assert res.stderr.count("\n") == 1
    assert _digest(ws.db) == before


@pytest.mark.slow
def test_an_output_over_the_results_store_is_refused(done, tmp_path):
    """harvest --out and report --out never write over an SQLite database or its -wal/-shm
    file (they did, exit 0: every campaign lost; review of 2026-11-26)."""
    ws = done
    before = _digest(ws.db)
    for argv, what in [(["harvest", "--to", "csv", "--out", str(ws.db)], "an SQLite database (a results store?)"),
                       (["harvest", "--to", "csv", "--out", f"{ws.db}-wal"], f"the -wal file of the SQLite database {ws.db}"),
                       (["report", "--out", str(ws.db)], "an SQLite database (a results store?)"),
                       (["report", "--out", f"{ws.db}-shm"], f"the -shm file of the SQLite database {ws.db}")]:
        res = ws.campaign(*argv)
        assert res.returncode == 2, res.stdout + res.stderr
        assert res.stderr == f"error: --out {argv[-1]} is {what}: not overwritten; give another file\n", res.stderr
        assert _digest(ws.db) == before
    assert ws.campaign("harvest", "--to", "csv", "--out", str(tmp_path / "t.csv")).returncode == 0  # any other file
    # without --to, the file's extension chooses (a .csv of the terminal's table was written before)
    for name, start in (("u.csv", "view,"), ("u.json", '[{"view":'), ("u.md", "| view"), ("u.txt", "view ")):
        assert ws.campaign("harvest", "--out", str(tmp_path / name)).returncode == 0
        assert (tmp_path / name).read_text().startswith(start), name
    assert ws.campaign("harvest", "--to", "json", "--out", str(tmp_path / "v.csv")).returncode == 0  # --to wins
    assert (tmp_path / "v.csv").read_text().startswith("[{")


@pytest.mark.parametrize("url", ["postgresql+psycopg2://h:abc/db", "postgresql+psycopg2://u:p@[::1/db"])
def test_a_store_url_whose_port_is_no_number_is_one_line(ws, url):
    """SQLAlchemy reads the port with int(): a ValueError, which was a traceback in every
    command (review of 2026-11-26)."""
    for argv in (["status", "--store", url], ["harvest", "--store", url], ["resume", "--store", url]):
        res = ws.campaign(*argv)
        assert res.returncode == 2, res.stderr
        assert res.stderr.startswith("error: store URL '") and "its port is not a number" in res.stderr, res.stderr
        assert res.stderr.count("\n") == 1 and "Traceback" not in res.stderr
    res = ws.launch("gpus=1", f"store.url='{url}'")  # quoted: Hydra's grammar reads '[' as a list
    assert res.returncode == 2 and "its port is not a number" in res.stderr, res.stderr


@pytest.mark.slow
def test_a_closed_standard_output_is_dev_null_not_a_traceback(done, tmp_path):
    """``campaign harvest >&-`` was an AttributeError traceback (Python's sys.stdout is None);
    a closed stream is /dev/null, so no file opened later takes descriptor 1 (the store
    would get what is printed), and --out still writes (review of 2026-11-26)."""
    import shlex
    import subprocess
    import sys

    ws = done
    before = _digest(ws.db)
    out = tmp_path / "t.csv"
    for argv in (["harvest"], ["report"], ["plan"], ["status"], ["harvest", "--to", "csv", "--out", str(out)]):
        line = shlex.join([sys.executable, "-m", "campaign", *argv]) + " >&-"
        proc = subprocess.run(["bash", "-c", line], cwd=ws.path, env=ws.env, capture_output=True, text=True,
                              timeout=120)
        assert proc.returncode == 0 and "Traceback" not in proc.stderr, (argv, proc.stderr)
        assert _digest(ws.db) == before
    assert out.read_text().startswith("view,")


HOW = ("launch a campaign first (campaign launch ...), or name the store: CAMPAIGN_RESULTS=FOLDER (the folder holding "
       "its campaign.db) or --store URL\n")


def test_missing_store_is_explained(ws):
    res = ws.campaign("status")
    assert (res.returncode, res.stdout) == (2, "")
    assert res.stderr == f"error: no results store at {ws.db} (the working folder {ws.path}); {HOW}"
    # from another folder, CAMPAIGN_RESULTS unset: the relative default, made absolute
    del ws.env["CAMPAIGN_RESULTS"]
    (ws.path / "elsewhere").mkdir()
    res = ws.run(sys.executable, "-m", "campaign", "harvest", "main-job", cwd=ws.path / "elsewhere")
    assert (res.returncode, res.stdout) == (2, "")
    assert res.stderr == (f"error: no results store at {ws.path}/elsewhere/results/campaign.db (results/campaign.db in "
                          f"the working folder {ws.path}/elsewhere); {HOW}")
    assert not (ws.path / "elsewhere" / "results").exists()


@pytest.mark.slow
def test_schema_version_mismatch_is_refused(done):
    ws = done
    import sqlite3

    con = sqlite3.connect(ws.db)
    con.execute("update meta set value = '0' where key = 'schema_version'")
    con.commit()
    con.close()
    before = _digest(ws.db)
    for res in (ws.campaign("status"), ws.campaign("harvest"), ws.launch("-m", "gpus=1", *TINY)):
        assert res.returncode == 2
        assert f"has schema version 0, this campaign needs {SCHEMA_VERSION}" in res.stderr, res.stderr
        assert res.stderr.count("\n") == 1
    assert _digest(ws.db) == before


def test_help_of_every_command_has_an_example(ws):
    for argv in ([], ["status"], ["harvest"], ["cancel"], ["trace"], ["resume"]):
        res = ws.campaign(*argv, "--help")
        assert res.returncode == 0
        assert "examples:" in res.stdout


@pytest.mark.slow
def test_out_dash_is_standard_output(done, tmp_path):
    """``--out -`` wrote a file named '-' (review of 2026-11-26): it is standard output."""
    ws = done
    res = ws.campaign("harvest", "--to", "csv", "--out", "-")
    assert res.returncode == 0 and res.stdout.startswith("view,") and not (ws.path / "-").exists()
    page = ws.campaign("report", "--out", "-")
    assert page.returncode == 0 and page.stdout.startswith("<!DOCTYPE html>") and not (ws.path / "-").exists()


def test_an_output_named_like_a_companion_file_alone_is_a_file():
    """--out x/-wal (a name that is the suffix alone) was a ValueError traceback (review)."""
    from pathlib import Path

    from campaign.common.outfile import check_output

    assert check_output("x/-wal") == Path("x/-wal") and check_output("-shm") == Path("-shm")
