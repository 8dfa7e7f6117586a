"""Peak memory of the warm-up and of the timed window, apart.

GPU: CUDA's caching allocator keeps one peak counter (``max_memory_allocated``) that
anyone may reset (``reset_peak_memory_stats``); MMEngine's logger does, every log
interval, so a peak read at the end of a run sees only its last stretch. ``PeakMemory``
therefore wraps ``torch.cuda.reset_peak_memory_stats`` (the public function, in both
``torch.cuda`` and ``torch.cuda.memory``, where ``reset_max_memory_allocated`` calls it)
while the run lasts: before any reset goes through, the peak it is about to erase is
read and kept. The window's peak is the largest of those readings and the counter at
the window's end. The counter is also read whenever the Recorder compacts (every few
hundred iterations), a second net for a reset that bypasses the Python function. At the
window's start the warm-up's peak (cuDNN autotuning, the allocator's growth, FLOP
counting) is read and the counter reset, so that the window's figure is its own.

CPU: the process's maximum resident set size (``getrusage``), which only grows: the
warm-up's figure is read at the window's start, the window's at its end (that one
covers the whole process up to then).
"""

from __future__ import annotations

import resource
import sys
from typing import Any, Callable, Optional

import torch


def _max_rss() -> float:
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return float(rss if sys.platform == "darwin" else rss * 1024)


class PeakMemory:
    """Peak memory of one rank's device: ``warmup_bytes`` and ``window_bytes``
    (see the module docstring). ``start()`` before the first iteration, ``window_start()``
    when the timed window opens, ``finish()`` when it closes."""

    def __init__(self, device: torch.device):
        self.device = device
        self.cuda = device.type == "cuda"
        self.source = "cuda_max_memory_allocated" if self.cuda else "max_rss"
        self.warmup_bytes: Optional[float] = None
        self.window_bytes: Optional[float] = None
        self.resets = 0  # resets by others that the wrapper caught
        self._kept = 0.0  # the highest peak read before a reset, this phase
        self._saved: list[tuple[Any, str, Callable]] = []

    # ------------------------------------------------------------ reading
    def _counter(self) -> float:
        return float(torch.cuda.max_memory_allocated(self.device))

    def sample(self) -> None:
        """Keep the peak counter's value (cheap: the allocator's host-side statistics)."""
        if self.cuda:
            self._kept = max(self._kept, self._counter())

    def _reset(self) -> None:
        self._kept = 0.0
        original = next((fn for mod, _, fn in self._saved if mod is torch.cuda.memory), None)
        (original or torch.cuda.reset_peak_memory_stats)(self.device)

    # ------------------------------------------------------------ the wrapper
    def _install(self) -> None:
        mods = [torch.cuda.memory, torch.cuda]
        original = torch.cuda.memory.reset_peak_memory_stats

        def reset_peak_memory_stats(device=None):
            # what the caller is about to erase, kept (then its reset goes through)
            self.resets += 1
            self.sample()
            return original(device)

        reset_peak_memory_stats.__doc__ = original.__doc__
        for mod in mods:
            self._saved.append((mod, "reset_peak_memory_stats", getattr(mod, "reset_peak_memory_stats")))
            setattr(mod, "reset_peak_memory_stats", reset_peak_memory_stats)

    def _uninstall(self) -> None:
        for mod, name, fn in reversed(self._saved):
            setattr(mod, name, fn)
        self._saved = []

    # ------------------------------------------------------------ the run
    def start(self) -> None:
        """Before the first iteration: the counter from here, resets watched."""
        if self.cuda:
            self._install()
            self._reset()

    def window_start(self) -> None:
        """The timed window opens: the warm-up's peak read, the counter reset."""
        if not self.cuda:
            self.warmup_bytes = _max_rss()
            return
        self.sample()
        self.warmup_bytes = self._kept
        self._reset()

    def finish(self) -> None:
        """The timed window closed: its peak read, the wrapper removed."""
        if not self.cuda:
            self.window_bytes = _max_rss()
            return
        self.sample()
        self.window_bytes = self._kept
        if self.warmup_bytes is None:  # no window opened (all warm-up)
            self.warmup_bytes = self.window_bytes
        self._uninstall()

    def extra(self) -> dict[str, Any]:
        """rank_timing.extra keys (docs/breakdown.md)."""
        out: dict[str, Any] = {"peak_memory_source": self.source, "warmup_peak_memory_bytes": self.warmup_bytes}
        if self.cuda:
            out["peak_memory_resets_seen"] = self.resets
        return out
