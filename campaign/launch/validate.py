"""A point's config against what declares it, before anything is stored.

Two declarations judge a point: its schema (``campaign/catalogue/config.py``: every key must be
one it declares) and its trainer's declaration (``trainers/spec.py``: the trainer
exists, its params are known and well typed, its optimizer, precision, device and
engine are ones it implements). The trainer's declaration is looked up ONCE per point
(``check_trainer``) and every rule reads that lookup; the plan takes the completed
``trainer`` section and the process layout from it. Torch-free: the declarations are,
and ``importlib`` is only asked whether an engine's package could be imported.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import typing
from collections import ChainMap, abc
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional

from campaign.catalogue.config import CampaignConfig
from campaign.catalogue.dataset_label import names_dataset
from campaign.common.errors import ConfigError
from campaign_datasets import find as find_dataset
from trainers import registry
from trainers.spec import TrainerDef, did_you_mean, resolve_params

# ------------------------------------------------------------------ the schema's keys
# Hydra's structured config already refuses ``nosuchkey=1``; ``+key=value`` adds a key
# the schema does not have (``+gpu=2``, a typo for ``gpus``) and a site's YAML may add
# one too. Both are refused here with the nearest valid name.


def _schema_of(kind: Any) -> type | None:
    """The dataclass behind a field's type (through Optional), or None for a plain value."""
    if typing.get_origin(kind) is typing.Union:
        kinds = [a for a in typing.get_args(kind) if a is not type(None)]
        kind = kinds[0] if len(kinds) == 1 else None
    return kind if dataclasses.is_dataclass(kind) else None


@functools.lru_cache(maxsize=None)
def _fields(schema: type) -> tuple[tuple[str, ...], dict[str, type | None]]:
    """A schema's field names and, per field, the dataclass behind it (once per schema:
    a 1,000-point sweep checks every point)."""
    hints = typing.get_type_hints(schema)
    names = tuple(f.name for f in dataclasses.fields(schema))
    return names, {name: _schema_of(hints[name]) for name in names}


# fingerprints (campaign/common/memo.py) of (check, key, section) found valid: the points of
# a sweep share their sections, each distinct one is checked once; a refusal is never kept
_PASSED: set[bytes] = set()


def _once(check: str, path: str, section: Any, run: Callable[..., None], *args: Any) -> None:
    """``run(section, *args)`` (which raises for an invalid ``section`` at ``path``) unless this very
    section passed this check before."""
    from campaign.common.memo import LIMIT, fingerprint

    key = fingerprint((check, path, section))
    if key is not None and key in _PASSED:
        return
    run(section, *args)
    if key is not None:
        if len(_PASSED) >= LIMIT:
            _PASSED.clear()
        _PASSED.add(key)


def check_known_keys(config: Mapping[str, Any], schema: type = CampaignConfig, where: str = "") -> None:
    """Refuse a key ``schema`` does not declare, naming the nearest valid one; recurses into
    the fields that are dataclasses themselves (free-form dicts such as ``trainer.params``
    are checked by their owners)."""
    valid, subs = _fields(schema)
    for key, value in config.items():
        path = f"{where}{key}"
        if key not in subs:
            scope = f"in {where.rstrip('.')}" if where else "at the top level"
            raise ConfigError(f"unknown config key '{path}'{did_you_mean(str(key), valid)}; "
                              f"valid keys {scope}: {', '.join(valid)}")
        sub = subs[key]
        if sub is not None and isinstance(value, Mapping):
            _once(f"keys of {sub.__module__}.{sub.__qualname__}", path, value, check_known_keys, sub, f"{path}.")


# ------------------------------------------------------------------ numbers and sizes
# Python holds any integer; the store (BIGINT), torch's seed and SLURM hold 64 bits. A
# size builds that many things: refused against its cap (a config key) before any is built.
ITERATION_KEYS = ("base_iterations", "iterations", "warmup_iterations", "profile_iterations", "sample_iterations",
                  "checkpoint_every")
