"""GPU architecture against the torch build a job will run: refused before anything is
stored when that build has no kernels for the point's GPUs.

Which build: with ``container=none`` the launching environment's torch, learnt without
importing it (``environment_build``): torch/version.py is read as text for the version and
CUDA version, and the arch list is taken from ``WHEEL_ARCHS``, the official wheels' lists
per CUDA label (``2.14.1+cu130`` -> ``cu130``); a build the table does not know (a source
build, a PyPI wheel without a label, cu128) is asked of a ``python -c`` subprocess, once per
launch. With a container, the image's own record, the lines singularity/build.sh writes
into ``<image>.sha256`` (``# torch_version ...``), read without the runtime, by the rule the
image's digest is read by (``container.sidecar_text``: a sidecar older than the image, or
not opening with a digest, describes another build and is not read), once per image in a
launch.

The rule (``covers``): an arch-list entry ``sm_XY`` is a binary for compute capability X.Y
and runs on X.Z for Z >= Y (the same major, e.g. sm_80 on 8.6); ``compute_XY`` is PTX,
JIT-compiled for any capability >= X.Y. A platform without ``compute_capability``
(CPU ranks, an unstated GPU, ``platform.compute_capability=null``: the manual override)
is not checked, nor is one whose scheduler says its GPUs are emulated
(``Backend.emulated_gpus``: SLURM, a partition whose nodes carry the feature ``emulated_gpu``,
as scripts/local-slurm.sh's do; asked once per launch), nor an environment without torch (a
host that only launches: nothing here says which build its jobs get) or an image without a
record. A
CPU-only build (``+cpu``, ``cuda = None``) or a ROCm build (``hip`` set: AMD GPUs) on a
CUDA platform is refused: its ranks could not use the NVIDIA GPUs at all.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import re
import sys
from dataclasses import dataclass
from typing import Any, Iterable, Optional

from campaign.catalogue.container import SHA256_SUFFIX, image_entry, sidecar_text  # the record shares the digest's file
from campaign.common.errors import ConfigError, InfeasiblePoint

V100_IMAGE = "the CUDA 12.6 image (singularity/build.sh --v100)"  # CUDA 13 has no Volta kernels
# torch.cuda.get_arch_list() of the download.pytorch.org wheels per CUDA label (torch 2.4-2.9;
# cu130 checked against this machine's 2.14.1+cu130 by tests/test_arch.py). Not here: cu128 and
# cu129, whose lists changed between releases (2.7's have sm_70, 2.8's dropped sm_50-sm_70):
# those, like any unknown label, are asked of the build itself.
_UP_TO_HOPPER = ("sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90")
WHEEL_ARCHS: dict[str, tuple[str, ...]] = {
    "cu118": _UP_TO_HOPPER,
    "cu121": _UP_TO_HOPPER,
    "cu124": _UP_TO_HOPPER,
    "cu126": _UP_TO_HOPPER,
    "cu130": ("sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"),  # CUDA 13 has no Volta or older
}
_VERSION = re.compile(r"^__version__\s*(?::[^=]*)?=\s*['\"]([^'\"]+)['\"]", re.M)
_CUDA = re.compile(r"^cuda\s*(?::[^=]*)?=\s*(?:['\"]([^'\"]*)['\"]|None)", re.M)
_HIP = re.compile(r"^hip\s*(?::[^=]*)?=\s*['\"]([^'\"]+)['\"]", re.M)
_ENTRY = re.compile(r"(sm|compute)_(\d+)\Z")
_PROBE = ("import json, torch; print(json.dumps({'torch': torch.__version__, 'cuda': torch.version.cuda, "
          "'hip': getattr(torch.version, 'hip', None), "
          "'arch_list': torch.cuda.get_arch_list() if torch.version.cuda else []}))")


@dataclass(frozen=True)
class TorchBuild:
    """The torch a job runs: its version, CUDA version (None: a CPU-only or ROCm build), arch
    list, HIP version (a ROCm build's; None otherwise)."""

    torch: Optional[str]
    cuda: Optional[str]
    arch_list: tuple[str, ...]
    source: str  # where it was learnt: "this environment" (the launch's interpreter) or "image PATH"
    hip: Optional[str] = None  # ROCm's HIP version: a build for AMD GPUs, no CUDA kernels at all


def capability(entry: str) -> Optional[tuple[int, int]]:
    """``sm_86`` -> (8, 6), ``compute_90`` -> (9, 0), ``sm_100`` -> (10, 0); None otherwise."""
    m = _ENTRY.match(entry.strip().lower())
    if not m:
        return None
    digits = m.group(2)
    return int(digits[:-1] or 0), int(digits[-1])


def covers(arch_list: Iterable[str], cc: tuple[int, int]) -> bool:
    """Whether a build with ``arch_list`` has kernels for compute capability ``cc``: an
    ``sm_XY`` binary runs on X.Z with Z >= Y; ``compute_XY`` PTX is JIT-compiled for any
    capability >= X.Y."""
    for entry in arch_list:
        got = capability(entry)
        if got is None:
            continue
        if entry.strip().lower().startswith("compute_"):
            if cc >= got:
                return True
        elif got[0] == cc[0] and cc[1] >= got[1]:
            return True
    return False


def parse_capability(value: Any) -> Optional[tuple[int, int]]:
    """``platform.compute_capability`` (7.0, "8.6", "sm_90") as (major, minor); None when unset."""
    if value is None or value == "":
        return None
    text = str(value).strip().lower()
    if text.startswith("sm_"):
        got = capability(text)
        if got:
            return got
    m = re.fullmatch(r"(\d+)\.(\d)", text)
    if not m:
        raise ConfigError(f"platform.compute_capability {value!r} is not a compute capability; "
                          "write it as MAJOR.MINOR, e.g. 8.0 (nvidia-smi --query-gpu=compute_cap)")
    return int(m.group(1)), int(m.group(2))


def read_record(image: str) -> Optional[TorchBuild]:
    """The build recorded beside ``image`` (``# torch_version``, ``# cuda_version``,
    ``# cuda_arch_list`` lines of ``<image>.sha256``); None without a record, or with one
    that does not describe this image (``container.sidecar_text``: older than the image,
    or without its digest line)."""
    text = sidecar_text(image)
    if text is None:
        return None
    fields: dict[str, str] = {}
    for line in text.splitlines():
        m = re.match(r"#\s*(torch_version|cuda_version|cuda_arch_list)\s+(.*)$", line.strip())
        if m:
            fields[m.group(1)] = m.group(2).strip()
    if "torch_version" not in fields:
        return None
    cuda = fields.get("cuda_version") or None
    return TorchBuild(fields["torch_version"], None if cuda in (None, "none", "None") else cuda,
                      tuple(fields.get("cuda_arch_list", "").replace(";", " ").split()), f"image {image}")


def _stamp(path: str) -> Optional[tuple[int, int]]:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size


@functools.lru_cache(maxsize=64)
def _image_build(image: str, stamps: tuple) -> Optional[TorchBuild]:
    """``read_record`` once per image (and per state of its files, ``stamps``): a sweep's
    points share a few images, and a rebuilt image or rewritten record is read afresh."""
    return read_record(image)


def image_build(image: str) -> Optional[TorchBuild]:
    """The build recorded for ``image`` (``read_record``), read once per image in a launch."""
    return _image_build(image, (_stamp(image), _stamp(image + SHA256_SUFFIX)))


def version_file_build(text: str, source: str) -> Optional[TorchBuild]:
    """The build torch/version.py's ``text`` states: its version and CUDA version, and the
    arch list of ``WHEEL_ARCHS`` for its CUDA label (a CPU-only or ROCm build has none, a
    ROCm build its ``hip`` version); None when
    the text says no version, or its label is not in the table (ask the build itself)."""
    version, cuda, hip = _VERSION.search(text), _CUDA.search(text), _HIP.search(text)
    if version is None or cuda is None:
        return None
    torch, cuda_version = version.group(1), cuda.group(1) or None
    if cuda_version is None:  # "cuda = None": a CPU-only or ROCm build, no CUDA kernels at all
        return TorchBuild(torch, None, (), source, hip.group(1) if hip else None)
    label = torch.partition("+")[2]
    if label not in WHEEL_ARCHS:
        return None
    return TorchBuild(torch, cuda_version, WHEEL_ARCHS[label], source)


def _probe(python: str) -> Optional[TorchBuild]:
    """The build as ``python -c`` reports it importing torch (seconds): for builds the
    table does not know; None when it cannot say."""
    from campaign.common.proc import CommandError, run

    try:
        out = run([python, "-c", _PROBE], timeout=120.0).stdout
        got = json.loads(out.strip().splitlines()[-1])
    except (CommandError, ValueError, IndexError):
        return None
    return TorchBuild(got.get("torch"), got.get("cuda"), tuple(got.get("arch_list") or ()), "this environment",
                      got.get("hip"))


@functools.lru_cache(maxsize=1)
def environment_build() -> Optional[TorchBuild]:
    """This environment's torch (module docstring): torch/version.py read as text, found
    without importing torch; the subprocess probe only for a build ``WHEEL_ARCHS`` does not
    know (cached: once per launch). None without torch, or when it cannot say (a broken
    torch: the jobs' own import names it)."""
    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        return None
    folders = list(spec.submodule_search_locations or []) if spec else []
    if not folders:
        return None
    source = "this environment"  # its interpreter: the one this launch runs (sys.executable)
    try:
        with open(os.path.join(folders[0], "version.py"), encoding="utf-8") as f:
            text = f.read(65536)
    except (OSError, UnicodeDecodeError):
        text = ""
    return version_file_build(text, source) or _probe(sys.executable)


def point_build(config: dict[str, Any]) -> Optional[TorchBuild]:
    """The torch build a point's job runs (module docstring); None when unknown."""
    container = config.get("container") or {}
    if container.get("runtime", "none") == "none":
        return environment_build()
    image = container.get("image")
    return image_build(os.path.abspath(image)) if image else None


def gpu_capability(platform: dict[str, Any], emulated: Optional[str] = None) -> Optional[tuple[int, int]]:
    """The compute capability a point of ``platform`` needs kernels for; None when it is not
    checked (CPU ranks, no ``compute_capability``: unstated or set to null, or GPUs the
    scheduler says are emulated: ``emulated``, its words, ``emulated_gpus``). The one place
    that says which points are checked."""
    if str(platform.get("device", "cuda")) != "cuda" or emulated:
        return None
    return parse_capability(platform.get("compute_capability"))


def emulated_gpus(platform: dict[str, Any]) -> Optional[str]:
    """Why ``platform``'s GPUs are emulated, in its scheduler's words (``Backend.emulated_gpus``),
    or None; asked only of a platform that would be checked (``gpu_capability``)."""
    from campaign.backends import backend_of

    if gpu_capability(platform) is None:
        return None
    backend = backend_of(platform.get("executor"))
    return backend.emulated_gpus(platform) if backend is not None else None


def _image_said(container: dict[str, Any], platform: dict[str, Any]) -> tuple[str, Optional[str]]:
    """(where a containerised point's image comes from, in words; its ``container.images``
    key, None for the default image)."""
    key = image_entry(container, platform)
    if key is None:
        return f"container.image: {platform.get('name', '?')} has no container.images entry", None
    return f"container.images.{key}", str(key)


def refusal(platform: dict[str, Any], build: TorchBuild, container: dict[str, Any],
            emulated: Optional[str] = None) -> Optional[str]:
    """The one line refusing ``platform``'s GPUs with ``build``, or None when it has kernels
    (or the platform is not checked: ``gpu_capability``, ``emulated`` as there)."""
    cc = gpu_capability(platform, emulated)
    if cc is None:
        return None
    name = platform.get("name", "?")
    here = container.get("runtime", "none") == "none"
    key = None
    source = build.source
    if not here:
        said, key = _image_said(container, platform)
        source = f"{build.source} ({said})"
    if build.hip:  # AMD's build: no CUDA kernels whatever the capability
        what = f"torch {build.torch} of {source} is a ROCm build (HIP {build.hip}), for AMD GPUs; {name}'s are NVIDIA"
        fix = ("install a CUDA build of torch, or run in an image of one (container=apptainer container.image=PATH)"
               if here else f"build a CUDA image and {_map_to(name, key)}")
        return f"platform {name}: {what}; {fix}"
    if build.cuda is None:
        what = f"torch {build.torch} of {source} is a CPU-only build"
    elif covers(build.arch_list, cc):
        return None
    else:
        what = (f"torch {build.torch} (CUDA {build.cuda}) of {source} has no kernels for compute capability "
                f"{cc[0]}.{cc[1]} (its arch list: {' '.join(build.arch_list) or 'empty'})")
    if cc < (7, 5):  # CUDA 13 dropped Volta: the CUDA 12.6 variant is the image that runs there
        fix = f"build {V100_IMAGE} and {_map_to(name, key)}"
        if here:
            fix += ", with container=apptainer"
    elif here:
        fix = "install a torch built for it, or run in an image built for it (container=apptainer container.image=PATH)"
    else:
        fix = f"build an image for it and {_map_to(name, key)}"
    if build.cuda is None:  # on a real GPU partition a mistake; on one whose GPUs are emulated, say so
        fix += f"; if {name}'s GPUs are emulated (CPU ranks), set platform.compute_capability=null"
    return f"platform {name}: {what}; {fix}"


def _map_to(name: str, key: Optional[str]) -> str:
    """``map this platform to it (+container.images.NAME=PATH.sif)``; for a platform whose
    image already comes from an entry, that entry to set instead (Hydra refuses a ``+`` on
    a key that exists)."""
    if key is None:
        return f"map this platform to it (+container.images.{name}=PATH.sif)"
    return f"point container.images.{key} at it (container.images.{key}=PATH.sif)"


def check_point_arch(config: dict[str, Any], emulated: Optional[str] = None) -> None:
    """Refuse a point (``InfeasiblePoint``: a sweep leaves it out with this one line, naming
    the fix, and keeps the rest) whose GPUs its torch build has no kernels for; a platform
    ``gpu_capability`` does not check (``emulated``: its scheduler's words that its GPUs are
    emulated, ``emulated_gpus``) passes without its build being looked up."""
    plat = config["platform"]
    if gpu_capability(plat, emulated) is None:
        return
    build = point_build(config)  # this environment's: asked once per launch; an image's: once per image (cached)
    why = refusal(plat, build, config.get("container") or {}, emulated) if build is not None else None
    if why:
        raise InfeasiblePoint(why)
