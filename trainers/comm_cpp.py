"""The all-reduce timed by a DDP communication hook in C++ (trainers/csrc/timed_allreduce.cpp).

A Python comm hook costs what its call costs, bucket by bucket: about 25-45 us on CPU,
more than 1 % of a 2.5 ms step (docs/breakdown.md). The same hook in C++ (DDP's mean
all-reduce, each bucket's launch and completion read on CLOCK_MONOTONIC, which is what
``time.perf_counter`` reads on Linux) runs no Python per bucket: the spans wait in a C++
log until the Recorder takes them, once an iteration (``Recorder.begin``: every bucket
of the iteration before has completed by then).

It is a compiled extension: built once per (source, torch, Python) with
``torch.utils.cpp_extension`` (a C++ compiler and ninja; ~45 s on 2 cores) into the
first writable of ``$CAMPAIGN_EXT_DIR`` (an image's prebuilt copy) and
``~/.cache/campaign/ext``, and loaded from there afterwards. ``scripts/setup.sh`` and the
image build it ahead (``python -m trainers.comm_cpp --build``). Where it cannot be built
or loaded, ``experiment.comm_hook=auto`` falls back to the Python hook (trainers.comm)
and the rank's row says why (``comm_hook_fallback``).

DDP's C++ hook interface (``c10d::CommHookInterface``, ``Reducer::register_comm_hook``,
``GradBucket``) is torch's internal C++ API, not a documented Python one: the project pins
torch (constraints.txt) and tests/test_comm_cpp.py builds and runs the hook against the
installed torch, so a torch that moves it fails there, loudly, not in a campaign.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
from pathlib import Path
from typing import Any, Optional

NAME = "campaign_timed_allreduce"
SOURCE = Path(__file__).resolve().parent / "csrc" / "timed_allreduce.cpp"
READY = "ready"  # written once the built module imported: a half-written .so is never taken
FAILED = "failed"  # a build that failed, with its reason: jobs do not pay for it again (--build retries)

_loaded: dict[str, Any] = {}
_built: dict[Path, Any] = {}  # modules this process built (imported by the build already)


class HookUnavailable(RuntimeError):
    """The C++ hook cannot be built or loaded here (the message says why, one line)."""


def key() -> str:
    """What a built module depends on: its source, torch's version and C++ ABI, Python's."""
    import torch

    h = hashlib.sha256(SOURCE.read_bytes())
    h.update(f"{torch.__version__}|{torch.compiled_with_cxx11_abi()}|{sys.implementation.cache_tag}".encode())
    return h.hexdigest()[:16]


def roots() -> list[Path]:
    """Where built modules are looked for, in order (the first writable one is built into)."""
    out = []
    if os.environ.get("CAMPAIGN_EXT_DIR"):
        out.append(Path(os.environ["CAMPAIGN_EXT_DIR"]))
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    out.append(cache / "campaign" / "ext")
    return out


def _import(so: Path):
    # the file's own name: cpp_extension names a second build in one process NAME_v1
    spec = importlib.util.spec_from_file_location(so.name.split(".")[0], so)
    if spec is None or spec.loader is None:
        raise HookUnavailable(f"cannot import {so}")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def folders(k: Optional[str] = None) -> list[Path]:
    """This key's build folder under each root, in ``roots()`` order."""
    k = k or key()
    return [root / f"{NAME}-{k}" for root in roots()]


def find() -> Optional[Path]:
    """The built module for this torch and source, if any root holds one."""
    for d in folders():
        try:
            so = d / (d / READY).read_text().split()[0]  # the module's file, as its build named it
        except (OSError, IndexError):
            continue
        if so.exists():
            return so
    return None


def failed_before() -> Optional[str]:
    """Why an earlier build of this key failed (its FAILED marker), if one did."""
    for d in folders():
        try:
            return (d / FAILED).read_text().strip() or "an earlier build failed"
        except OSError:
            continue
    return None