CAPS = {"max_points": 10000, "max_repeats": 100, "max_iterations": 10**9}  # CampaignConfig's defaults


def caps_of(config: Mapping[str, Any]) -> dict[str, int]:
    """The size caps a config sets (its defaults where an older stored config has none)."""
    from campaign.common.numbers import within_cap

    return {key: within_cap(config.get(key, default), key, 2**63 - 1, key) for key, default in CAPS.items()}


def check_numbers(config: Mapping[str, Any], where: str = "") -> None:
    """Refuse an integer anywhere in ``config`` beyond 64 bits, naming its key."""
    from campaign.common.numbers import int64

    for key, value in config.items():
        if isinstance(value, dict) or isinstance(value, abc.Mapping):  # (dict first: typing's Mapping check
            _once("numbers", f"{where}{key}", value, check_numbers,    # cost 4 us a value, 10,000 points x 110)
                  f"{where}{key}.")
        elif isinstance(value, (list, tuple)):
            for i, item in enumerate(value):
                if isinstance(item, dict) or isinstance(item, abc.Mapping):
                    check_numbers(item, f"{where}{key}[{i}].")
                elif isinstance(item, int) and not isinstance(item, bool):
                    int64(item, f"{where}{key}[{i}]")
        elif isinstance(value, int) and not isinstance(value, bool):
            int64(value, f"{where}{key}")


def check_top_numbers(config: Mapping[str, Any]) -> None:
    """``check_numbers`` of the top level's own integers (``seed``), not its sections'."""
    from campaign.common.numbers import INT64_MAX, INT64_MIN, int64

    for key, value in config.items():
        if type(value) is int and INT64_MIN <= value <= INT64_MAX:
            continue  # (most: once a point, 10,000 points)
        if isinstance(value, int) and not isinstance(value, bool):
            int64(value, key)


def check_section_numbers(config: Mapping[str, Any]) -> None:
    """``check_numbers`` of the top level's sections (dicts and lists), not its own integers."""
    for key, value in config.items():
        if isinstance(value, (dict, list, tuple, abc.Mapping)):
            check_numbers({key: value})


def check_sizes(config: Mapping[str, Any]) -> None:
    """Every integer within 64 bits; ``repeats`` and the experiment's iteration counts
    within their caps (``max_repeats``, ``max_iterations``): checked before a point or
    its repeats are built, so ``repeats=10**12`` is refused at once."""
    check_numbers(config)
    check_caps(config)


def check_caps(config: Mapping[str, Any]) -> None:
    """``repeats`` and the experiment's iteration counts within their caps (``check_sizes``
    without the 64-bit check)."""
    from campaign.common.numbers import within_cap

    caps = caps_of(config)
    repeats = config.get("repeats", 1)
    if isinstance(repeats, int) and repeats > 0:  # below 1: plan_point's own message
        within_cap(repeats, "repeats", min(caps["max_repeats"], caps["max_points"]),
                   "max_repeats" if caps["max_repeats"] <= caps["max_points"] else "max_points")
    for key in ITERATION_KEYS:
        value = (config.get("experiment") or {}).get(key)
        if isinstance(value, int) and value > caps["max_iterations"]:
            within_cap(value, f"experiment.{key}", caps["max_iterations"], "max_iterations")


def check_point_count(count: int, config: Mapping[str, Any]) -> None:
    """Refuse a campaign of more than ``max_points`` points (sweep points x repeats),
    before they are composed."""
    cap = caps_of(config)["max_points"]
    if count > cap:
        raise ConfigError(f"this campaign has more than {cap:,} points (sweep points x repeats), over the cap "
                          f"max_points={cap:,}; sweep fewer values, or raise max_points if you mean it")


# ------------------------------------------------------------------ the trainer's declaration


