"""GPUs a scheduler says are emulated (issue #39): a SLURM partition whose nodes all carry
the feature ``emulated_gpu`` (scripts/local-slurm.sh's) is not checked against the torch
build (campaign/launch/arch.py); a real one still is, with the same message; the dry run
says which platforms were not checked. (The README's headline sweep, launched on the local
cluster without ``platform.compute_capability=null``, is test_slurm.py's sweep: its six points
submitted and completed.)"""

from __future__ import annotations

import json
import os

import pytest

from campaign.backends import get_backend
from campaign.backends import slurm
from campaign.backends.slurm_nodes import constraint_alternatives, emulated_gpus, partition_features
from campaign.common.proc import CommandError, Completed
from campaign.launch import arch
from campaign.launch.arch import TorchBuild, refusal

CU130 = ("sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120")
V100 = {"name": "v100", "executor": "slurm", "partition": "v100", "device": "cuda", "compute_capability": 7.0}
E = frozenset({"emulated_gpu"})


# ---------------------------------------------------------------- sinfo's answer, read (pure)
def test_partition_features_reads_odd_sinfo_output():
    out = ("v100|a100_40g,a100_80g,emulated_gpu\n"
           "a100*|emulated_gpu\n"  # the default partition's mark (%P) dropped
           "cpu|(null)\n"  # no features
           "mixed|emulated_gpu\nmixed|a100_80g\n"  # two node groups, one without the feature
           "\n"
           "no bar here\n"
           "a|b|c\n"  # not NAME|FEATURES
           "|emulated_gpu\n"  # no partition
           " spaced | emulated_gpu , x ,\n"
           "empty|\n")
    assert partition_features(out) == {
        "v100": [frozenset({"a100_40g", "a100_80g", "emulated_gpu"})],
        "a100": [E],
        "cpu": [frozenset()],
        "mixed": [E, frozenset({"a100_80g"})],
        "spaced": [frozenset({"emulated_gpu", "x"})],
        "empty": [frozenset()],
    }
    assert partition_features("") == {}


def test_constraint_alternatives():
    assert constraint_alternatives(None) == [frozenset()]
    assert constraint_alternatives("  ") == [frozenset()]
    assert constraint_alternatives("a100_80g") == [frozenset({"a100_80g"})]
    assert constraint_alternatives("a&b") == [frozenset({"a", "b"})]
    assert constraint_alternatives("a,b*2") == [frozenset({"a", "b"})]
    assert constraint_alternatives("a|b") == [frozenset({"a"}), frozenset({"b"})]
    assert constraint_alternatives("[a|b]") == [frozenset({"a"}), frozenset({"b"})]
    for unreadable in ("(a|b)&c", "a;b", "a b", "a&", "|"):
        assert constraint_alternatives(unreadable) is None, unreadable


@pytest.mark.parametrize("groups,constraint,emulated", [
    (None, None, False),  # a partition sinfo does not show: nothing known
    ([], None, False),
    ([E], None, True),
    ([frozenset({"a100_40g", "emulated_gpu"})] * 2, None, True),
    ([E, frozenset({"a100_80g"})], None, False),  # one group of real GPUs: a job may get them
    ([frozenset()], None, False),  # (null)
    ([frozenset({"emulated_gpu_x"}), frozenset({"not_emulated_gpu"})], None, False),  # whole names only
    ([E | {"a100_40g"}, frozenset({"a100_80g"})], "a100_40g", True),  # only the constraint's nodes count
    ([E | {"a100_40g"}, frozenset({"a100_80g"})], "a100_80g", False),
    ([E | {"a100_40g"}, frozenset({"a100_80g"})], "a100_40g|a100_80g", False),
    ([E | {"a100_40g"}, frozenset({"a100_80g"})], "a100_40g*2", True),
    ([E | {"a100_40g"}, frozenset({"a100_80g"})], "a100_40g&emulated_gpu", True),
    ([E | {"a100_40g"}], "h100", False),  # no node has it: nothing a job gets
    ([E | {"a100_40g"}], "(a100_40g)", False),  # a constraint this cannot read: checked
])
def test_emulated_gpus(groups, constraint, emulated):
    assert emulated_gpus(groups, constraint) is emulated


