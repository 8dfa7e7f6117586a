"""What a campaign will cost before it runs: wall time and GPU-hours per point and in total.

A point's seconds per iteration come from the first of

1. ``measured``: the store's completed runs of the same work (platform, trainer and its
   settings, dataset shape, GPUs, nodes, images per GPU), the median over a campaign's
   points of the slowest rank's timed window / iterations, from your latest campaign
   that ran it, else another user's, and only a rate the declaration below makes
   believable (campaign.observe.measured says which it trusts and why);
2. ``declared``: the trainer's declaration (trainers/spec.py): a time law
   (``seconds_per_iteration``, the sleep trainer's), or its training FLOPs per image
   (``flops_per_image``) over the platform's peak FLOP/s for the math it runs, at the
   MFU the trainer declares as measured for that math on that GPU architecture
   (``TrainerDef.measured_mfu``: the reference workload's bf16 on Hopper), else at
   ``ASSUMED_MFU`` of that peak (a stated efficiency, not a measurement; the source says which),
   times the micro-batches one iteration runs (``experiment.grad_accum`` where the trainer's
   iteration is an optimizer step: compute scales with micro-batches; communication, one
   gradient exchange per optimizer step, is per iteration either way and not modelled);
3. ``unknown``: neither (the estimate says so; a budget cannot be checked).

Wall time of a point = ``STARTUP_S`` (start-up: interpreter, torch, process group; a
stated figure) + (warm-up + timed + profiled iterations) x seconds per iteration.
GPU-hours = wall time x the job's GPUs / 3600 (a job holds its GPUs for its whole run;
CPU ranks of ``platform=local`` count as its "GPUs"). A campaign's wall time: points of
a local platform that runs one job at a time (``platform.exclusive``) add up; the others
are taken to run at once (the longest), queue waits not included.

Pure functions of plain configs (the store's rates: campaign.observe.measured); no
torch, no polars. A config read back from the store is data others may have shaped: its
trainer's declaration comes from the installed package's registry by name, never from
a module the store names (``installed_spec``), and its JSON is parsed within bounds.
Used by the launch (printed, and ``max_gpu_hours``) and by
``campaign status`` (the ETA of points that have not started).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Mapping, Optional, Sequence

from campaign.backends import backend_of

LAW = "the trainer's declared time law"
FLOPS = "the trainer's declaration"
ASSUMED_MFU = 0.35  # FLOPs estimates: this share of the platform's peak FLOP/s (stated, typical of DDP training)
STARTUP_S = 10.0  # a job's start-up before its first iteration (interpreter, torch, process group): stated


@dataclass(frozen=True)
class PointCost:
    """One point's estimate: ``s_per_it`` None when unknown; ``source`` says where it came from."""

    gpus: int
    iterations: int  # every iteration the job runs: warm-up + timed + profiled
    s_per_it: Optional[float]
    source: str  # where the rate comes from, in words ("measured in campaign ID", "unknown: why", ...)
    serial: bool = False  # runs one after another with the campaign's other serial points (local, exclusive)
    kind: str = "unknown"  # measured, law, flops or unknown

    @property
    def known(self) -> bool:
        return self.s_per_it is not None

    @property
    def wall_s(self) -> Optional[float]:
        return None if self.s_per_it is None else STARTUP_S + self.iterations * self.s_per_it

    @property
    def gpu_hours(self) -> Optional[float]:
        wall = self.wall_s
        return None if wall is None else wall * self.gpus / 3600.0


@dataclass(frozen=True)
class CampaignCost:
    points: list[PointCost]

    @property
    def known(self) -> bool:
        return all(p.known for p in self.points)

    @property
    def gpu_hours(self) -> float:
        """GPU-hours of the points whose cost is known."""
        return sum(p.gpu_hours or 0.0 for p in self.points)

    @property
    def wall_s(self) -> float:
        """Serial points one after another, together with the longest of the others."""
        serial = sum(p.wall_s or 0.0 for p in self.points if p.serial)
        parallel = max((p.wall_s or 0.0 for p in self.points if not p.serial), default=0.0)
        return max(serial, parallel)


