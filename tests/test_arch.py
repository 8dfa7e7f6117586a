"""GPU architecture against the torch build a job runs (campaign/launch/arch.py), an image
per platform (container.images) and local_gpu's compute capability from nvidia-smi."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from campaign.catalogue import gpus
from campaign.backends.sbatch import group_items
from campaign.catalogue.container import capability_key, point_image
from campaign.common.errors import ConfigError
from campaign.launch import arch
from test_local_gpu import fake_smi
from campaign.launch.arch import (WHEEL_ARCHS, TorchBuild, capability, covers, environment_build, parse_capability,
                                  read_record, refusal, version_file_build)

CU130 = "sm_75 sm_80 sm_86 sm_90 sm_100 sm_120"  # torch 2.14.1+cu130's arch list
CU126 = "sm_50 sm_60 sm_70 sm_75 sm_80 sm_86 sm_90"


# ---------------------------------------------------------------- the rule
@pytest.mark.parametrize("arch,cc,ok", [
    (["sm_70"], (7, 0), True),
    (["sm_75"], (7, 0), False),  # CUDA 13's first: no Volta
    (["sm_80"], (8, 6), True),  # a binary runs on the same major, minor >=
    (["sm_80"], (8, 9), True),
    (["sm_86"], (8, 0), False),  # not on a lower minor
    (["sm_90"], (10, 0), False),  # nor on another major
    (["sm_80"], (9, 0), False),
    (["compute_80"], (9, 0), True),  # PTX: JIT for any capability >= its own
    (["compute_80"], (7, 5), False),
    (["sm_100"], (10, 0), True),
    (["sm_120"], (12, 0), True),
    (["garbage", ""], (8, 0), False),
    ([], (8, 0), False),
])
def test_covers(arch, cc, ok):
    assert covers(arch, cc) is ok


def test_capability_and_parse():
    assert capability("sm_86") == (8, 6) and capability("compute_90") == (9, 0) and capability("sm_100") == (10, 0)
    assert capability("gfx90a") is None
    assert parse_capability(7.0) == (7, 0) and parse_capability("8.6") == (8, 6) and parse_capability("sm_90") == (9, 0)
    assert parse_capability(None) is None
    with pytest.raises(ConfigError, match=r"platform.compute_capability 'volta' is not a compute capability; write it as MAJOR.MINOR"):
        parse_capability("volta")
    assert [capability_key(v) for v in (7, 7.0, "7.0", "sm_70", "sm_90", None, "x")] == \
        ["7.0", "7.0", "7.0", "7.0", "9.0", None, None]


def test_this_environments_torch_is_read_without_importing_it():
    """torch/version.py read as text, the arch list from the wheel table: no torch import,
    no subprocess (a launch pays milliseconds)."""
    import subprocess
    import sys

    code = ("import sys; from campaign.launch.arch import environment_build; b = environment_build(); "
            "print(b.torch, b.cuda, ' '.join(b.arch_list), 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True,
                         env={**os.environ, "PATH": "/nonexistent"})  # no probe could start either
    assert out.stdout.split() == ["2.14.1+cu130", "13.0", *CU130.split(), "False"], out.stdout + out.stderr
    build = environment_build()
    assert build is not None and build.source == "this environment"
    assert not covers(build.arch_list, (7, 0)) and covers(build.arch_list, (8, 0))


@pytest.mark.slow
def test_the_wheel_table_matches_this_machines_torch():
    """WHEEL_ARCHS' entry for this machine's build is what torch itself reports."""
    import subprocess
    import sys

    torch = pytest.importorskip("torch")
    label = torch.__version__.partition("+")[2]
    if label not in WHEEL_ARCHS:
        pytest.skip(f"torch {torch.__version__} is not an official wheel of the table")
    real = subprocess.run([sys.executable, "-c", "import torch; print(' '.join(torch.cuda.get_arch_list()))"],
                          capture_output=True, text=True, timeout=300, check=True).stdout.split()
    assert list(WHEEL_ARCHS[label]) == real


def test_version_file_build():
    text = ("__version__ = '2.14.1+cu130'\ndebug = False\ncuda: Optional[str] = '13.0'\n"
            "git_version = 'abc'\nhip: Optional[str] = None\n")
    assert version_file_build(text, "s") == TorchBuild("2.14.1+cu130", "13.0", tuple(CU130.split()), "s")
    assert version_file_build(text.replace("cu130", "cu126").replace("13.0", "12.6"), "s").arch_list == \
        tuple(CU126.split())
    cpu = "__version__ = '2.14.1+cpu'\ncuda: Optional[str] = None\n"
    assert version_file_build(cpu, "s") == TorchBuild("2.14.1+cpu", None, (), "s")  # no kernels at all
    assert version_file_build(text.replace("+cu130", ""), "s") is None  # no label: ask the build
    assert version_file_build(text.replace("cu130", "cu128"), "s") is None  # lists changed between releases
    assert version_file_build(text.replace("+cu130", "a0+git1234"), "s") is None  # a source build
    assert version_file_build("garbage", "s") is None


def test_an_unknown_build_is_probed_once(monkeypatch, tmp_path):
    """A label the table does not know: the subprocess probe, once per launch (cached)."""
    pkg = tmp_path / "torch"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("raise SystemExit('imported')\n")
    (pkg / "version.py").write_text("__version__ = '2.7.0+cu128'\ncuda = '12.8'\n")
    import importlib.util

    fake = importlib.util.spec_from_file_location("torch", pkg / "__init__.py", submodule_search_locations=[str(pkg)])
    monkeypatch.setattr(arch.importlib.util, "find_spec", lambda name: fake if name == "torch" else None)
    calls = []
    probed = TorchBuild("2.7.0+cu128", "12.8", ("sm_70", "sm_80"), "probe")
    monkeypatch.setattr(arch, "_probe", lambda python: calls.append(python) or probed)
    environment_build.cache_clear()
    try:
        assert environment_build() is probed and environment_build() is probed and len(calls) == 1
        (pkg / "version.py").write_text("__version__ = '2.7.0+cu126'\ncuda = '12.6'\n")
        environment_build.cache_clear()
        assert environment_build().arch_list == tuple(CU126.split()) and len(calls) == 1  # table: no probe
    finally:
        environment_build.cache_clear()


def test_no_torch_is_not_checked_here(monkeypatch):
    monkeypatch.setattr(arch.importlib.util, "find_spec", lambda name: None)
    environment_build.cache_clear()
    try:
        assert environment_build() is None
    finally:
        environment_build.cache_clear()


def test_refusal_lines():
    cu13 = TorchBuild("2.14.1", "13.0", tuple(CU130.split()), "image /i/cu13.sif")
    v100 = {"name": "v100", "device": "cuda", "compute_capability": 7.0}
    assert refusal(v100, cu13, {"runtime": "apptainer"}) == (
        "platform v100: torch 2.14.1 (CUDA 13.0) of image /i/cu13.sif (container.image: v100 has no container.images "
        "entry) has no kernels for compute capability 7.0 "
        f"(its arch list: {CU130}); build the CUDA 12.6 image (singularity/build.sh --v100) and map this platform "
        "to it (+container.images.v100=PATH.sif)")
    assert refusal({**v100, "compute_capability": 8.0, "name": "a100"}, cu13, {"runtime": "apptainer"}) is None
    assert refusal({**v100, "device": "cpu"}, cu13, {}) is None  # CPU ranks: no kernels needed
    assert refusal({**v100, "compute_capability": None}, cu13, {}) is None  # unstated: not checked
    cpu = TorchBuild("2.14.1+cpu", None, (), "this environment")
    assert refusal({**v100, "compute_capability": 8.0, "name": "a100"}, cpu, {"runtime": "none"}) == (
        "platform a100: torch 2.14.1+cpu of this environment is a CPU-only build; install a torch "
        "built for it, or run in an image built for it (container=apptainer container.image=PATH); if a100's GPUs "
        "are emulated (CPU ranks), set platform.compute_capability=null")
    new = {"name": "b300", "device": "cuda", "compute_capability": "10.3"}
    assert refusal(new, TorchBuild("2.14.1", "12.6", tuple(CU126.split()), "image /i/x.sif"), {"runtime": "apptainer"}) \
        .endswith("; build an image for it and map this platform to it (+container.images.b300=PATH.sif)")


# ---------------------------------------------------------------- an image and its record
def make_image(folder: Path, name: str, cuda: str, arch: str) -> Path:
    """A test image file and the record singularity/build.sh writes beside it."""
    folder.mkdir(parents=True, exist_ok=True)
    img = folder / name
    img.write_bytes(b"SIF fake " + name.encode())
    (folder / (name + ".sha256")).write_text(
        f"{'a' * 64}  {name}\n# torch_version 2.14.1\n# cuda_version {cuda}\n# cuda_arch_list {arch}\n")
    return img


def test_read_record(tmp_path):
    img = make_image(tmp_path, "cu126.sif", "12.6", CU126)
    assert read_record(str(img)) == TorchBuild("2.14.1", "12.6", tuple(CU126.split()), f"image {img}")
    bare = tmp_path / "old.sif"
    bare.write_bytes(b"x")
    (tmp_path / "old.sif.sha256").write_text(f"{'b' * 64}  old.sif\n")
    assert read_record(str(bare)) is None  # no record: not checked
    assert read_record(str(tmp_path / "none.sif")) is None


def test_a_stale_or_foreign_record_is_not_read(tmp_path):
    """The record obeys the digest's rule (container.sidecar_text, one helper): a sidecar
    older than the image (rebuilt since) or not opening with a digest describes another
    build; neither its digest nor its record is trusted."""
    from campaign.catalogue.container import _sidecar_sha256

    img = make_image(tmp_path, "cu126.sif", "12.6", CU126)
    side = Path(str(img) + ".sha256")
    st = side.stat()
    os.utime(img, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))  # rebuilt after its record
    assert read_record(str(img)) is None and _sidecar_sha256(str(img)) is None
    os.utime(side, ns=(st.st_atime_ns, st.st_mtime_ns + 2_000_000_000))  # the record rewritten after
    assert read_record(str(img)).cuda == "12.6" and _sidecar_sha256(str(img)) == "a" * 64
    side.write_text(f"# torch_version 2.14.1\n# cuda_version 12.6\n# cuda_arch_list {CU126}\n")  # no digest line
    assert read_record(str(img)) is None and _sidecar_sha256(str(img)) is None
    assert read_record(str(tmp_path / "gone.sif")) is None  # a record without its image


def test_the_record_is_read_once_per_image(tmp_path, monkeypatch):
    """A launch reads each image's record once, however many points run in it; a record
    written again (a rebuild) is read again."""
    reads = []
    real = arch.sidecar_text
    monkeypatch.setattr(arch, "sidecar_text", lambda image, *a: reads.append(image) or real(image, *a))
    arch._image_build.cache_clear()
    a = make_image(tmp_path, "a.sif", "12.6", CU126)
    b = make_image(tmp_path, "b.sif", "13.0", CU130)
    point = lambda img: {"container": {"runtime": "apptainer", "image": str(img)}}  # noqa: E731
    builds = [arch.point_build(point(img)) for img in (a, a, b, a, b)]
    assert [x.cuda for x in builds] == ["12.6", "12.6", "13.0", "12.6", "13.0"]
    assert reads == [str(a), str(b)]
    side = Path(str(a) + ".sha256")
    side.write_text(side.read_text().replace("12.6", "12.8") + "\n")
    assert arch.point_build(point(a)).cuda == "12.8" and reads == [str(a), str(b), str(a)]
    arch._image_build.cache_clear()


def test_which_points_are_checked_is_said_once(monkeypatch):
    """arch.gpu_capability is the one precondition: check_point_arch looks no build up for
    a point it does not check, and refusal passes the same points."""
    cu13 = TorchBuild("2.14.1", "13.0", tuple(CU130.split()), "this environment")
    cpu = TorchBuild("2.14.1+cpu", None, (), "this environment")
    monkeypatch.setattr(arch, "point_build", lambda config: cpu)
    for plat, cc in [({"name": "v", "device": "cuda", "compute_capability": 7.0}, (7, 0)),
                     ({"name": "v", "compute_capability": "8.6"}, (8, 6)),  # device defaults to cuda
                     ({"name": "v", "device": "cpu", "compute_capability": 7.0}, None),
                     ({"name": "v", "device": "cuda", "compute_capability": None}, None)]:
        assert arch.gpu_capability(plat) == cc
        assert (refusal(plat, cpu, {}) is None) is (cc is None)
        config = {"platform": plat, "container": {"runtime": "none"}}
        if cc is None:
            monkeypatch.setattr(arch, "point_build", lambda config: pytest.fail("looked up"))
            arch.check_point_arch(config)
        else:
            monkeypatch.setattr(arch, "point_build", lambda config: cpu)
            with pytest.raises(arch.InfeasiblePoint, match="is a CPU-only build"):
                arch.check_point_arch(config)
    assert refusal({"name": "a", "compute_capability": 8.0}, cu13, {}) is None


def test_an_image_from_its_entry_is_named_and_that_entry_is_the_fix():
    """A point whose image comes from container.images is told that entry (to set, not to
    add with '+'); one that fell back to container.image is told to add its own."""
    cu13 = TorchBuild("2.14.1", "13.0", tuple(CU130.split()), "image /i/wrong.sif")
    v100 = {"name": "v100", "device": "cuda", "compute_capability": 7.0}
    mapped = {"runtime": "apptainer", "image": "/i/wrong.sif", "images": {"v100": "/i/wrong.sif"}}
    assert refusal(v100, cu13, mapped) == (
        "platform v100: torch 2.14.1 (CUDA 13.0) of image /i/wrong.sif (container.images.v100) has no kernels for "
        f"compute capability 7.0 (its arch list: {CU130}); build the CUDA 12.6 image (singularity/build.sh --v100) "
        "and point container.images.v100 at it (container.images.v100=PATH.sif)")
    by_cc = {"runtime": "apptainer", "image": "/i/d.sif", "images": {"sm_70": "/i/wrong.sif", "a100": "/i/a.sif"}}
    assert "(container.images.sm_70) has no kernels" in refusal(v100, cu13, by_cc)
    assert refusal(v100, cu13, by_cc).endswith("point container.images.sm_70 at it (container.images.sm_70=PATH.sif)")
    b300 = {"name": "b300", "device": "cuda", "compute_capability": "10.3"}
    cu126 = TorchBuild("2.14.1", "12.6", tuple(CU126.split()), "image /i/x.sif")
    assert refusal(b300, cu126, {"runtime": "apptainer", "image": "/i/x.sif", "images": {"b300": "/i/x.sif"}}) \
        .endswith("; build an image for it and point container.images.b300 at it (container.images.b300=PATH.sif)")
    other = {"runtime": "apptainer", "image": "/i/x.sif", "images": {"v100": "/i/v.sif"}}
    assert "/i/x.sif (container.image: b300 has no container.images entry) has no kernels" in \
        refusal(b300, cu126, other)


ROCM = ("__version__ = '2.5.1+rocm6.2'\ndebug = False\ncuda: Optional[str] = None\n"
        "git_version = 'abc'\nhip: Optional[str] = '6.2.41133-dd7f95766'\n")


def test_a_rocm_build_is_said_and_refused_on_nvidia_only():
    build = version_file_build(ROCM, "this environment")
    assert build == TorchBuild("2.5.1+rocm6.2", None, (), "this environment", "6.2.41133-dd7f95766")
    a100 = {"name": "a100", "device": "cuda", "compute_capability": 8.0}
    assert refusal(a100, build, {"runtime": "none"}) == (
        "platform a100: torch 2.5.1+rocm6.2 of this environment is a ROCm build (HIP 6.2.41133-dd7f95766), for AMD "
        "GPUs; a100's are NVIDIA; install a CUDA build of torch, or run in an image of one (container=apptainer "
        "container.image=PATH)")
    v100 = refusal({**a100, "name": "v100", "compute_capability": 7.0}, build, {"runtime": "none"})
    assert "ROCm build" in v100 and "CPU-only" not in v100 and "compute capability" not in v100  # not a CUDA matter
    assert "12.6" not in v100
    assert refusal({**a100, "device": "cpu"}, build, {}) is None  # CPU ranks run on any build
    assert version_file_build(ROCM.replace("'6.2.41133-dd7f95766'", "None"), "s").hip is None  # plain CPU-only


def test_point_image():
    c = {"image": "/i/cu13.sif", "images": {"v100": "/i/cu126.sif", "9.0": "/i/h.sif"}}
    assert point_image(c, {"name": "v100", "compute_capability": 7.0}) == "/i/cu126.sif"
    assert point_image(c, {"name": "a100", "compute_capability": 8.0}) == "/i/cu13.sif"
    assert point_image(c, {"name": "h100", "compute_capability": 9.0}) == "/i/h.sif"
    assert point_image({"image": "/d.sif", "images": {"sm_70": "/v.sif"}}, {"name": "x", "compute_capability": 7.0}) == "/v.sif"
    with pytest.raises(ConfigError, match=r"^container.images.v100 is empty; give the .sif its points run in$"):
        point_image({"image": "/d.sif", "images": {"v100": ""}}, {"name": "v100"})


def test_points_of_two_images_never_share_an_array():
    from campaign.backends.resources import Resources

    class P:
        def __init__(self, image):
            self.resources = Resources(nodes=1, tasks_per_node=1, gpus_per_node=1, cpus_per_task=1, timeout_min=5)
            self.config = {"container": {"runtime": "apptainer", "image": image}}

    a, b, c = P("/a.sif"), P("/b.sif"), P("/a.sif")
    assert [[p for p, _ in g] for g in group_items([(a, {}), (b, {}), (c, {})])] == [[a, c], [b]]


# ---------------------------------------------------------------- the launch
@pytest.mark.slow
def test_v100_refused_with_the_cuda13_image_and_run_in_the_cuda126_one(ws, tmp_path):
    cu13 = make_image(tmp_path / "img", "campaign-cu130.sif", "13.0", CU130)
    cu126 = make_image(tmp_path / "img", "campaign-cu126.sif", "12.6", CU126)
    sweep = ["-m", "platform=v100,a100", "gpus=1", "trainer=sleep", "experiment.base_iterations=8",
             "container=apptainer", f"container.image={cu13}"]
    ws.away_from_slurm()  # real V100s: no scheduler here says they are emulated (the test SLURM's are)
    res = ws.launch(*sweep, "--dry-run")  # the V100 point left out in one line, the A100 one kept
    assert res.returncode == 0, res.stdout + res.stderr
    assert "dry run: 1 point(s) in 1 sbatch job array(s)" in res.stdout
    line = res.stderr.strip()
    assert line.count("\n") == 0 and line.startswith("refused: point platform=v100 gpus=1 "), line
    assert line.endswith(
        f": platform v100: torch 2.14.1 (CUDA 13.0) of image {cu13} (container.image: v100 has no container.images "
        "entry) has no kernels for compute capability 7.0 "
        f"(its arch list: {CU130}); build the CUDA 12.6 image (singularity/build.sh --v100) and map this platform "
        "to it (+container.images.v100=PATH.sif)"), line
    ok = ws.launch(*sweep, f"+container.images.v100={cu126}", "--show-scripts")
    assert ok.returncode == 0, ok.stderr
    assert "dry run: 2 point(s) in 2 sbatch job array(s)" in ok.stdout
    commands = [ln for ln in ok.stdout.splitlines() if re.search(r"\bapptainer exec\b", ln)]
    assert any(str(cu126) in ln for ln in commands) and any(str(cu13) in ln for ln in commands), ok.stdout
    a1 = ok.stdout.split("== A2")[0]  # v100's array first (sweep order), in the CUDA 12.6 image only
    assert str(cu126) in a1 and str(cu13) not in a1.split("== A1")[1]
    assert f"image of platform v100: {cu126}\nimage of platform a100: {cu13}\n" in ok.stdout
    wrong = ws.launch(*sweep, f"+container.images.v100={cu13}", "--dry-run")  # mapped, to the wrong image
    assert f"of image {cu13} (container.images.v100) has no kernels" in wrong.stderr, wrong.stderr
    assert wrong.stderr.strip().endswith("point container.images.v100 at it (container.images.v100=PATH.sif)")


@pytest.mark.slow
def test_v100_refused_with_this_environments_cuda13_torch(ws):
    ws.away_from_slurm()  # real V100s: no scheduler here says they are emulated (the test SLURM's are)
    res = ws.launch("platform=v100", "gpus=1", "trainer=sleep", "--dry-run")  # nothing left: refused
    assert res.returncode == 2, res.stdout + res.stderr
    line = res.stderr.strip()
    assert line.count("\n") == 0 and line.startswith("error: platform v100: torch 2.14.1")
    assert "(CUDA 13.0) of this environment has" in line and "has no kernels for compute capability 7.0" in line
    assert line.endswith("build the CUDA 12.6 image (singularity/build.sh --v100) and map this platform to it "
                         "(+container.images.v100=PATH.sif), with container=apptainer")
    assert ws.launch("platform=a100", "gpus=1", "trainer=sleep", "--dry-run").returncode == 0
    # the manual override, for GPUs emulated where the scheduler does not say so: not checked
    ok = ws.launch("platform=v100", "gpus=1", "trainer=sleep", "platform.compute_capability=null", "--dry-run")
    assert ok.returncode == 0 and "dry run: 1 point(s)" in ok.stdout, ok.stderr
    bad = ws.launch("platform=v100", "gpus=1", "trainer=sleep", "platform.compute_capability=volta", "--dry-run")
    assert (bad.returncode, bad.stderr) == (2, "error: platform.compute_capability=volta: Value 'volta' of type "
                                               "'str' could not be converted to Float\n"), bad.stderr  # typed field


# ---------------------------------------------------------------- local_gpu
@pytest.fixture
def smi(tmp_path, monkeypatch):
    """test_local_gpu's fake nvidia-smi, answering only a query that asks for compute_cap."""
    def use(lines):
        monkeypatch.setenv("PATH", f"{fake_smi(tmp_path / 'bin', lines, query_has='compute_cap')}{os.pathsep}"
                                   f"{os.environ['PATH']}")
        gpus.local_gpus.cache_clear()
        return gpus.local_gpus()

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    yield use
    gpus.local_gpus.cache_clear()