# ---------------------------------------------------------------- the backend asks sinfo once
@pytest.fixture
def fresh_cache():
    slurm.node_features.cache_clear()
    yield
    slurm.node_features.cache_clear()


def test_slurm_backend_asks_sinfo_once_scrubbed_and_tolerates_no_answer(monkeypatch, fresh_cache):
    seen = []

    def sinfo(argv, **kw):
        seen.append((argv, kw))
        return Completed(list(argv), 0, "v100|emulated_gpu\na100|emulated_gpu\na100|a100_80g\n"
                                        "a100_nvlink|a100_40g,emulated_gpu\na100_nvlink|a100_80g\n", "")

    monkeypatch.setattr(slurm.shutil, "which", lambda name: f"/usr/bin/{name}")
    monkeypatch.setattr(slurm, "run", sinfo)
    monkeypatch.setenv("SLURM_JOB_ID", "7")  # inherited from a job: never passed on
    backend = slurm.SlurmBackend()
    assert backend.emulated_gpus(V100) == "SLURM partition v100: its nodes carry the feature emulated_gpu"
    assert backend.emulated_gpus({**V100, "partition": "a100"}) is None  # some of its nodes are real
    assert slurm.SlurmBackend().emulated_gpus({**V100, "partition": "a100_nvlink", "constraint": "a100_40g"}) == (
        "SLURM partition a100_nvlink: its nodes with the constraint a100_40g carry the feature emulated_gpu")
    assert backend.emulated_gpus({**V100, "partition": "a100_nvlink", "constraint": "a100_80g"}) is None
    assert backend.emulated_gpus({**V100, "partition": "nosuch"}) is None
    assert backend.emulated_gpus({**V100, "partition": None}) is None  # the cluster's default: not known
    assert len(seen) == 1  # one query for the launch
    argv, kw = seen[0]
    assert argv == ["sinfo", "-h", "-a", "-o", "%R|%f"] and kw["timeout"] > 0
    assert "SLURM_JOB_ID" not in kw["env"]

    def silent(argv, **kw):
        raise CommandError(argv, "no answer within 30 s")

    slurm.node_features.cache_clear()
    monkeypatch.setattr(slurm, "run", silent)
    assert backend.emulated_gpus(V100) is None  # no answer: checked as before
    slurm.node_features.cache_clear()
    monkeypatch.setattr(slurm.shutil, "which", lambda name: None)
    monkeypatch.setattr(slurm, "run", lambda *a, **k: pytest.fail("ran sinfo without one on PATH"))
    assert backend.emulated_gpus(V100) is None


def test_other_backends_emulate_nothing():
    assert get_backend("local").emulated_gpus({"name": "local", "device": "cpu"}) is None


# ---------------------------------------------------------------- the arch check
def test_an_emulated_platform_is_not_checked(monkeypatch):
    cu13 = TorchBuild("2.14.1", "13.0", CU130, "this environment")
    why = "SLURM partition v100: its nodes carry the feature emulated_gpu"
    assert arch.gpu_capability(V100) == (7, 0) and arch.gpu_capability(V100, why) is None
    assert refusal(V100, cu13, {}, why) is None
    assert "no kernels for compute capability 7.0" in refusal(V100, cu13, {})
    monkeypatch.setattr(arch, "point_build", lambda config: pytest.fail("looked up"))
    arch.check_point_arch({"platform": V100, "container": {"runtime": "none"}}, why)
    # a platform not checked anyway is never asked about
    monkeypatch.setattr(slurm.SlurmBackend, "emulated_gpus", lambda self, p: pytest.fail("asked"))
    assert arch.emulated_gpus({**V100, "compute_capability": None}) is None
    assert arch.emulated_gpus({**V100, "device": "cpu"}) is None


