"""From a composed sweep point to a validated plan: schedule, resources, job spec.

Pure functions of the resolved config; every refusal is a ``ConfigError`` with
the reason and the fix (``v100 has 4 GPUs per node; 8 needs nodes=2``).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Optional, Sequence

from omegaconf import DictConfig, OmegaConf, open_dict

from campaign.backends import by_executor
from campaign.backends.resources import Resources
from campaign.catalogue.container import point_image
from campaign.catalogue.epochs import iterations_per_epoch, training_images  # noqa: F401  (named here too)
from campaign.common.errors import ConfigError, InfeasiblePoint
from campaign.launch.arch import check_point_arch, emulated_gpus
from campaign.launch.honoured import named_keys
from campaign.launch.memory import check_gpu_memory
from campaign.launch.placement import check_platform, check_resources, plan_resources
from campaign.launch.planmemo import PlanMemo
from campaign.launch.unread import settle
from campaign.launch.validate import (check_caps, check_known_keys, check_section_numbers, check_sizes,
                                      check_top_numbers, check_trainer, reference_dataset)
from campaign.common.redact import redact_like, redact_obj, redact_shared

SCALINGS = ("fixed", "strong", "weak")


@dataclass
class PointPlan:
    """One validated point of a campaign: what the store registers and the backend submits."""

    idx: int  # position in the sweep
    overrides: list[str]  # the overrides that made this point
    config: dict[str, Any]  # fully resolved config (trainer.params completed from the trainer's declaration)
    resources: Resources  # what its job asks the scheduler for
    repeat: int = 0  # which run of a repeated point (repeats=K)
    batch_per_gpu: int = 0  # images per GPU per iteration
    iterations: int = 0  # timed iterations of the full run
    emulated_gpus: Optional[str] = None  # why its GPUs are emulated, in its scheduler's words (not arch-checked)
    # command-line keys it does not read, planned at their defaults: (key=value, why, the refusal
    # a point that reads none of them gets); campaign/launch/unread.py
    untouched: tuple[tuple[str, str, str], ...] = ()
    notes: tuple[str, ...] = ()  # what the dry run says of it: a group's default dropped (unread.py), an engine not installed here
    gpu_memory_gib: Optional[float] = None  # its trainer's estimate on its fullest GPU (campaign/launch/memory.py), None: unknown

    @property
    def platform(self) -> str:
        return self.config["platform"]["name"]

    @property
    def gpus(self) -> int:
        return int(self.config["gpus"])

    @property
    def nodes(self) -> int:
        return int(self.config["nodes"])

    @property
    def executor(self) -> str:
        return self.config["platform"]["executor"]

    def label(self) -> str:
        c = self.config
        rep = f" repeat={self.repeat}" if c.get("repeats", 1) > 1 else ""
        # a nodes x gpus grid holds 4 GPUs twice (1x4, 2x2): a point over several nodes says so
        nodes = f" nodes={self.nodes}" if self.nodes > 1 else ""
        return (f"platform={self.platform} gpus={self.gpus}{nodes} trainer={c['trainer']['name']} "
                f"experiment={c['experiment']['name']}{rep}")

    def redacted_config(self) -> dict[str, Any]:
        """The config with its secrets redacted (``redact_shared``), worked out once a point:
        the store's row and the job's spec both read it, and its sections are shared with
        the other points that have them, so a caller must not change it."""
        got = self.__dict__.get("_redacted")
        if got is None:
            like = self.__dict__.get("_like")  # the plan it was served from (campaign/launch/planmemo.py)
            got = self.__dict__["_redacted"] = (redact_shared(self.config) if like is None else
                                                redact_like(self.config, like.config, like.redacted_config()))
        return got

    def store_row(self, resolved: Optional[dict[str, str]] = None) -> dict[str, Any]:
        """The point as the store registers it (secrets redacted; ``Store.register`` signs
        it), its ``results_dir`` absolute as the campaign's (a resubmission checks that
        they agree); ``resolved``: results_dir -> its absolute path, shared by the points of
        one launch (a folder resolved once, not once a point)."""
        c = dict(self.redacted_config())  # its own top level: results_dir is made absolute here
        if c.get("results_dir"):
            memo = {} if resolved is None else resolved
            given = c["results_dir"]
            if given not in memo:
                memo[given] = str(Path(given).resolve())  # as register_and_submit resolves it
            c["results_dir"] = memo[given]
        return {
            "idx": self.idx,
            "platform": self.platform,
            "trainer": c["trainer"]["name"],
            "experiment": c["experiment"]["name"],
            "dataset": c["dataset"]["name"],
            "gpus": self.gpus,
            "nodes": self.nodes,
            "repeat": self.repeat,
            "batch_per_gpu": self.batch_per_gpu,
            "iterations": self.iterations,
            "overrides": redact_obj(list(self.overrides)),
            "config": c,
            "executor": self.executor,
            "state": "registered",
        }


def schedule(exp: dict[str, Any], gpus: int, uneven: bool = False) -> tuple[int, int]:
    """(images per GPU, timed iterations) of an experiment on ``gpus`` GPUs. ``uneven``: one
    process scatters the global batch over its GPUs as nn.DataParallel does (torch.chunk:
    1,024 over 3 is 342, 342, 340), so it need not divide; images per GPU is then the largest share."""
    scaling = exp["scaling"]
    if scaling not in SCALINGS:
        raise ConfigError(f"unknown experiment.scaling '{scaling}'; available: {', '.join(SCALINGS)}")
    if scaling == "strong":
        gb = exp.get("global_batch")
        if not gb or gb <= 0:
            raise ConfigError("experiment.global_batch must be a positive integer for strong scaling")
        if gb % gpus and not uneven:
            raise ConfigError(f"experiment.global_batch={gb} does not split over {gpus} GPUs; use a multiple of {gpus}")
        batch = -(-gb // gpus)
    else:
        batch = exp.get("images_per_gpu")
        if not batch or batch <= 0:
            raise ConfigError(f"experiment.images_per_gpu must be a positive integer, got {batch}")
    if exp.get("iterations") is not None:
        iters = int(exp["iterations"])
    elif scaling == "weak":
        # The reference study's weak scaling: base_iterations / N (160K/N).
        iters = int(exp["base_iterations"]) // gpus
    else:
        iters = int(exp["base_iterations"])
    if iters <= 0:
        raise ConfigError(
            f"{gpus} GPUs leave {iters} iterations (experiment.base_iterations={exp['base_iterations']}); "
            f"raise experiment.base_iterations to at least {gpus}"
        )
    if exp.get("sample_iterations") is not None and int(exp["sample_iterations"]) <= 0:
        raise ConfigError(f"experiment.sample_iterations must be a positive integer, got {exp['sample_iterations']}")
    if not 0 <= float(exp.get("sample_halfwidth") or 0.0) < 1:
        raise ConfigError(f"experiment.sample_halfwidth must be in [0, 1) (a fraction: 0.01 = 1 %), "
                          f"got {exp.get('sample_halfwidth')}")
    if exp.get("checkpoint") and exp.get("sample_iterations") is not None and int(exp["sample_iterations"]) < iters:
        # a sample is short and decides its window as it runs: nothing to resume
        raise ConfigError("experiment.checkpoint=true does not go with a sampled run (experiment.sample_iterations="
                          f"{exp['sample_iterations']}); drop one of them")
    if int(exp.get("sample_max_warmup") or 0) < 0:
        raise ConfigError(f"experiment.sample_max_warmup must be >= 0, got {exp.get('sample_max_warmup')}")
    if exp.get("warmup_iterations", 0) < 0 or exp.get("profile_iterations", 0) < 0:
        raise ConfigError("experiment.warmup_iterations and experiment.profile_iterations must be >= 0")
    return int(batch), iters


def epoch_schedule(c: dict[str, Any], batch: int) -> int:
    """Timed iterations of ``experiment.epochs=E``: warm-up + timed = E x iterations per
    epoch of the point's training share, so the run trains exactly E epochs."""
    exp = c["experiment"]
    epochs = exp["epochs"]
    if exp.get("iterations") is not None:
        raise ConfigError(f"experiment.epochs={epochs} and experiment.iterations={exp['iterations']} both set "
                          f"the run's length; drop one of them")
    if not isinstance(epochs, int) or isinstance(epochs, bool) or epochs <= 0:
        raise ConfigError(f"experiment.epochs must be a positive integer, got {epochs!r}")
    images = training_images(c)
    name = c["dataset"].get("name")
    if images is None:
        raise ConfigError(f"dataset={name} declares no training-set size, so experiment.epochs cannot be "
                          f"counted; set experiment.iterations instead")
    gpus, accum = int(c["gpus"]), int(exp.get("grad_accum") or 1)
    gb = exp.get("global_batch") if exp.get("scaling") == "strong" else None
    if gb and gb % gpus:  # an uneven split (schedule): one loader takes the global batch, not gpus x the largest share
        per_epoch = iterations_per_epoch(images, int(gb), 1, accum)
    else:
        per_epoch = iterations_per_epoch(images, batch, gpus, accum)
    if per_epoch <= 0:
        raise ConfigError(f"dataset={name}'s training share of {images} images gives no full batch of "
                          f"{batch} on each of {gpus} GPUs; lower the batch or raise the share")
    warmup = int(exp.get("warmup_iterations") or 0)
    timed = epochs * per_epoch - warmup
    if timed <= 0:
        raise ConfigError(f"experiment.epochs={epochs} is {epochs * per_epoch} iterations ({per_epoch} per epoch), "
                          f"no more than experiment.warmup_iterations={warmup}; raise epochs or lower the warm-up")
    return timed


