"""What a trainer declares, in one place that imports no torch.

Each trainer has one torch-free module holding ``TRAINER = TrainerDef(...)``: its name,
the study it serves, the dataclass of its ``trainer.params`` (one field per knob,
enums for choices, a default and a comment each), its engines, and the ``module:function``
that builds it inside a job. The launch reads it to validate a point before anything is
stored (``campaign/launch/validate.py``); the job reads the same declaration to
build the trainer (``trainers/registry.py``). Built-in trainers declare themselves in
``trainers/specs/<name>.py``; a site's trainer in any importable module that its conf
file names (``module:`` in ``conf/trainer/<name>.yaml``).

What a trainer does NOT read is declared too, so that a setting it would silently drop
is refused at launch (issue #40): ``TrainerDef.unused`` lists ``Unused`` rules, each a key
(one of ``COMMON_KEYS``, the settings every point has whatever its trainer, or a
``trainer.params.<field>`` of its own) that does nothing, always (``when={}``) or while
the point's config matches ``when`` (``{"trainer.params.engine": ("ddp",)}``: every key
listed at one of its values). ``COMMON_UNUSED`` holds the rules of the common keys that
hold for every trainer reading them (momentum under AdamW). A key is refused only when it
is SET: its value differs from its default (the schema's for a common key, the
declaration's for a param), from the command line or a preset alike; at its default it
asks for what a trainer ignoring it does anyway (fp32, no accumulation, no workers, no
ZeRO), so an AdamW launch is not refused for momentum's default 0.9
(``campaign/launch/honoured.py`` applies the rules; tests/test_overrides_honoured.py walks
every trainer x every key).

Stdlib only: ``campaign`` (host side, no torch) imports this module.
"""

from __future__ import annotations

import dataclasses
import difflib
import enum
import functools
import typing
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Optional


class Optimizer(str, enum.Enum):
    """``trainer.optimizer``."""

    sgd = "sgd"
    adamw = "adamw"


class Precision(str, enum.Enum):
    """``trainer.precision``: autocast dtype on GPU (CPU ranks stay fp32)."""

    fp32 = "fp32"
    fp16 = "fp16"
    bf16 = "bf16"


class Device(str, enum.Enum):
    """``platform.device``: what a rank computes on."""

    cpu = "cpu"
    cuda = "cuda"


@dataclass(frozen=True)
class MeasuredMFU:
    """A trainer's model FLOPs utilisation measured on a GPU: the share of the GPU's peak for
    ``math`` that its declared FLOPs ran at. The estimate uses it on any GPU of the same
    architecture (compute capability major) in the same math, instead of the assumed share."""

    math: str  # math mode of the peak it is a share of: bf16, fp16 or fp32 (campaign/observe/estimate.py: math_of)
    compute_capability: float  # of the GPU it was measured on; any GPU with the same major uses it
    mfu: float  # achieved FLOP/s / peak FLOP/s, in (0, 1]
    measured_on: str  # in words, shown beside the estimate: "H200 bf16"


# The settings outside trainer.params that every point has, whatever its trainer; a trainer
# that ignores one says so in TrainerDef.unused (a site's trainer that says nothing reads all).
COMMON_KEYS = ("trainer.optimizer", "trainer.lr", "trainer.momentum", "trainer.weight_decay", "trainer.precision",
               "experiment.grad_accum", "dataset.num_workers")


@dataclass(frozen=True)
class Unused:
    """A key a trainer does not read while the point's config matches ``when``: set there,
    it is refused in one line, ``<key>=<value> does nothing with <when> (<why>); <fix>``."""

    key: str  # dotted: one of COMMON_KEYS or trainer.params.<field>
    # dotted key -> the values under which ``key`` does nothing (every entry must match; {}: always);
    # the point's config as the launch completed it (params from the declaration, dataset.name
    # synthetic where the launch generates the study's shapes)
    when: Mapping[str, tuple[Any, ...]]
    why: str  # what the trainer does instead, in words
    fix: str  # what to do: "drop it or use trainer.optimizer=sgd"


# Rules of the common keys that hold for every trainer reading them (TrainerDef.unused adds its own).
COMMON_UNUSED = (
    Unused("trainer.momentum", {"trainer.optimizer": ("adamw",)},
           why="AdamW has no momentum; its betas are trainer.params.betas where the trainer has them",
           fix="drop it or use trainer.optimizer=sgd"),
)