# ------------------------------------------------------------------ the work a point does


def loop_iterations(config: Mapping[str, Any], iterations: int) -> int:
    """Iterations the point's job runs: warm-up + timed (a sampled run: its sample) + profiled
    (as campaign.launch.plan.job_plan plans them)."""
    exp = config.get("experiment") or {}
    sample = exp.get("sample_iterations")
    timed = min(int(sample), int(iterations)) if sample else int(iterations)
    return int(exp.get("warmup_iterations") or 0) + timed + int(exp.get("profile_iterations") or 0)


def work_key(config: Mapping[str, Any], gpus: int, nodes: int, batch_per_gpu: int) -> str:
    """What makes two points' iterations cost the same: platform, trainer (name, module,
    params, optimizer, precision), dataset shape, GPUs, nodes and images per GPU."""
    t, d = config.get("trainer") or {}, config.get("dataset") or {}
    key = {
        "platform": (config.get("platform") or {}).get("name"),
        "trainer": {k: t.get(k) for k in ("name", "module", "params", "optimizer", "precision")},
        "dataset": {k: d.get(k) for k in ("name", "image_size", "channels", "num_classes")},
        "gpus": int(gpus), "nodes": int(nodes), "batch_per_gpu": int(batch_per_gpu),
        "grad_accum": grad_accum(config),  # k micro-batches per step: other work per iteration
    }
    return json.dumps(key, sort_keys=True, default=str)


def grad_accum(config: Mapping[str, Any]) -> int:
    """``experiment.grad_accum``: micro-batches per optimizer step (1 where unset)."""
    return max(1, int((config.get("experiment") or {}).get("grad_accum") or 1))


def serial(config: Mapping[str, Any]) -> bool:
    """Whether the point's jobs take turns on one machine (a local, exclusive platform:
    ``Backend.takes_turns``)."""
    plat = config.get("platform") or {}
    backend = backend_of(plat.get("executor"))
    return backend is not None and backend.takes_turns(plat)


# ------------------------------------------------------------------ declared rates


def math_of(config: Mapping[str, Any]) -> str:
    """The math mode a point's FLOPs run in, for the peak: its autocast precision on a
    GPU (bf16/fp16), else fp32 (the conservative figure: TF32 depends on switches the
    job's framework sets, trainers/flops.py)."""
    precision = str((config.get("trainer") or {}).get("precision") or "fp32")
    device = (config.get("platform") or {}).get("device")
    return precision if device == "cuda" and precision in ("bf16", "fp16") else "fp32"


def installed_spec(trainer: Any) -> Any:
    """The declaration of a stored config's ``trainer`` section from the installed package's
    registry (``trainers.specs.<name>``), by a name among its built-ins; a stored
    ``trainer.module`` other than that one is never imported (``UnknownTrainer``)."""
    from campaign.common.ids import shown
    from trainers import registry

    section = trainer if isinstance(trainer, Mapping) else {}
    name, module = section.get("name"), section.get("module")
    names = registry.builtin_names()
    if not isinstance(name, str) or name not in names:
        raise registry.UnknownTrainer(f"trainer {shown(name)} is none of the installed ones ({', '.join(names)}); "
                                      "a module named in the store is not imported")
    if module not in (None, "", f"{registry.BUILTIN}.{name}"):
        raise registry.UnknownTrainer(f"its stored module {shown(module)} is not the installed "
                                      f"{registry.BUILTIN}.{name}; a module named in the store is not imported")
    return registry.spec_of(name)