def test_local_gpu_reads_the_compute_capability(smi):
    found = smi(["0, GPU-1, Tesla V100-PCIE-32GB, 32768, 7.0", "1, GPU-2, Tesla V100-PCIE-32GB, 32768, 7.0"])
    assert found.count == 2 and found.compute_capability == 7.0 and found.fact("compute_capability") == 7.0
    assert smi(["0, GPU-1, NVIDIA H100 80GB HBM3, 81559, 9.0"]).compute_capability == 9.0
    assert smi(["0, GPU-1, Some GPU, 1024, [N/A]"]).compute_capability is None


def test_local_gpu_without_compute_cap_field(tmp_path, monkeypatch):
    """A driver that does not know compute_cap: asked again without it, capability unknown."""
    folder = tmp_path / "bin"
    folder.mkdir()
    (folder / "nvidia-smi").write_text(
        "#!/bin/sh\ncase \"$1\" in *compute_cap*) echo 'Field \"compute_cap\" is not a valid field to query.'; exit 2;; esac\n"
        "echo '0, GPU-1, Tesla V100-PCIE-32GB, 32768'\n")
    (folder / "nvidia-smi").chmod(0o755)
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    gpus.local_gpus.cache_clear()
    try:
        found = gpus.local_gpus()
        assert found.count == 1 and found.name == "Tesla V100-PCIE-32GB" and found.compute_capability is None
    finally:
        gpus.local_gpus.cache_clear()