@functools.lru_cache(maxsize=1)
def _retry_states() -> list[str]:
    from campaign_sql.schema import FINAL_STATES

    return [s for s in FINAL_STATES if s != "completed"]


def check_recovery(c: dict[str, Any]) -> None:
    """``max_retries``, ``retry_on`` and ``experiment.checkpoint_every`` hold values that mean something."""
    retries = c.get("max_retries", 0)
    if not isinstance(retries, int) or isinstance(retries, bool) or retries < 0:
        raise ConfigError(f"max_retries must be an integer >= 0, got {retries!r}")
    valid = _retry_states()
    for state in c.get("retry_on") or ():
        if state not in valid:
            raise ConfigError(f"retry_on: unknown state {state!r}; valid: {', '.join(valid)}")
    every = c["experiment"].get("checkpoint_every", 0)
    if not isinstance(every, int) or every < 0:
        raise ConfigError(f"experiment.checkpoint_every must be an integer >= 0 (iterations), got {every!r}")


def plain_config(cfg: DictConfig | dict) -> dict[str, Any]:
    """The point's resolved config as plain data (enums as their values), without Hydra's node."""
    if isinstance(cfg, DictConfig):
        if "hydra" in cfg:
            cfg = cfg.copy()
            with open_dict(cfg):
                cfg.pop("hydra", None)  # Hydra's own node: not the point's config
        try:
            c = OmegaConf.to_container(cfg, resolve=True, throw_on_missing=True, enum_to_str=True)
        except Exception as exc:  # omegaconf's errors carry the key path
            raise ConfigError(f"config: {str(exc).splitlines()[0]}") from exc
    else:
        c = dict(cfg)
    c.pop("hydra", None)
    return c