@dataclass(frozen=True)
class CheckedTrainer:
    """A point's ``trainer`` section checked against its declaration, and that declaration."""

    spec: TrainerDef  # the declaration, looked up once for the point
    section: dict[str, Any]  # the ``trainer`` section completed: ``module`` and every param filled in
    missing: Optional[str] = None  # a dry run's point whose engine's package is not installed here: the refusal a launch gets

    @property
    def engine(self) -> str | None:
        """The point's engine (the declaration's default when unset); None for trainers without engines."""
        return str(self.section["params"].get("engine") or self.spec.engines[0]) if self.spec.engines else None

    @property
    def single_process(self) -> bool:
        """True when each process of the point's job holds all its node's GPUs (resources:
        ``processes_per_node`` tasks a node, gpus_per_node=gpus), not one GPU a rank."""
        return self.engine in self.spec.single_process_engines

    @property
    def processes_per_node(self) -> int:
        """Tasks a node of a single-process engine starts: 1 unless the trainer's params ask
        for more (``TrainerDef.processes_per_node``: the DataParallel study's 2)."""
        if not self.single_process or self.spec.processes_per_node is None:
            return 1
        return max(1, int(self.spec.processes_per_node(self.section["params"])))


def declaration_of(config: Mapping[str, Any]) -> TrainerDef:
    """The declaration of the point's trainer; ``ConfigError`` when there is none."""
    try:
        return registry.spec_of(config["trainer"])
    except registry.UnknownTrainer as exc:
        raise ConfigError(str(exc)) from None


def _resolved_params(config: Mapping[str, Any], spec: TrainerDef) -> dict[str, Any]:
    """``trainer.params`` checked against the declaration and completed with its defaults."""
    try:
        return resolve_params(spec, config["trainer"].get("params"))
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def check_trainer(config: Mapping[str, Any]) -> CheckedTrainer:
    """The point's ``trainer`` section, validated against its declaration (looked up here,
    once) and completed, so that the job reads exactly what was checked; ``ConfigError``
    naming the valid choices otherwise."""
    spec = declaration_of(config)
    trainer = dict(config["trainer"])
    for key, allowed in (("optimizer", spec.optimizers), ("precision", spec.precisions)):
        values = [a.value for a in allowed]
        if trainer.get(key) is not None and str(trainer[key]) not in values:
            raise ConfigError(f"trainer={spec.name} does not implement trainer.{key}={trainer[key]}; "
                              f"valid: {', '.join(values)}")
    device = str(config["platform"].get("device"))
    devices = [d.value for d in spec.devices]
    if device not in devices:
        raise ConfigError(f"trainer={spec.name} does not run on platform.device={device} "
                          f"(platform={config['platform']['name']}); valid: {', '.join(devices)}")
    params = _resolved_params(config, spec)
    missing = None
    try:
        check_engine(config, spec, params)
    except EngineMissing as exc:  # a dry run still shows the point (and says what a launch would refuse)
        from campaign.launch.modes import dry_run_mode

        if dry_run_mode(config.get("dry_run")) is None:
            raise
        missing = str(exc)
    if config.get("experiment", {}).get("checkpoint") and not spec.checkpoint:
        able = ", ".join(n for n in registry.builtin_names() if registry.spec_of(n).checkpoint)
        raise ConfigError(f"trainer={spec.name} cannot resume from a checkpoint (experiment.checkpoint=true); "
                          f"trainers that can: {able}")
    if config.get("experiment", {}).get("validation") and not spec.evaluates:
        able = ", ".join(n for n in registry.builtin_names() if registry.spec_of(n).evaluates)
        raise ConfigError(f"trainer={spec.name} has no evaluation pass (experiment.validation=true); "
                          f"trainers that have one: {able}, or set experiment.validation=false")
    limit = config.get("experiment", {}).get("validation_images")
    if limit is not None and not config.get("experiment", {}).get("validation"):
        raise ConfigError(f"experiment.validation_images={limit} does nothing with experiment.validation=false "
                          f"(no evaluation pass); set experiment.validation=true or "
                          f"experiment.validation_images=null")
    if limit is not None and limit < 1:
        raise ConfigError(f"experiment.validation_images={limit} evaluates no image; set a count of at least 1, "
                          f"or null to evaluate the whole test split")
    from campaign.launch.weights import with_weights_file

    trainer["params"] = with_weights_file(config, spec, params)  # the weights file the job loads
    trainer["module"] = registry.module_of(trainer)
    return CheckedTrainer(spec=spec, section=trainer, missing=missing)


