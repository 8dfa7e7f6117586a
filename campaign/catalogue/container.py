"""Containers on the host side: the command that runs a job's Python inside an
Apptainer/Singularity image, the folders it binds, launch-time checks and the
image's provenance.

Pure functions over ``ContainerSpec`` (campaign/catalogue/config.py); stdlib only, no torch.
The image itself is built by ``singularity/build.sh`` (see singularity/README.md).

Environment: the command never passes ``--cleanenv``. Apptainer (>= 1.0) and
Singularity (>= 3.6) hand the host environment to the contained process, except
PATH, LD_LIBRARY_PATH and their own ``APPTAINER_*``/``SINGULARITY_*`` variables, so
what the job needs arrives unchanged: SLURM_* and SUBMITIT_* (submitit finds its job
folder and rank through them), MASTER_ADDR/MASTER_PORT, NCCL_*, CUDA_VISIBLE_DEVICES.
The image's %environment (singularity/campaign.def) runs after that and keeps a
host value where it only sets a default (OMP_NUM_THREADS). ``spec.env`` entries are
passed through the runtime's own environment prefix (``container_env``:
``APPTAINERENV_K=V`` for apptainer, ``SINGULARITYENV_K=V`` for singularity), which the
runtime sets inside after %environment, so they win over both, as ``--env`` would. They
are set in the environment of the process that submits the jobs (campaign/launch/submit.py),
which the job and its ``srun`` tasks inherit: never on the command line (every user
sees it in ``ps``), in the sbatch script or in the store. A token among them stays
private to the user.

Quoting: the command is one shell string, because submitit puts it in the sbatch
script (``srun ... <python> -u -m submitit.core._submit <folder>``) and its local
executor ``shlex.split``s it. Every word goes through ``shlex.quote``. What the
runtime's own flag syntax cannot carry is refused with a ``ConfigError`` rather than
mangled: ``--bind`` is a comma-separated list of ``src[:dst[:opts]]`` read as CSV,
so a path with ',', ':' or '"' cannot be bound. A variable's name must be a shell
name; control characters (newlines, tabs) are refused everywhere.
"""

from __future__ import annotations

import hashlib
import os
import posixpath
import re
import shlex
import shutil
import stat
import sys
from typing import TYPE_CHECKING, Any, Dict, Iterable, List, Optional, Sequence

from campaign.common.errors import ConfigError, one_line
from campaign.common.proc import CommandError, run
from campaign.common.text import printable

if TYPE_CHECKING:  # pragma: no cover - typing only; keeps this module's import light
    from campaign.catalogue.config import ContainerSpec

RUNTIMES = ("apptainer", "none", "singularity")
BIND_OPTIONS = ("ro", "rw")
SHA256_SUFFIX = ".sha256"  # build.sh writes <image>.sha256 beside the image
BUILD_HINT = "build it with singularity/build.sh or set container.image=PATH"
# The prefix each runtime strips from a host variable to set it inside the container.
ENV_PREFIX = {"apptainer": "APPTAINERENV_", "singularity": "SINGULARITYENV_"}

_CHUNK = 1 << 20  # hash images in 1 MiB reads
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_SHA256 = re.compile(r"[0-9a-f]{64}\Z")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _refuse_control(what: str, value: str) -> None:
    if _CONTROL.search(value):
        raise ConfigError(f"{what} {value!r} contains a control character (newline, tab, ...); rename it")


def _check_runtime(runtime: str) -> None:
    if runtime not in RUNTIMES:
        raise ConfigError(f"unknown container runtime {runtime!r}; available: {', '.join(RUNTIMES)}")


def _bind_path(what: str, path: str) -> str:
    """A host folder as one plain bind: absolute, normalized, expressible in --bind."""
    if not path:
        raise ConfigError(f"{what} is empty; give a folder to bind")
    _refuse_control(what, path)
    for ch, why in ((",", "separates binds"), (":", "separates src:dst:opts"), ('"', "breaks its CSV parsing")):
        if ch in path:
            raise ConfigError(
                f"{what} {path!r} contains {ch!r}, which --bind cannot express ({ch!r} {why}); "
                "rename the folder or bind a symlink to it"
            )
    return posixpath.normpath(os.path.abspath(path))