def plan_point(cfg: DictConfig | dict, idx: int, overrides: list[str], repeat: int = 0,
               typed: Optional[Sequence[str]] = None, *, memo: Optional[PlanMemo] = None,
               fingerprints: Optional[dict[str, Optional[bytes]]] = None) -> PointPlan:
    """Resolve, validate and schedule one sweep point; ``typed``: the command line's
    overrides when they are not all of ``overrides`` (a study preset's sweep adds its own).
    ``memo``: the launch's plans, which serve a point of a class already planned
    (campaign/launch/planmemo.py; ``fingerprints``: its sections', from the composer), so
    the point's sections may be shared with other points and are never changed here."""
    c = plain_config(cfg)
    if memo is None:
        check_known_keys(c)
        check_sizes(c)  # 64-bit integers, repeats and iterations within their caps: before anything is built
        return plan_checked(c, idx, overrides, repeat, typed)
    check_top_numbers(c)  # the point's own values; its sections' once a class (``first``)
    return memo.plan(c, fingerprints, idx, overrides, repeat, typed,
                     run=lambda w: plan_checked(w, idx, overrides, repeat, typed, caps=True),
                     first=_check_class)


def _check_class(c: dict[str, Any]) -> None:
    """What a class of points shares: its keys and its sections' numbers (``plan_point``'s
    first checks, once a class)."""
    check_known_keys(c)
    check_section_numbers(c)


def plan_checked(c: dict[str, Any], idx: int, overrides: list[str], repeat: int = 0,
                 typed: Optional[Sequence[str]] = None, caps: bool = False) -> PointPlan:
    """``plan_point`` of a config whose keys and numbers were checked (``caps``: all but its
    caps on repeats and iterations, checked here)."""
    if caps:
        check_caps(c)
    plat = c["platform"]
    try:
        check_resources(plat, c["gpus"], c["nodes"])
    except InfeasiblePoint as exc:  # a study preset says why its study has no such point, on the platforms it names
        study = c.get("study") or {}
        said = study.get("not_gathered") if plat.get("name") in (study.get("not_gathered_on") or ()) else None
        raise (InfeasiblePoint(f"{exc}; {said}") if said else exc) from None
    check_platform(plat)
    trainer = check_trainer(c)  # the trainer's declaration, looked up once for every rule and the resources
    c["trainer"] = trainer.section  # trainer.params completed from that declaration
    c["dataset"] = reference_dataset(c, trainer.spec, overrides)  # its study's shapes, synthetic without a root
    # a setting its trainer would not read here: the user's applies where read, a preset's is refused, a group's dropped
    untouched, dropped = settle(c, trainer.spec, overrides, None if typed is None else _typed_keys(tuple(typed)))
    if untouched and typed is None:  # a lone point (no sweep's command line to apply it elsewhere): read by none
        raise ConfigError(untouched[0][2])
    if c.get("repeats", 1) < 1:
        raise ConfigError(f"repeats must be >= 1, got {c.get('repeats')}")
    batch, iters = schedule(c["experiment"], c["gpus"], uneven=uneven_split(c, trainer.spec))
    if c["experiment"].get("epochs") is not None:
        iters = epoch_schedule(c, batch)
    check_recovery(c)
    if c["container"].get("runtime", "none") != "none":  # this platform's image (container.images), else the default
        c["container"]["image"] = point_image(c["container"], plat)
    emulated = emulated_gpus(plat)  # its scheduler says its GPUs are stand-ins: nothing to check them against
    check_point_arch(c, emulated)  # GPUs its torch build has no kernels for: refused (campaign/launch/arch.py)
    memory = check_gpu_memory(c, trainer.spec)  # over the platform's GPU memory: refused on its own
    return PointPlan(idx=idx, overrides=list(overrides), config=c, repeat=repeat, batch_per_gpu=batch,
                     iterations=iters, resources=plan_resources(c, trainer), emulated_gpus=emulated,
                     untouched=tuple(untouched), gpu_memory_gib=memory,
                     notes=tuple(dropped) + ((f"would be refused here: {trainer.missing}",) if trainer.missing else ()))