@dataclass(frozen=True)
class TrainerDef:
    """A trainer's declaration; see the module docstring."""

    name: str  # the option name: conf/trainer/<name>.yaml and trainer.name
    study: str  # one line: what this trainer measures
    params: type  # dataclass of trainer.params: every knob, its type, default and meaning
    build: str  # "module:function" called as function(ctx, cfg, plan) in each rank (imports torch)
    # engines that drive all of a node's GPUs from ONE process (one task a node, not one a GPU)
    single_process_engines: tuple[str, ...] = ()
    # How many such processes each node starts, every one driving all the node's GPUs (the
    # DataParallel study's torch.distributed.run at 2 a node): fn(params) -> int; None: one
    processes_per_node: Optional[Callable[[Mapping[str, Any]], int]] = None
    # engine -> (module it needs, how to install it): refused at launch when not importable
    engine_requires: Mapping[str, tuple[str, str]] = field(default_factory=dict)
    optimizers: tuple[Optimizer, ...] = tuple(Optimizer)  # trainer.optimizer values it implements
    precisions: tuple[Precision, ...] = tuple(Precision)  # trainer.precision values it implements
    devices: tuple[Device, ...] = tuple(Device)  # platform.device values it runs on
    # trainer-specific rule over the whole resolved point config; raises ValueError (one line)
    check: Optional[Callable[[Mapping[str, Any]], None]] = None
    # keys it does not read (always, or under a condition): refused when set (the module docstring)
    unused: tuple[Unused, ...] = ()
    # experiment.checkpoint=true: it resumes at an iteration (model, optimizer and its data
    # position: the built trainer has resume_at(iteration)); trainers/checkpoint.py
    checkpoint: bool = False
    # experiment.validation=true: it evaluates the test split after every epoch, outside the
    # timed window (trainers/evaluate.py); refused at launch for a trainer without it
    evaluates: bool = False
    # What a run will cost, before it runs (campaign/observe/estimate.py); torch-free, from the
    # point's resolved config. Training FLOPs (forward + backward) of one image; None
    # (or a function returning None): unknown.
    flops_per_image: Optional[Callable[[Mapping[str, Any]], Optional[float]]] = None
    # experiment.grad_accum=k: one iteration runs all k micro-batches (one optimizer step; the
    # estimate's compute per iteration scales by k) or, False, one micro-batch (mmseg's loop)
    iteration_is_step: bool = True
    # The dataset of its own study (conf/dataset/<name>.yaml), which its conf file picks
    # (``override /dataset@_global_.dataset: <name>``) unless the launch names one; with no
    # dataset.root the launch keeps its shapes and generates synthetic batches of them
    # (campaign/launch/validate.py: reference_dataset). None: the global default.
    dataset: Optional[str] = None
    # A trainer whose time is a known law: seconds per iteration of a job of ``gpus``
    # ranks at ``batch`` images per rank, fn(config, gpus, batch).
    seconds_per_iteration: Optional[Callable[[Mapping[str, Any], int, int], float]] = None
    # MFU its flops_per_image ran at, measured on a GPU (cite the run where it is declared);
    # the estimate uses the entry of the point's math and GPU architecture, else an assumed share
    measured_mfu: tuple[MeasuredMFU, ...] = ()
    # Pretrained weights its params may name by torchvision's name (``trainer.params.weights``):
    # fn(params) -> the NamedWeights (trainers/specs/_torchvision_weights.py) or None (null, a
    # PATH). The launch fetches each named file once into <results_dir>/weights/
    # (campaign/launch/weights.py) and writes what the job loads into ``params.weights_file``.
    named_weights: Optional[Callable[[Mapping[str, Any]], Optional[Any]]] = None
    # The params key that names its weights (a name or a PATH): ``weights``; swinv2_upernet's ``pretrained``
    weights_param: str = "weights"
    # Its trainable parameters from a point's config, without building the model: fn(config)
    # -> int or None (unknown). The dry run shows them where its points differ (the
    # DataParallel study names its runs by them).
    trainable_parameters: Optional[Callable[[Mapping[str, Any]], Optional[int]]] = None
    # Its memory on the point's fullest GPU, torch-free, from the resolved config: fn(config) ->
    # an object with ``gib``, ``how`` (the sum in words) and ``fix``, or None (unknown). The
    # launch refuses a point over ``platform.gpu_memory_gb`` (campaign/launch/memory.py).
    gpu_memory: Optional[Callable[[Mapping[str, Any]], Optional[Any]]] = None

    @property
    def engines(self) -> tuple[str, ...]:
        """The ``params.engine`` choices, the default first; () for a trainer with one engine."""
        return _engines(self.params)

    def defaults(self) -> dict[str, Any]:
        """``trainer.params`` with every field at its default (enums as their values): a new
        dict, its list values new lists."""
        return {k: list(v) if isinstance(v, list) else v for k, v in _defaults(self.params).items()}