def _bind_spec(spec: str) -> str:
    """Validate one ``src[:dst[:opts]]`` bind and return it normalized."""
    if not spec:
        raise ConfigError("container.binds has an empty entry; give 'src[:dst[:opts]]'")
    _refuse_control("bind", spec)
    for ch, why in ((",", "separates binds"), ('"', "breaks its CSV parsing")):
        if ch in spec:
            raise ConfigError(
                f"bind {spec!r} contains {ch!r}, which --bind cannot express ({ch!r} {why}); "
                "rename the folder or bind a symlink to it"
            )
    parts = spec.split(":")
    if len(parts) > 3:
        raise ConfigError(
            f"bind {spec!r} has {len(parts) - 1} ':'; --bind takes 'src[:dst[:opts]]' "
            "and a path containing ':' cannot be bound"
        )
    for label, path in zip(("source", "destination"), parts[:2]):
        if not posixpath.isabs(path):
            raise ConfigError(f"bind {spec!r}: {label} {path!r} must be an absolute path")
    if len(parts) == 3 and parts[2] not in BIND_OPTIONS:
        raise ConfigError(f"bind {spec!r}: unknown option {parts[2]!r}; valid options: {', '.join(BIND_OPTIONS)}")
    parts[:2] = [posixpath.normpath(p) for p in parts[:2]]
    return ":".join(parts)


def _covered(path: str, others: Sequence[str]) -> bool:
    """Whether another plain bind already makes ``path`` visible at the same place."""
    return any(o != path and (path + "/").startswith(o.rstrip("/") + "/") for o in others)


def job_binds(
    *,
    data_dirs: Iterable[Optional[str]],
    results_dir: str,
    code_dir: Optional[str],
    extra: Iterable[str] = (),
) -> List[str]:
    """The ``--bind`` list a job needs, in a stable order.

    Dataset roots first, then the results folder (it holds the store, the job
    folders and the logs), then the code, then ``extra`` (``container.binds``,
    ``src[:dst[:opts]]``). Host folders are bound at the same path inside, made
    absolute against the current directory and normalized; ``None`` entries (the
    synthetic dataset has no root) are skipped. Duplicates are dropped, and so is a
    folder that another plain bind in the list already contains. Raises
    ``ConfigError`` for a path that ``--bind`` cannot express.
    """
    if isinstance(data_dirs, str):  # one root given bare, not a list of its characters
        data_dirs = [data_dirs]
    if isinstance(extra, str):
        extra = [extra]
    plain: List[str] = []
    for i, d in enumerate(data_dirs):
        if d is not None:
            plain.append(_bind_path(f"dataset root #{i + 1}", d))
    plain.append(_bind_path("results_dir", results_dir))
    if code_dir is not None:
        plain.append(_bind_path("code folder", code_dir))
    specs: List[str] = []
    for e in extra:
        s = _bind_spec(e)
        (specs if ":" in s else plain).append(s)
    kept = [p for p in dict.fromkeys(plain) if not _covered(p, plain)]
    return kept + [s for s in dict.fromkeys(specs) if s not in kept]


def capability_key(value: object) -> Optional[str]:
    """A compute capability as ``container.images`` keys it: 7 / 7.0 / "7.0" / "sm_70" -> "7.0"."""
    if value is None or value == "":
        return None
    text = str(value).strip().lower()
    m = re.fullmatch(r"sm_(\d*)(\d)", text)
    if m:
        return f"{int(m.group(1) or 0)}.{m.group(2)}"
    try:
        return f"{float(text):.1f}"
    except ValueError:
        return None


