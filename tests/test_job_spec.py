"""The job spec (campaign/backends/job_spec.py): what the launch writes is what the job
reads, field for field; it survives submitit's pickle; a job refuses a spec of another
version with one line, before the job side is imported."""

from __future__ import annotations

import ast
import dataclasses
import os
import pickle
import sys
import types
from pathlib import Path

import cloudpickle
import pytest

from campaign.backends.entry import CheckpointingJobEntry, JobEntry, entry_for
from campaign.backends.job_spec import JOB_SPEC_VERSION, JobSpec, JobSpecMismatch, check_job_spec
from campaign.common.redact import STORE_URL_ENV
from conftest import TINY, hydra_version_base_kept
from job_specs import a_spec

ROOT = Path(__file__).resolve().parents[1]
# Where the spec is read: the job's entry (host code, run in the job) and the job side.
READERS = ("campaign/backends/entry.py", "trainers/job.py", "trainers/checkpoint.py")
WRITER = "campaign/launch/submit.py"
FIELDS = {f.name for f in dataclasses.fields(JobSpec)}
METHODS = {"with_store_url"}
SECRET_URL = "postgresql://u:hunter2@db.example/campaign"


def _spec_reads(path: Path) -> tuple[set[str], list[str]]:
    """Attributes read of a name ``spec`` (or ``self.spec``), ``getattr(spec, "x", ...)``
    and ``vars(spec).get("x")`` included; and every dict-style read of it (``spec[...]``, ``spec.get``), which a
    typed spec has no use for."""
    reads: set[str] = set()
    dict_style: list[str] = []

    def is_spec(node: ast.AST) -> bool:
        return (isinstance(node, ast.Name) and node.id == "spec") or \
            (isinstance(node, ast.Attribute) and node.attr == "spec" and isinstance(node.value, ast.Name)
             and node.value.id == "self")

    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Attribute) and is_spec(node.value):
            (dict_style.append(f"{path.name}:{node.lineno}: spec.{node.attr}") if node.attr in ("get", "items", "keys")
             else reads.add(node.attr))
        elif isinstance(node, ast.Subscript) and is_spec(node.value):
            dict_style.append(f"{path.name}:{node.lineno}: spec[...]")
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr"
              and len(node.args) >= 2 and is_spec(node.args[0]) and isinstance(node.args[1], ast.Constant)):
            reads.add(node.args[1].value)
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
              and isinstance(node.func.value, ast.Call) and getattr(node.func.value.func, "id", None) == "vars"
              and node.func.value.args and is_spec(node.func.value.args[0]) and isinstance(node.args[0], ast.Constant)):
            reads.add(node.args[0].value)  # vars(spec).get("x"): the pickled state's own value
    return reads, dict_style


def test_every_field_is_written_by_the_launch_and_read_by_the_job():
    # written: the launch's job_spec names every field (none has a default to fall back
    # on but the version, which is the module's own)
    defaulted = {f.name for f in dataclasses.fields(JobSpec)
                 if f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING}
    assert defaulted == {"version"}
    tree = ast.parse((ROOT / WRITER).read_text())
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "id", None) == "JobSpec"]
    assert len(calls) == 1 and not calls[0].args
    assert {k.arg for k in calls[0].keywords} == FIELDS - {"version"}
    # read: every field by the job's entry or the job side, and nothing else read of it
    reads: set[str] = set()
    dict_style: list[str] = []
    for rel in READERS:
        got, bad = _spec_reads(ROOT / rel)
        reads |= got
        dict_style += bad
    reads |= _spec_reads(ROOT / "campaign/backends/job_spec.py")[0]  # the version, by check_job_spec
    assert not dict_style, dict_style
    assert FIELDS - reads == set(), "written but never read"
    assert reads - FIELDS - METHODS == set(), "read but never written (e.g. master_port)"


def _point():
    from hydra import compose, initialize_config_module

    from campaign.catalogue.config import register
    from campaign.launch.plan import plan_point

    register()
    with hydra_version_base_kept(), initialize_config_module("campaign_conf", version_base="1.3"):
        cfg = compose("config", overrides=["experiment=smoke", *TINY])
    return plan_point(cfg, 0, [])