def build(verbose: bool = False) -> Path:
    """Build the module into the first writable root; return its path (HookUnavailable if it cannot)."""
    import torch  # noqa: F401  (libtorch loaded before the compiler checks)

    k = key()
    errors = []
    for d in folders(k):
        try:
            d.mkdir(parents=True, exist_ok=True)
            if not os.access(d, os.W_OK):
                raise PermissionError(f"{d} is not writable")
        except OSError as exc:
            errors.append(f"{d.parent}: {exc}")
            continue
        try:
            from torch.utils.cpp_extension import load

            mod = load(name=NAME, sources=[str(SOURCE)], build_directory=str(d), extra_cflags=["-O2"], verbose=verbose)
        except Exception as exc:  # no compiler, no ninja, headers that moved: one line
            text = str(exc).strip().splitlines()
            why = (f"building the C++ comm hook failed: {type(exc).__name__}"
                   + (f": {text[-1][:200]}" if text else ""))
            try:
                (d / FAILED).write_text(why + "\n")
            except OSError:
                pass
            raise HookUnavailable(why) from exc
        so = Path(mod.__file__)
        _built[so] = mod
        (d / READY).write_text(f"{so.name} {k}\n")
        (d / FAILED).unlink(missing_ok=True)
        return so
    raise HookUnavailable("no writable folder for the C++ comm hook (" + "; ".join(errors) + ")")


def load_module(*, allow_build: bool = True):
    """The extension module: loaded if built, else built (``allow_build``), else HookUnavailable."""
    k = key()
    if k in _loaded:
        return _loaded[k]
    import torch  # noqa: F401  (its libraries first: the module links against them)

    so = find()
    if so is None:
        if not allow_build:
            raise HookUnavailable("the C++ comm hook is not built (python -m trainers.comm_cpp --build)")
        earlier = failed_before()
        if earlier:  # not again in every job: `python -m trainers.comm_cpp --build` retries
            raise HookUnavailable(f"{earlier} (python -m trainers.comm_cpp --build tries again)")
        so = build()
    try:
        mod = _built.get(so) or _import(so)
    except Exception as exc:
        raise HookUnavailable(f"loading {so.name} failed: {type(exc).__name__}: {str(exc)[:200]}") from exc
    _loaded[k] = mod
    return mod


class CppAllReduceTimer:
    """trainers.comm.AllReduceTimer's figures from the C++ hook: the same spans, in the
    Recorder's per-iteration lists, taken from the C++ log once an iteration.

    ``recorder`` can be swapped (the profiler window has its own): the spans so far go to
    the Recorder they belong to before the new one takes over.
    """

    kind = "cpp"

    def __init__(self, log: Any, recorder: Any):
        self.log = log
        self._rec: Any = None
        self.recorder = recorder

    @property
    def recorder(self) -> Any:
        return self._rec

    @recorder.setter
    def recorder(self, rec: Any) -> None:
        old = self._rec
        if old is not None:
            old.take_spans()  # what the old Recorder's last iteration launched
            old.span_source = None
        self._rec = rec
        if rec is not None:
            rec.span_source = self.log.drain


def attach(model: Any, recorder: Any, *, inject_delay_s: float = 0.0, allow_build: bool = True) -> CppAllReduceTimer:
    """Register the C++ hook on the DDP ``model`` (CPU parameters, a process group that every
    rank shares); HookUnavailable (one line) if this rank cannot. The caller makes the ranks
    agree before any of them registers it (trainers.comm.attach)."""
    mod = load_module(allow_build=allow_build)
    import torch.distributed as dist

    pg = getattr(model, "process_group", None) or dist.group.WORLD
    log = mod.SpanLog()
    # RuntimeError where the model has a comm hook already (DDP allows one)
    mod.install(model.reducer, pg, log, int(round(float(inject_delay_s or 0.0) * 1e9)))
    return CppAllReduceTimer(log, recorder)


def main(argv: Optional[list[str]] = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m trainers.comm_cpp",
                                 description="Build (or find) the C++ DDP comm hook for this torch.")
    ap.add_argument("--build", action="store_true", help="build it if it is not built yet")
    ap.add_argument("--verbose", action="store_true")
    args = ap.parse_args(argv)
    so = find()
    if so is None and args.build:
        try:
            so = build(verbose=args.verbose)
        except HookUnavailable as exc:
            print(f"comm_cpp: {exc} (campaign falls back to the Python hook)", file=sys.stderr)
            return 1
    if so is None:
        print("comm_cpp: not built (python -m trainers.comm_cpp --build)", file=sys.stderr)
        return 1
    print(so)
    return 0


if __name__ == "__main__":
    sys.exit(main())