def image_entry(container: dict, platform: dict) -> Optional[Any]:
    """The ``container.images`` key a point of ``platform`` takes its image from: the
    platform's name, else the entry for its compute capability (``"7.0"``, ``sm_70``);
    None when neither is there (the point runs in ``container.image``, the default).
    Raises ``ConfigError`` for an ``images`` entry with an empty path."""
    images = dict(container.get("images") or {})
    by_cc: Dict[str, Any] = {}  # capability -> its key as given (a YAML 7.0 may be a float)
    for key, path in images.items():
        if not path:
            raise ConfigError(f"container.images.{key} is empty; give the .sif its points run in")
        _refuse_control(f"container.images.{key}", str(path))
        cc = capability_key(key) if re.fullmatch(r"(sm_)?\d+(\.\d)?", str(key).strip().lower()) else None
        if cc is not None:
            by_cc[cc] = key
    name = platform.get("name")
    if name in images:
        return name
    return by_cc.get(capability_key(platform.get("compute_capability")) or "")


def point_image(container: dict, platform: dict) -> Optional[str]:
    """The image a point of ``platform`` runs in: ``container.images[image_entry(...)]``,
    else ``container.image``. Raises ``ConfigError`` for an ``images`` entry that has an
    empty path."""
    key = image_entry(container, platform)
    return str(dict(container.get("images"))[key]) if key is not None else container.get("image")


def container_env(spec: "ContainerSpec") -> Dict[str, str]:
    """``spec.env`` as the host variables the runtime turns into them inside:
    ``{"APPTAINERENV_HF_TOKEN": "hf_..."}`` (``SINGULARITYENV_`` for singularity), in
    name order; empty for ``runtime: none``. Raises ``ConfigError`` for a name that is not
    a variable name or a value with a control character. The values are the real ones:
    set them in the submitting process's environment, never on a command line, and show
    them through ``campaign.common.redact`` (a name like ``*_TOKEN`` is masked)."""
    _check_runtime(spec.runtime)
    env = dict(spec.env or {})
    out: Dict[str, str] = {}
    for key in sorted(env, key=str):
        value = "" if env[key] is None else str(env[key])
        if not _ENV_NAME.match(str(key)):
            raise ConfigError(
                f"container.env name {key!r} is not a valid variable name (letters, digits, '_'; not starting with a digit)"
            )
        if _CONTROL.search(value):  # the value itself is never echoed: it may be a token
            raise ConfigError(f"container.env.{key} contains a control character (newline, tab, ...); remove it")
        if spec.runtime != "none":
            out[ENV_PREFIX[spec.runtime] + str(key)] = value
    return out


def shown_env(variables: Dict[str, str]) -> str:
    """``K=V ...`` for a person to read (a dry run): values shell-quoted, one whose name
    is named like a secret's as ``***`` (campaign.common.redact), URL passwords hidden."""
    from campaign.common.redact import SECRET, is_secret_key, redact

    return " ".join(f"{k}={SECRET if is_secret_key(k) else shlex.quote(redact(v))}" for k, v in variables.items())


def container_python(
    spec: "ContainerSpec",
    *,
    binds: Sequence[str],
    python: str = "python",
    gpu: bool = True,
) -> Optional[str]:
    """The ``python=`` string for submitit's executors, or None for ``runtime: none``.

    ``<runtime> exec [--nv] [--bind a,b,c] <image> <python>``, every word
    shell-quoted; submitit appends ``-u -m submitit.core._submit <folder>``.
    ``spec.env`` is not on it: it reaches the container through ``container_env``.
    ``binds`` is the job's list (``job_binds``); ``spec.binds`` is appended to it,
    duplicates dropped. ``--nv`` (the host's NVIDIA driver and devices) only with
    ``gpu``. The image path is made absolute: the job starts in another folder.
    None means the job runs on the host interpreter. Raises ``ConfigError`` for an
    unknown runtime, a missing ``container.image``, or a bind or path that the
    runtime's flags cannot carry (see the module docstring).
    """
    _check_runtime(spec.runtime)
    if spec.runtime == "none":
        return None
    if not spec.image:
        raise ConfigError(f"container.image is not set for container={spec.runtime}; {BUILD_HINT}")
    _refuse_control("container image", spec.image)
    if not python:
        raise ConfigError("the Python command run inside the container is empty; pass python='python'")
    _refuse_control("python command", python)
    merged = list(dict.fromkeys(_bind_spec(b) for b in [*binds, *(spec.binds or [])]))
    argv = [spec.runtime, "exec"]
    if gpu:
        argv.append("--nv")
    if merged:
        argv += ["--bind", ",".join(merged)]
    argv += [os.path.abspath(spec.image), python]
    return shlex.join(argv)


