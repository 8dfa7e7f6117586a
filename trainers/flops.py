"""Model FLOPs per iteration and model FLOPs utilisation (MFU) against the math in use.

FLOPs are counted once per job, by ``torch.utils.flop_counter.FlopCounterMode`` over
one whole iteration (forward + backward, the optimizer step's elementwise ops count
zero), entered by the Recorder at the start of iteration 0 and left at its end: a
warm-up iteration, outside the timed window (with no warm-up nothing is counted). A
trainer that knows better sets ``flops_per_iter`` and no counting happens. The counted
FLOPs are the shape-based formula counts (2 per multiply-add) of matmuls, convolutions
and attention, on this rank's batch, split by kind (``matmul``: mm/addmm/bmm/attention,
``conv``: convolutions), because cuBLAS and cuDNN each have their own TF32 switch.

MFU = achieved model FLOP/s / the peak FLOP/s of the math the job ran, per rank:
achieved = flops_per_iter x timed iterations / wall_s; the peak is the platform's
dense datasheet figure (``platform.peak_tflops[mode]``) for the mode each kind of
FLOP ran in (``math_mode``):

- autocast to bf16 or fp16 (the trainer's ``precision`` where it computes in it):
  that mode for every FLOP;
- fp32 on a GPU: matmuls in ``tf32`` when cuBLAS may use it
  (``torch.backends.cuda.matmul.allow_tf32``, or ``torch.get_float32_matmul_precision()``
  not ``highest``), convolutions in ``tf32`` when cuDNN may
  (``torch.backends.cudnn.allow_tf32``, on by default), else ``fp32``; a platform that
  states no tf32 peak (V100: no TF32 units) runs them in fp32 whatever the switches say;
- a CPU rank: fp32.

With both kinds in different modes the peak is the harmonic combination
F / (F_matmul / P_matmul + F_conv / P_conv): the FLOP/s that would finish this
iteration's FLOPs, each kind at its own peak. The switches are read when the timed
window has closed (a trainer or its framework may set them while it builds).
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
        """Leave the counter; the FLOPs counted while it was on (by kind: ``by_kind``)."""
        global _ACTIVE
        _ACTIVE -= 1
        self._mode.__exit__(None, None, None)
        self.by_kind = flops_by_kind(self._mode.get_flop_counts().get("Global") or {})
        return int(self._mode.get_total_flops())


def flops_by_kind(counts: Mapping[Any, int]) -> dict[str, int]:
    """``{"matmul": n, "conv": n}`` from FlopCounterMode's per-operator counts."""
    out = {"matmul": 0, "conv": 0}
    for op, n in counts.items():
        out["conv" if "conv" in str(op) else "matmul"] += int(n)
    return out


HALF = ("bf16", "fp16")


def math_mode(trainer: Any, device: Any) -> dict[str, Any]:
    """What the job's matmuls and convolutions computed in (module docstring): the
    trainer's half precision, if any, and the TF32 switches as they are now."""
    import torch

    precision = str(getattr(trainer, "precision", None) or "fp32")
    out: dict[str, Any] = {"device": getattr(device, "type", str(device)),
                           "autocast": precision if precision in HALF else None}
    if out["device"] == "cuda":
        fp32_prec = torch.get_float32_matmul_precision()
        out.update(float32_matmul_precision=fp32_prec,
                   matmul_tf32=bool(torch.backends.cuda.matmul.allow_tf32) or fp32_prec != "highest",
                   cudnn_tf32=bool(torch.backends.cudnn.allow_tf32))
    return out


def _modes(math: Mapping[str, Any], peaks: Mapping[str, Any]) -> dict[str, str]:
    """The mode each kind of FLOP ran in: ``{"matmul": m, "conv": m}``."""
    if math.get("autocast") in HALF:
        return {"matmul": math["autocast"], "conv": math["autocast"]}
    if math.get("device") != "cuda":
        return {"matmul": "fp32", "conv": "fp32"}
    tf32 = "tf32" if peaks.get("tf32") else "fp32"
    return {"matmul": tf32 if math.get("matmul_tf32") else "fp32", "conv": tf32 if math.get("cudnn_tf32") else "fp32"}


def peak_for(math: Mapping[str, Any], peaks: Mapping[str, Any],
             by_kind: Optional[Mapping[str, int]]) -> tuple[str, Optional[float]]:
    """(the math's name, its peak TFLOP/s per device or None) for FLOPs ``by_kind``
    (None: not split, e.g. a trainer's own count: all taken as matmuls)."""
    modes = _modes(math, peaks)
    weights = {k: v for k, v in (by_kind or {"matmul": 1}).items() if v}
    used = {modes[k] for k in weights} or {modes["matmul"]}
    if len(used) == 1:
        (mode,) = used
        value = peaks.get(mode)
        return mode, float(value) if value else None
    name = " + ".join(f"{modes[k]} {k}" for k in ("matmul", "conv"))
    if not all(peaks.get(modes[k]) for k in weights):
        return name, None
    seconds = sum(n / float(peaks[modes[k]]) for k, n in weights.items())
    return name, sum(weights.values()) / seconds


def precision_of(cfg: Mapping[str, Any]) -> str:
    """The precision the trainer is configured for (``trainer.precision``; fp32 by default)."""
    return str((cfg.get("trainer") or {}).get("precision") or "fp32")


def mfu_extra(cfg: Mapping[str, Any], *, flops_per_iter: Optional[float], flops_source: Optional[str],
              iterations: int, wall_s: float, math: Mapping[str, Any], flops_kinds: Optional[Mapping[str, int]] = None,
              flops_note: Optional[str] = None, devices: int = 1) -> dict[str, Any]:
    """rank_timing.extra keys for FLOPs and MFU (docs/breakdown.md). ``math``: ``math_mode``'s
    record; ``flops_kinds``: the counted FLOPs by kind. ``devices``: the GPUs this rank
    drives (a single-process engine: all the job's); ``achieved_tflops`` is per device,
    so MFU compares it with the per-device peak."""
    peaks = (cfg.get("platform") or {}).get("peak_tflops") or {}
    mode, peak = peak_for(math, peaks, flops_kinds)
    devices = max(1, int(devices))
    achieved = (flops_per_iter * iterations / wall_s / 1e12 / devices
                if flops_per_iter and iterations and wall_s > 0 else None)
    out: dict[str, Any] = {
        "precision": precision_of(cfg),
        "math": mode,
        "math_flags": dict(math),
        "flops_source": flops_source if flops_per_iter else None,
        "flops_by_kind": dict(flops_kinds) if flops_kinds and flops_per_iter else None,
        "achieved_tflops": achieved,
        "peak_tflops": peak,
        "mfu": achieved / peak if achieved is not None and peak else None,
    }
    if devices > 1:
        out["devices_per_rank"] = devices
    if not flops_per_iter and flops_note:
        out["flops_note"] = flops_note
    elif achieved is not None and not peak:
        out["flops_note"] = f"the platform states no peak_tflops for {mode}"
    return out