@functools.lru_cache(maxsize=None)
def _engines(params: type) -> tuple[str, ...]:
    """``TrainerDef.engines`` of a params dataclass, worked out once (a launch asks it of every point)."""
    for f in dataclasses.fields(params):
        if f.name == "engine":
            kind = _hints(params)["engine"]
            values = [m.value for m in kind] if _is_enum(kind) else []
            default = _default(f)
            default = default.value if isinstance(default, enum.Enum) else default
            return tuple([default] + [v for v in values if v != default])
    return ()


@functools.lru_cache(maxsize=None)
def _defaults(params: type) -> dict[str, Any]:
    """The defaults of a params dataclass, worked out once; ``TrainerDef.defaults`` copies them."""
    return {f.name: _plain(_default(f)) for f in dataclasses.fields(params)}


def nearest(word: str, choices: typing.Iterable[str]) -> Optional[str]:
    """The choice closest to a misspelt ``word``, or None when none is close."""
    # 0.8: a typo (gpu -> gpus, partiton -> partition), not a different name (h100 -> v100)
    found = difflib.get_close_matches(str(word), sorted(choices), n=1, cutoff=0.8)
    return found[0] if found else None


def did_you_mean(word: str, choices: typing.Iterable[str]) -> str:
    """``" (did you mean 'x'?)"`` for a misspelt ``word``, else ``""``."""
    best = nearest(word, choices)
    return f" (did you mean '{best}'?)" if best else ""


def resolve_params(spec: TrainerDef, given: Optional[Mapping[str, Any]]) -> dict[str, Any]:
    """``trainer.params`` checked against ``spec.params`` and completed with its defaults.

    Raises ``ValueError`` with one line naming the key and the valid keys or values: an
    unknown key (with the nearest valid name), a value of the wrong type, a choice that
    is not one of its enum's values.
    """
    hints = _hints(spec.params)
    known = [f.name for f in dataclasses.fields(spec.params)]
    out = spec.defaults()
    for key, value in dict(given or {}).items():
        if key not in hints:
            raise ValueError(f"unknown trainer.params.{key} for trainer={spec.name}{did_you_mean(key, known)}; "
                             f"valid: {', '.join(known)}")
        out[key] = _convert(f"trainer.params.{key}", value, hints[key], spec.name)
    return out


# ------------------------------------------------------------------ type checks


@functools.lru_cache(maxsize=None)
def _hints(cls: type) -> dict[str, Any]:
    """A params dataclass's resolved field types (once per class: every point reads them)."""
    return typing.get_type_hints(cls)


def _default(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
        return f.default_factory()  # type: ignore[misc]
    return None


def _plain(value: Any) -> Any:
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, tuple):
        return list(value)
    return value


def _is_enum(kind: Any) -> bool:
    return isinstance(kind, type) and issubclass(kind, enum.Enum)


def _convert(what: str, value: Any, kind: Any, trainer: str) -> Any:
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin is typing.Union:  # Optional[X]
        if value is None and type(None) in args:
            return None
        (inner,) = [a for a in args if a is not type(None)]
        return _convert(what, value, inner, trainer)
    if _is_enum(kind):
        values = [m.value for m in kind]
        if isinstance(value, enum.Enum):
            value = value.value
        if value not in values:
            raise ValueError(f"unknown {what} {value!r} for trainer={trainer}{did_you_mean(str(value), values)}; "
                             f"valid: {', '.join(map(str, values))}")
        return value
    if origin in (list, tuple) or kind in (list, tuple):
        if not isinstance(value, (list, tuple)):
            raise ValueError(f"{what} must be a list, got {value!r}")
        item = args[0] if args else Any
        return [_convert(f"{what}[{i}]", v, item, trainer) for i, v in enumerate(value)]
    if kind is bool:
        if not isinstance(value, bool):
            raise ValueError(f"{what} must be true or false, got {value!r}")
        return value
    if kind is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"{what} must be an integer, got {value!r}")
        return value
    if kind is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"{what} must be a number, got {value!r}")
        return float(value)
    if kind is str:
        if not isinstance(value, str):
            raise ValueError(f"{what} must be a string, got {value!r}")
        return value
    return value  # Any