# ---------------------------------------------------------------- the launch and its dry run (a fake sinfo)
def _fake_sinfo(ws, features: str) -> None:
    """SLURM's clients that find no cluster (``away_from_slurm``), but an ``sinfo`` whose
    ``%R|%f`` answer is ``features`` (the partitions' and node groups' features)."""
    ws.away_from_slurm()
    bin_dir = ws.path / "features-bin"
    bin_dir.mkdir()
    (ws.path / "features.txt").write_text(features)
    tool = bin_dir / "sinfo"
    tool.write_text(f"#!/bin/sh\ncase \"$*\" in *'%R|%f'*) cat '{ws.path / 'features.txt'}' ;; "
                    "*) echo 'sinfo: error: no SLURM cluster here' >&2; exit 1 ;; esac\n")
    tool.chmod(0o755)
    ws.env["PATH"] = f"{bin_dir}{os.pathsep}{ws.env['PATH']}"


TODAY = ("error: platform v100: torch 2.14.1+cu130 (CUDA 13.0) of this environment has no kernels for compute "
         "capability 7.0 (its arch list: sm_75 sm_80 sm_86 sm_90 sm_100 sm_120); build the CUDA 12.6 image "
         "(singularity/build.sh --v100) and map this platform to it (+container.images.v100=PATH.sif), with "
         "container=apptainer\n")


def _cu130_here() -> None:
    build = arch.environment_build()
    if build is None or build.torch != "2.14.1+cu130":
        pytest.skip(f"this environment's torch is not 2.14.1+cu130 ({build})")


def test_a_real_v100_partition_is_still_refused_with_todays_message(ws):
    _cu130_here()
    _fake_sinfo(ws, "v100|a100_40g,a100_80g\na100|(null)\n")  # real GPUs: no emulated_gpu
    res = ws.launch("platform=v100", "gpus=1", "trainer=sleep", "--dry-run")
    assert (res.returncode, res.stderr) == (2, TODAY), res.stdout + res.stderr
    (ws.path / "features.txt").write_text("v100|emulated_gpu\nv100|a100_80g\n")  # only some nodes emulated
    res = ws.launch("platform=v100", "gpus=1", "trainer=sleep", "--dry-run")
    assert (res.returncode, res.stderr) == (2, TODAY), res.stdout + res.stderr


def test_an_emulated_partition_is_planned_and_the_dry_run_says_so(ws):
    _cu130_here()
    _fake_sinfo(ws, "v100|a100_40g,a100_80g,emulated_gpu\na100|(null)\n"
                    "a100_nvlink|a100_40g\na100_nvlink|a100_80g,emulated_gpu\n")
    sweep = ["-m", "platform=v100,a100,a100_nvlink_80", "gpus=1", "trainer=sleep", "experiment.base_iterations=8"]
    res = ws.launch(*sweep, "--dry-run")
    assert res.returncode == 0 and "refused" not in res.stderr, res.stdout + res.stderr
    assert "dry run: 3 point(s)" in res.stdout
    notes = [ln for ln in res.stdout.splitlines() if ln.startswith("note: platform")]
    assert notes == [
        "note: platform v100's GPUs are emulated (SLURM partition v100: its nodes carry the feature emulated_gpu): "
        "its compute capability 7.0 was not checked against the torch build",
        "note: platform a100_nvlink_80's GPUs are emulated (SLURM partition a100_nvlink: its nodes with the "
        "constraint a100_80g carry the feature emulated_gpu): its compute capability 8.0 was not checked against "
        "the torch build"]
    js = ws.launch(*sweep, "--json")
    assert js.returncode == 0, js.stderr
    docs = [json.loads(line) for line in js.stdout.splitlines()]
    assert [(d["config"]["platform"]["name"], d["emulated_gpus"]) for d in docs] == [
        ("v100", "SLURM partition v100: its nodes carry the feature emulated_gpu"),
        ("a100", None),
        ("a100_nvlink_80", "SLURM partition a100_nvlink: its nodes with the constraint a100_80g carry the feature "
                           "emulated_gpu")]