def declared_rate(config: Mapping[str, Any], gpus: int, batch_per_gpu: int, *,
                  own: bool = False) -> tuple[Optional[float], str]:
    """(seconds per iteration, source) from the trainer's declaration and the platform's
    peak; (None, why) when it declares neither or the platform states no peak. ``own``: the
    config is the user's own composition (a launch), whose ``trainer.module`` is imported;
    otherwise (read from the store) only the installed registry is asked (``installed_spec``)."""
    from trainers import registry

    trainer = config.get("trainer") or {}
    try:
        spec = registry.spec_of(trainer) if own else installed_spec(trainer)
    except Exception as exc:  # a trainer this installation cannot import: no estimate
        name = trainer.get("name") if isinstance(trainer, Mapping) else None
        return None, f"unknown: trainer {name} not importable ({exc})" if own else f"unknown: {exc}"
    try:
        if spec.seconds_per_iteration is not None:
            return float(spec.seconds_per_iteration(config, int(gpus), int(batch_per_gpu))), LAW
        flops = spec.flops_per_image(config) if spec.flops_per_image is not None else None
    except (TypeError, ValueError, KeyError, AttributeError, ArithmeticError) as exc:  # values no launch wrote
        return None, f"unknown: trainer {spec.name}'s declaration cannot read this config ({type(exc).__name__})"
    if not flops:
        return None, f"unknown: trainer {spec.name} declares no FLOPs and the store has no run of this work"
    mode = math_of(config)
    peak = ((config.get("platform") or {}).get("peak_tflops") or {}).get(mode)
    if not peak:
        return None, f"unknown: platform {(config.get('platform') or {}).get('name')} states no {mode} peak"
    mfu, share = mfu_of(spec, config, mode)
    # every rank does its batch at the same time: an iteration takes one rank's share, of
    # each micro-batch it runs (all k where an iteration is an optimizer step)
    micro = grad_accum(config) if getattr(spec, "iteration_is_step", True) else 1
    seconds = float(flops) * int(batch_per_gpu) * micro / (float(peak) * 1e12 * mfu)
    return seconds, f"{FLOPS}: its FLOPs at {share} of the platform's {mode} peak"


def mfu_of(spec: Any, config: Mapping[str, Any], mode: str) -> tuple[float, str]:
    """(share of the peak, in words) a trainer's FLOPs run at on the point's GPU in math
    ``mode``: its declared measurement for that math on a GPU of the same architecture
    (compute capability major), else ``ASSUMED_MFU``, saying what was measured where one was."""
    cc = (config.get("platform") or {}).get("compute_capability")
    measured = tuple(getattr(spec, "measured_mfu", None) or ())
    if isinstance(cc, (int, float)) and not isinstance(cc, bool):
        for m in measured:
            if m.math == mode and int(m.compute_capability) == int(cc) and 0 < m.mfu <= 1:
                return float(m.mfu), f"measured MFU {m.mfu:.1%} ({m.measured_on})"
    where = "; ".join(f"{m.math} on compute capability {int(m.compute_capability)}.x" for m in measured)
    where = f" (measured only for {where})" if where else ""
    return ASSUMED_MFU, f"assumed MFU {ASSUMED_MFU:.0%}{where}"


# ------------------------------------------------------------------ measured rates, believed or not

MAX_FASTER = 10.0  # a measured rate this many times faster than the declared one is not believed (measured.py)


@dataclass(frozen=True)
class Measured:
    """One campaign's measured rate of a work (``work_key``), as campaign.observe.measured reads it."""

    s_per_it: float  # median over the campaign's points of this work
    campaign_id: str
    user: Optional[str] = None  # the campaign's stored user
    own: bool = True  # launched by the user asking (the module docstring says how it is told)

    @property
    def where(self) -> str:
        """``campaign ID``, and whose where it is not the asking user's (the stored names
        escaped and cut: whoever wrote the store chose them)."""
        from campaign.common.text import printable

        user = printable(self.user)[:64] if self.user else None
        whose = "" if self.own else f" ({user}'s)" if user else " (nobody's: no user stored)"
        return f"campaign {printable(self.campaign_id)[:64]}{whose}"


def distrust(m: Measured, declared: Optional[float]) -> Optional[str]:
    """Why ``m`` is not used against the ``declared`` seconds per iteration of the same
    work (None: it is): faster than ``MAX_FASTER`` allows, or not the user's own where
    nothing is declared to check it against."""
    if declared is not None and declared > 0:
        if m.s_per_it * MAX_FASTER < declared:
            return (f"{m.where}'s measured {m.s_per_it:.3g} s/it left out: more than {MAX_FASTER:g}x faster than "
                    f"the declared {declared:.3g} s/it")
        return None
    if not m.own:
        return f"{m.where}'s measured rate left out: not yours, and nothing declared to check it against"
    return None


