"""The Recorder's clock on a GPU: CUDA events from a pool, recorded without a lookup
or an allocation per mark.

What a mark costs is what the timed window pays on every iteration, so on a short
step (a few ms) every microsecond shows. A fresh ``torch.cuda.Event`` per mark costs a
Python object, the CUDA event's creation at its first record and a current-stream
lookup (a Python ``Stream`` built each time). Here events are made and recorded once
ahead (``prefill``: the CUDA event exists from then on), handed out from a free list
and given back when the Recorder has turned them into seconds; a phase mark is
recorded on the stream that was current when its iteration began (looked up once per
iteration). Nothing here waits for the device: ``record`` is asynchronous.
"""

from __future__ import annotations

from typing import Any, Iterable

import torch

EVENTS_PER_ITERATION = 8  # begin, data, forward, backward, step, end; one bucket's launch and completion


class EventClock:
    """Pooled CUDA timing events of one device."""

    def __init__(self, device: torch.device, prefill: int = 0):
        self.device = device
        self.stream: Any = None  # the stream phase marks go on (begin_iteration)
        self.created = 0
        self._free: list[Any] = []
        self.grow(prefill)

    def grow(self, n: int) -> None:
        """Make ``n`` more events and record each once, so that their CUDA events exist
        now rather than at a first record inside the timed window."""
        stream = torch.cuda.current_stream(self.device)
        for _ in range(max(0, n)):
            ev = torch.cuda.Event(enable_timing=True)
            ev.record(stream)
            self._free.append(ev)
        self.created += max(0, n)

    def _take(self) -> Any:
        if self._free:
            return self._free.pop()
        self.created += 1
        return torch.cuda.Event(enable_timing=True)

    def begin_iteration(self) -> None:
        """The stream the iteration's phase marks go on: the current one, now."""
        self.stream = torch.cuda.current_stream(self.device)

    def mark(self) -> Any:
        """An event recorded on the iteration's stream."""
        ev = self._take()
        ev.record(self.stream)
        return ev

    def stamp(self) -> Any:
        """An event recorded on the current stream (a collective's completion callback
        runs with the collective's stream current, so its stamp waits for it)."""
        ev = self._take()
        ev.record()
        return ev

    def release(self, events: Iterable[Any]) -> None:
        """Events whose times have been read (completed ones only) back to the pool."""
        self._free.extend(events)

    @property
    def free(self) -> int:
        return len(self._free)
