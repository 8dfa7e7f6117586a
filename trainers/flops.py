"""Model FLOPs per iteration and model FLOPs utilisation (MFU).

FLOPs are counted once per job, by ``torch.utils.flop_counter.FlopCounterMode`` over
one whole iteration (forward + backward, the optimizer step's elementwise ops count
zero), entered by the Recorder at the start of iteration 0 and left at its end: a
warm-up iteration, outside the timed window (with no warm-up nothing is counted). A
trainer that knows better sets ``flops_per_iter`` and no counting happens.

MFU = achieved model FLOP/s / peak FLOP/s, per rank, where achieved = flops_per_iter
x timed iterations / wall_s and the peak is the platform's stated
``peak_tflops[precision]`` (``trainer.precision``, fp32 by default). The counted
FLOPs are the shape-based formula counts (2 per multiply-add) of matmuls,
convolutions and attention, on this rank's batch.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional


_ACTIVE = 0  # IterationFlops counting now (in this process)


def counting() -> bool:
    """True while an IterationFlops counts. The counter (a dispatch mode) sees only the
    thread that entered it (and autograd's, which inherit it), so a single-process engine
    runs its replicas one after another in that thread meanwhile (trainers/parallel.py):
    the counted iteration is a warm-up one, its speed does not matter."""
    return _ACTIVE > 0


class IterationFlops:
    """A FlopCounterMode entered by ``start()`` and left by ``stop()`` (same thread)."""

    def __init__(self) -> None:
        from torch.utils.flop_counter import FlopCounterMode

        self._mode = FlopCounterMode(display=False)

    def start(self) -> None:
        global _ACTIVE
        self._mode.__enter__()
        _ACTIVE += 1

    def stop(self) -> int:
        """Leave the counter; the FLOPs counted while it was on."""
        global _ACTIVE
        _ACTIVE -= 1
        self._mode.__exit__(None, None, None)
        return int(self._mode.get_total_flops())


def precision_of(cfg: Mapping[str, Any]) -> str:
    """The precision the trainer runs in (``trainer.precision``; fp32 by default)."""
    return str((cfg.get("trainer") or {}).get("precision") or "fp32")


def peak_tflops(cfg: Mapping[str, Any], precision: str) -> Optional[float]:
    """The platform's stated peak TFLOP/s for ``precision`` per device, or None."""
    peaks = (cfg.get("platform") or {}).get("peak_tflops") or {}
    value = peaks.get(precision)
    return float(value) if value else None


def mfu_extra(cfg: Mapping[str, Any], *, flops_per_iter: Optional[float], flops_source: Optional[str],
              iterations: int, wall_s: float, flops_note: Optional[str] = None, devices: int = 1) -> dict[str, Any]:
    """rank_timing.extra keys for FLOPs and MFU (docs/breakdown.md). ``devices``: the GPUs
    this rank drives (a single-process engine: all the job's); ``achieved_tflops`` is per
    device, so MFU compares it with the per-device peak."""
    precision = precision_of(cfg)
    peak = peak_tflops(cfg, precision)
    devices = max(1, int(devices))
    achieved = (flops_per_iter * iterations / wall_s / 1e12 / devices
                if flops_per_iter and iterations and wall_s > 0 else None)
    out: dict[str, Any] = {
        "precision": precision,
        "flops_source": flops_source if flops_per_iter else None,
        "achieved_tflops": achieved,
        "peak_tflops": peak,
        "mfu": achieved / peak if achieved is not None and peak else None,
    }
    if devices > 1:
        out["devices_per_rank"] = devices
    if not flops_per_iter and flops_note:
        out["flops_note"] = flops_note
    elif achieved is not None and not peak:
        out["flops_note"] = f"the platform states no peak_tflops for precision {precision!r}"
    return out