def trusted(candidates: Sequence[Measured], declared: Optional[float]) -> tuple[Optional[Measured], list[str]]:
    """The first of ``candidates`` (best first) that ``distrust`` passes, and why each one
    before it was left out."""
    notes = []
    for m in candidates:
        why = distrust(m, declared)
        if why is None:
            return m, notes
        notes.append(why)
    return None, notes


def point_cost(config: Mapping[str, Any], *, gpus: int, nodes: int, batch_per_gpu: int, iterations: int,
               measured: Optional[Mapping[str, Sequence[Any]]] = None, own: bool = False) -> PointCost:
    """One point's estimate (the module docstring's order of sources); ``own``: ``config`` is
    the user's own composition, not one read from the store (``declared_rate``). A measured
    rate is taken only where campaign.observe.measured trusts it against this config's own
    declaration; a candidate left out is named in the source."""
    total = loop_iterations(config, iterations)
    rate, source = declared_rate(config, gpus, batch_per_gpu, own=own)
    m, left_out = trusted((measured.get(work_key(config, gpus, nodes, batch_per_gpu)) if measured else None) or (), rate)
    if m is not None:
        return PointCost(gpus, total, m.s_per_it, f"measured in {m.where}", serial(config), "measured")
    kind = "unknown" if rate is None else "law" if source == LAW else "flops"
    source = "; ".join([source, *left_out])
    return PointCost(gpus, total, rate, source, serial(config), kind)


def campaign_cost(points: Sequence[Any], measured: Optional[Mapping[str, Sequence[Any]]] = None) -> CampaignCost:
    """The estimate of planned points (``campaign.launch.plan.PointPlan``)."""
    return CampaignCost([point_cost(p.config, gpus=p.gpus, nodes=p.nodes, batch_per_gpu=p.batch_per_gpu,
                                    iterations=p.iterations, measured=measured, own=True) for p in points])


def fmt_duration(seconds: Optional[float]) -> str:
    """``0:42``, ``12:05``, ``3:07:00``, ``2d 4:00:00``; ``-`` for None."""
    if seconds is None:
        return "-"
    s = int(round(seconds))
    days, s = divmod(s, 86400)
    text = f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}" if s >= 3600 or days else f"{s // 60}:{s % 60:02d}"
    return f"{days}d {text}" if days else text


def fmt_gpu_hours(hours: Optional[float]) -> str:
    """GPU-hours with the digits that matter: ``0.0042``, ``1.25``, ``812``."""
    if hours is None:
        return "-"
    if hours >= 100:
        return f"{hours:,.0f}"
    if hours >= 1:
        return f"{hours:.2f}"
    return f"{hours:.2g}" if hours > 0 else "0"


def check_budget(cost: CampaignCost, max_gpu_hours: Optional[float]) -> None:
    """Refuse (``ConfigError``, exit 2, before anything is stored) a campaign whose estimate
    is over ``max_gpu_hours``, or that cannot be estimated while a budget is set."""
    from campaign.common.errors import ConfigError

    if max_gpu_hours is None:
        return
    if not max_gpu_hours > 0:
        raise ConfigError(f"max_gpu_hours must be > 0 when set, got {max_gpu_hours}")
    unknown = [c for c in cost.points if not c.known]
    if unknown:
        raise ConfigError(f"max_gpu_hours={max_gpu_hours:g} cannot be checked: {len(unknown)} point(s) have no "
                          f"estimate ({unknown[0].source}); run a short campaign of the same work first (the store "
                          "then has its measured rate) or launch without max_gpu_hours")
    if cost.gpu_hours > max_gpu_hours:
        raise ConfigError(f"this campaign needs an estimated {fmt_gpu_hours(cost.gpu_hours)} GPU-hours "
                          f"({len(cost.points)} point(s), wall time {fmt_duration(cost.wall_s)}), over "
                          f"max_gpu_hours={max_gpu_hours:g}; nothing was stored. --dry-run shows the estimate per "
                          "point; sweep fewer points or iterations, or raise max_gpu_hours")
