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


class IterationFlops:
    """A FlopCounterMode entered by ``start()`` and left by ``stop()`` (same thread)."""

    def __init__(self) -> None:
        from torch.utils.flop_counter import FlopCounterMode

        self._mode = FlopCounterMode(display=False)

    def start(self) -> None:
        self._mode.__enter__()

    def stop(self) -> int:
        """Leave the counter; the FLOPs counted while it was on."""
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
              iterations: int, wall_s: float, flops_note: Optional[str] = None) -> dict[str, Any]:
    """rank_timing.extra keys for FLOPs and MFU (docs/breakdown.md)."""
    precision = precision_of(cfg)
    peak = peak_tflops(cfg, precision)
    achieved = flops_per_iter * iterations / wall_s / 1e12 if flops_per_iter and iterations and wall_s > 0 else None
    out: dict[str, Any] = {
        "precision": precision,
        "flops_source": flops_source if flops_per_iter else None,
        "achieved_tflops": achieved,
        "peak_tflops": peak,
        "mfu": achieved / peak if achieved is not None and peak else None,
    }
    if not flops_per_iter and flops_note:
        out["flops_note"] = flops_note
    elif achieved is not None and not peak:
        out["flops_note"] = f"the platform states no peak_tflops for precision {precision!r}"
    return out
