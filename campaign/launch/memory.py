"""A point's GPU memory against its platform's, before anything is submitted (issue #47).

The trainer declares its estimate (``TrainerDef.gpu_memory``: the frozen-backbone study's is
trainers/specs/_backbone_costs.py, a lower bound on its fullest GPU); a point whose estimate
is over ``platform.gpu_memory_gb`` is refused on its own (``InfeasiblePoint``: a sweep runs
the rest, the dry run lists it under ``refused:``) in one line naming the estimate, the
platform's figure, the study's figures that lose the point and what would fit. CPU ranks
(``platform=local``) and platforms that state no memory are not checked.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional

from campaign.common.errors import InfeasiblePoint


def estimate(config: Mapping[str, Any], spec: Any) -> Optional[Any]:
    """The trainer's estimate of the point (``gib``, ``gpu``, ``how``, ``fix``), or None where
    it declares none or the point's ranks are CPU processes."""
    from campaign.backends import backend_of

    backend = backend_of(config["platform"]["executor"])  # CPU ranks: as placement.cpu_ranks
    if getattr(spec, "gpu_memory", None) is None or backend is None or backend.rank_device(config["platform"]) == "cpu":
        return None
    return spec.gpu_memory(config)


def check_gpu_memory(config: Mapping[str, Any], spec: Any) -> Optional[float]:
    """The point's estimated GiB on its fullest GPU (None: unknown); ``InfeasiblePoint`` when it
    is over the platform's ``gpu_memory_gb``."""
    from campaign.launch.design import figures_of

    est = estimate(config, spec)
    plat = config["platform"]
    cap = float(plat.get("gpu_memory_gb") or 0)
    if est is None:
        return None
    if cap > 0 and est.gib > cap:
        figs = figures_of(config)
        lose = f"; {figs} loses this point" if figs else ""
        raise InfeasiblePoint(f"estimated {est.gib:.1f} GiB on GPU {est.gpu} ({est.how}) is over platform "
                              f"{plat['name']}'s {cap:g} GiB (platform.gpu_memory_gb){lose}; use {est.fix}")
    return float(est.gib)