def test_the_launchs_spec_survives_submitits_pickle(tmp_path):
    from campaign.launch.submit import job_spec

    p = _point()
    folder = tmp_path / "jobs" / "c1"
    spec = job_spec(p, 5, "c1", SECRET_URL, folder, attempt_base=2)
    assert spec.version == JOB_SPEC_VERSION and spec.point_id == 5 and spec.attempt_base == 2
    assert "hunter2" not in repr(spec) and spec.store_url == "postgresql://u:***@db.example/campaign"
    assert (spec.job_folder, spec.spool_dir, spec.checkpoint_dir) == (str(folder), str(folder / "spool"),
                                                                      str(folder / "checkpoints"))
    assert spec.plan["iterations"] == p.iterations and spec.tasks_per_node == p.resources.tasks_per_node
    entry = entry_for(spec)
    assert type(entry) is JobEntry and repr(entry) == "JobEntry(point=5, campaign=c1)"
    for dumps in (pickle.dumps, cloudpickle.dumps):  # submitit pickles its DelayedSubmission with cloudpickle
        back = pickle.loads(dumps(entry))
        assert back.spec == spec and type(back.spec) is JobSpec
        assert set(vars(back.spec)) == FIELDS  # no key beyond the fields
    checkpointing = dataclasses.replace(spec, config={**spec.config, "experiment": {"checkpoint": True}})
    assert type(entry_for(checkpointing)) is CheckpointingJobEntry


def test_a_spec_takes_no_unknown_key():
    with pytest.raises(TypeError, match="master_port"):
        JobSpec(**{f: getattr(a_spec(), f) for f in FIELDS}, master_port=1234)
    with pytest.raises(dataclasses.FrozenInstanceError):
        a_spec().point_id = 8  # type: ignore[misc]


@pytest.fixture
def fake_job(monkeypatch):
    """``trainers.job`` replaced by a stand-in that records the spec it is handed; the
    entry's environment and umask put back after."""
    got: list[JobSpec] = []
    monkeypatch.setitem(sys.modules, "trainers.job", types.SimpleNamespace(run_point=lambda s: got.append(s) or "ran"))
    for name in (STORE_URL_ENV, "CAMPAIGN_JOB_FOLDER", "CAMPAIGN_SPOOL_DIR"):
        monkeypatch.setenv(name, "")  # recorded as it was (unset), so the entry's setdefault is undone
        monkeypatch.delenv(name)
    mask = os.umask(0o022)
    os.umask(mask)
    yield got
    os.umask(mask)


def test_the_entry_hands_the_job_its_spec_with_the_real_store_url(fake_job, monkeypatch, tmp_path):
    spec = a_spec(3, store_url="postgresql://u:***@db.example/campaign", job_folder=str(tmp_path))
    monkeypatch.setenv(STORE_URL_ENV, SECRET_URL)
    entry = JobEntry(spec)
    assert entry() == "ran"
    assert fake_job == [dataclasses.replace(spec, store_url=SECRET_URL)]
    assert entry.spec.store_url == spec.store_url  # the pickled one (a requeue's) stays redacted
    assert os.environ["CAMPAIGN_JOB_FOLDER"] == str(tmp_path)
    assert os.environ["CAMPAIGN_SPOOL_DIR"] == str(tmp_path / "spool")


def test_another_store_urls_password_is_not_handed_over(fake_job, monkeypatch):
    monkeypatch.setenv(STORE_URL_ENV, "postgresql://u:pw@elsewhere/db")
    JobEntry(a_spec(store_url="postgresql://u:***@db.example/campaign"))()
    assert fake_job[0].store_url == "postgresql://u:***@db.example/campaign"


@pytest.mark.parametrize("version", [JOB_SPEC_VERSION - 1, JOB_SPEC_VERSION + 1])
def test_a_spec_of_another_version_is_refused_in_one_line(fake_job, version):
    with pytest.raises(JobSpecMismatch) as err:
        JobEntry(dataclasses.replace(a_spec(), version=version))()
    message = str(err.value)
    assert "\n" not in message and fake_job == []
    assert message.startswith(f"job spec version {version} but this job's code reads version {JOB_SPEC_VERSION}:")
    assert "install one campaign version for the launch and the job" in message


def test_a_spec_without_a_version_or_a_dict_is_refused(fake_job):
    old = object.__new__(JobSpec)  # an older pickle lacks fields, here every one
    with pytest.raises(JobSpecMismatch, match="^job spec version None but"):
        check_job_spec(old)
    with pytest.raises(JobSpecMismatch, match="^the job was handed a dict, not a JobSpec"):
        JobEntry({"point_id": 1, "store_url": "sqlite:///x.db"})()  # type: ignore[arg-type]
    assert fake_job == []