def check_container(spec: "ContainerSpec", *, here: bool = True) -> None:
    """Launch-time validation: raises ``ConfigError`` with one actionable line.

    An unknown runtime, an image that is unset, or a ``container.binds``/``container.env``
    entry that the runtime's flags cannot carry; with ``here`` (a launch, not a dry run)
    also an image that is missing or not a file and a runtime that is not on PATH
    (``check_container_here``). ``runtime: none`` always passes.
    """
    _check_runtime(spec.runtime)
    if spec.runtime == "none":
        return
    if not spec.image:
        raise ConfigError(f"container.image is not set for container={spec.runtime}; {BUILD_HINT}")
    container_python(spec, binds=[], gpu=False)  # refuses binds the flags cannot carry
    container_env(spec)  # and variables that cannot be passed
    if here:
        check_container_here(spec)


def check_container_here(spec: "ContainerSpec", platform: Optional[dict] = None) -> None:
    """What running the container needs of this machine: the image file and the runtime on
    PATH. A dry run executes nothing and skips it (it says what would be missing)."""
    lacking = container_lacks(spec, platform)
    if lacking:
        raise ConfigError(lacking[0])


def needs_v100_image(platform: Optional[dict]) -> bool:
    """Whether ``platform``'s GPUs need the CUDA 12.6 image (``singularity/build.sh --v100``):
    a compute capability below 7.5 (Volta and older), which CUDA 13 has no kernels for."""
    cc = capability_key((platform or {}).get("compute_capability"))
    return cc is not None and float(cc) < 7.5


def build_command(image: str, platform: Optional[dict] = None) -> str:
    """The command that writes ``image`` for ``platform``'s points: ``singularity/build.sh
    [--v100] -o IMAGE`` (``--v100``: ``needs_v100_image``), the path absolute and shell-quoted."""
    v100 = " --v100" if needs_v100_image(platform) else ""
    return f"singularity/build.sh{v100} -o {shlex.quote(os.path.abspath(image))}"


def _point_at_image(spec: "ContainerSpec", platform: Optional[dict]) -> str:
    """How to give the point another image: the ``container.images`` entry it took its image
    from (a platform's name; a capability's is shadowed by one for the platform, since
    Hydra's key path cannot hold its dot), else ``container.image``."""
    key = image_entry({"images": dict(spec.images or {})}, platform or {}) if platform else None
    name = (platform or {}).get("name")
    if key is None:
        return "set container.image=PATH"
    if key == name:
        return f"set container.images.{key}=PATH"
    return f"give {name} its own (+container.images.{name}=PATH)"


def container_lacks(spec: "ContainerSpec", platform: Optional[dict] = None) -> List[str]:
    """What this machine lacks to run the container: the image, the runtime (one line each).
    A missing image is named with the command that builds it for ``platform``'s GPUs
    (``build_command``)."""
    out: List[str] = []
    if spec.runtime == "none" or not spec.image:
        return out
    if not os.path.exists(spec.image):
        out.append(f"container image {os.path.abspath(spec.image)} not found; build it with "
                   f"{build_command(spec.image, platform)}, or {_point_at_image(spec, platform)}")
    elif not os.path.isfile(spec.image):
        out.append(f"container image {spec.image} is not a file; point container.image at the .sif that "
                   "singularity/build.sh writes")
    if shutil.which(spec.runtime) is None:
        out.append(f"{spec.runtime} not found on PATH; load its module (module load {spec.runtime}) or use "
                   "container=none")
    return out