def check_engine(config: Mapping[str, Any], spec: Optional[TrainerDef] = None,
                 params: Optional[dict[str, Any]] = None) -> None:
    """Refuse an engine the trainer lacks, the platform cannot run, or this installation
    misses, and whatever else the trainer's own rule (``TrainerDef.check``) refuses.

    ``spec`` and ``params`` are the point's declaration and completed params when the
    caller has them (``check_trainer``); looked up and resolved here otherwise.
    """
    spec = spec or declaration_of(config)
    params = _resolved_params(config, spec) if params is None else params
    engine = params.get("engine") if spec.engines else None
    gpus, nodes = config.get("gpus", 1), config.get("nodes", 1)
    platform = config["platform"]
    if engine in spec.single_process_engines:
        if nodes > 1:
            raise ConfigError(f"engine={engine} drives all GPUs from one process on one node; "
                              f"nodes={nodes} needs engine={spec.engines[0]}")
        if platform.get("device") != "cuda" and gpus > 1:
            raise ConfigError(f"engine={engine} splits each batch over CUDA devices in one process; "
                              f"platform={platform['name']} runs on CPU, so use gpus=1 or engine={spec.engines[0]}")
    if spec.check is not None:
        try:
            # the point's own mapping beneath the completed trainer (a ChainMap: a planned point's
            # reads stay noted, campaign/launch/planmemo.py; a copy would read every value)
            spec.check(ChainMap({"trainer": {**config["trainer"], "params": params}}, config))
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
    # A containerised job imports from its image, not from this Python.
    runs_here = (config.get("container") or {}).get("runtime", "none") == "none"
    if engine in spec.engine_requires and runs_here:
        module, install = spec.engine_requires[engine]
        if importlib.util.find_spec(module) is None:
            raise EngineMissing(f"engine={engine} needs {_pretty(module)}, which is not installed; "
                              f"install it with: {install}")


class EngineMissing(ConfigError):
    """An engine whose package this installation lacks (a launch is refused; a dry run shows the point)."""


def _pretty(module: str) -> str:
    return {"deepspeed": "DeepSpeed"}.get(module, module)


# ------------------------------------------------------------------ the trainer's own dataset


def reference_dataset(config: Mapping[str, Any], spec: TrainerDef, overrides: typing.Sequence[str]) -> dict[str, Any]:
    """The point's ``dataset`` section: the trainer's own study's dataset (``TrainerDef.dataset``,
    which its conf file picks) keeps its shapes but becomes ``synthetic`` when the point gives
    no ``dataset.root`` and names no dataset, so ``trainer=swinv2_upernet`` alone trains on
    generated 512x512 batches of 150 classes; a dataset the point names is left as it is (a
    named real dataset without its root is refused by the dataset check), and so is a study
    preset's that read files (``study.reads_files``): its study measured the loaders."""
    section = dict(config["dataset"])
    if (config.get("study") or {}).get("reads_files"):
        return section
    if (spec.dataset and section.get("name") == spec.dataset and not section.get("root")
            and not names_dataset(overrides)):
        section["name"] = "synthetic"
        # the study's split sizes too, so that an epoch, a share per GPU and the test split
        # are as long as on the real dataset (the H200 vit_weak run trained 15 iterations an
        # epoch on synthetic's default 10,000 images where CIFAR-10's 50,000 give 78)
        study = find_dataset(spec.dataset)
        if study is not None:
            if section.get("length") is None and study.train_images:
                section["length"] = study.train_images
            if section.get("test_length") is None and study.test_images:
                section["test_length"] = study.test_images
    return section