@functools.lru_cache(maxsize=8)
def _typed_keys(typed: tuple[str, ...]) -> frozenset[str]:
    """The keys the command line sets (``named_keys``), worked out once a launch: every
    point of a sweep has the same command line."""
    return frozenset(named_keys(typed))


def point_where(overrides: Sequence[str]) -> str:
    """A point named by its overrides, as a refusal names it (``dry_run`` left out)."""
    return " ".join(o for o in overrides if not o.startswith("dry_run=")) or "(defaults)"


def leave_out_unplaceable(points: Sequence[PointPlan]) -> tuple[list[PointPlan], list[str]]:
    """The points their scheduler can place (renumbered from the first one's index), and a
    ``point <overrides>: <reason>`` line per point it never could (its backend's
    placement_refusals: SLURM, more nodes than the partition has): a nodes x gpus grid runs
    the rest, as it does without the points the platform cannot hold."""
    bad: dict[int, str] = {}
    for backend, mine in by_executor(points):
        bad.update({id(mine[i]): why for i, why in backend.placement_refusals(mine).items()})
    if not bad:
        return list(points), []
    kept = [p for p in points if id(p) not in bad]
    first = points[0].idx
    lines = [f"point {point_where(p.overrides)}: {bad[id(p)]}" for p in points if id(p) in bad]
    return [replace(p, idx=first + k) for k, p in enumerate(kept)], list(dict.fromkeys(lines))  # repeats: once


def uneven_split(c: dict[str, Any], spec: Any) -> bool:
    """Whether the point's engine may split its global batch unevenly (one of the trainer's
    single-process engines, which scatter it as nn.DataParallel does). Its other engines
    give every rank an equal share: such a point is refused on its own (InfeasiblePoint), so
    that a sweep over engines and GPU counts runs the rest (the DataParallel study's 3 GPUs)."""
    engine = (c["trainer"].get("params") or {}).get("engine") if spec.engines else None
    if engine in spec.single_process_engines:
        return True
    exp, gpus = c["experiment"], c["gpus"]
    gb = exp.get("global_batch") if exp.get("scaling") == "strong" else None
    if spec.single_process_engines and isinstance(gb, int) and gb > 0 and gb % gpus:
        raise InfeasiblePoint(f"engine={engine} gives each of its {gpus} ranks an equal share and "
                              f"experiment.global_batch={gb} does not split over {gpus} GPUs; use a multiple of "
                              f"{gpus}, or engine={' or '.join(spec.single_process_engines)} (splits it unevenly)")
    return False


def job_plan(p: PointPlan) -> dict[str, Any]:
    """What the job needs to know about its schedule (``spec['plan']``)."""
    exp = p.config["experiment"]
    sample = exp.get("sample_iterations")
    return {
        "batch_per_gpu": p.batch_per_gpu,
        # A sampled (projection) run times only `sample_iterations`; p.iterations (stored
        # with the point) stays the full run's count that harvest projects to.
        "iterations": min(int(sample), p.iterations) if sample else p.iterations,
        "warmup": int(exp.get("warmup_iterations", 0)),
        "profile_iterations": int(exp.get("profile_iterations", 0)),
        "grad_accum": int(exp.get("grad_accum", 1)),
        "seed": int(p.config.get("seed", 0)) + p.repeat,
        # A sampled run whose window the data chooses (trainers/sampling.py); a fixed
        # window (sample_halfwidth 0) needs nothing more than its iterations.
        "sample": {"halfwidth": float(exp.get("sample_halfwidth") or 0.0),
                   "max_warmup": int(exp.get("sample_max_warmup") or 0),
                   "full_iterations": p.iterations} if sample and int(sample) < p.iterations else None,
    }