def sidecar_text(image: str, limit: int = 65536) -> Optional[str]:
    """The text of ``<image>.sha256`` (build.sh's digest line, then its record of the build)
    when it describes this image: at least as new as the image file, and opening with a
    sha256 digest. None otherwise: no image, no sidecar, or one left from an older build
    (the image was rebuilt after it was written), whose digest and record would both lie.
    The one rule for the digest (``image_provenance``) and the build record
    (campaign/launch/arch.py)."""
    from campaign.common.untrusted import read_head

    sidecar = image + SHA256_SUFFIX
    try:
        if os.stat(sidecar).st_mtime_ns < os.stat(image).st_mtime_ns:
            return None  # the image was rebuilt after the sidecar was written
    except OSError:
        return None
    # it may lie in a shared images folder: a FIFO planted there would block a plain open
    # (the launch, every job's start); a link is followed (an image and its record may be
    # linked from such a folder), but only to a regular file, read without blocking
    data, reason = read_head(sidecar, limit * 4, follow=True)  # limit: characters; UTF-8 takes up to 4 bytes each
    if data is None:
        if reason and reason.startswith("is not a regular file"):
            print(printable(f"warning: container image record {sidecar} {reason}; not read (taken as absent)"),
                  file=sys.stderr)
        return None
    try:
        text = data.decode("utf-8")[:limit]
    except UnicodeDecodeError:
        return None
    words = text.split()
    return text if words and _SHA256.match(words[0].lower()) else None


def _sidecar_sha256(image: str) -> Optional[str]:
    """The digest in ``<image>.sha256`` when that file describes the image (``sidecar_text``)."""
    text = sidecar_text(image, 4096)
    return text.split()[0].lower() if text is not None else None


def file_sha256(path: str) -> str:
    """sha256 of a file, read in 1 MiB chunks (images are several GB)."""
    from campaign.common.untrusted import kind

    h = hashlib.sha256()
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))  # a FIFO: never waited on
    with os.fdopen(fd, "rb") as f:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise OSError(f"{path} is not a regular file ({kind(mode)})")
        os.set_blocking(fd, True)
        for chunk in iter(lambda: f.read(_CHUNK), b""):
            h.update(chunk)
    return h.hexdigest()


def _runtime_version(runtime: str) -> Optional[str]:
    try:
        out = run([runtime, "--version"], timeout=30.0)
    except CommandError:
        return None
    return one_line(out.stdout) or one_line(out.stderr) or None


def image_provenance(spec: "ContainerSpec") -> dict:
    """What ran the job: image path and sha256, runtime and its ``--version``.

    ``image_sha256`` comes from the ``<image>.sha256`` sidecar that build.sh writes
    when it is at least as new as the image (``image_sha256_source: "sidecar"``),
    else from hashing the file (``"computed"``); None when there is no image file.
    ``runtime_version`` is None when the runtime cannot be run here.
    """
    _check_runtime(spec.runtime)
    prov: dict = {
        "runtime": spec.runtime,
        "runtime_version": None,
        "image": None,
        "image_sha256": None,
        "image_sha256_source": None,
    }
    if spec.runtime == "none":
        return prov
    prov["runtime_version"] = _runtime_version(spec.runtime)
    if spec.image:
        image = os.path.abspath(spec.image)
        prov["image"] = image
        if os.path.isfile(image):
            digest = _sidecar_sha256(image)
            if digest is not None:
                prov["image_sha256"], prov["image_sha256_source"] = digest, "sidecar"
            else:
                prov["image_sha256"], prov["image_sha256_source"] = file_sha256(image), "computed"
    return prov
