"""The preemption signal of a checkpointing job, caught from the rank's first moment.

submitit handles the preemption signal (``SUBMITIT_PREEMPT_SIGNAL``, USR2) in every task
from before the job's function runs: rank 0 requeues the job at once (``sys.exit``
from wherever it stands: importing torch, in the rendezvous, in a collective), the
other ranks only log it. A checkpointing rank replaces that handler with its
checkpointer's (trainers/checkpoint.py), but only once it is set up: seconds of
imports, rendezvous and store writes later. A signal meanwhile ended rank 0 in the
middle of its start-up, left its peers waiting for it, and was lost on them.

So ``CheckpointingJobEntry`` calls ``catch()`` first (torch-free, before anything
slow): from then on the signal only raises a flag, and the checkpointer takes it
over with submitit's handler (``take_over``): a job signalled while it starts stops
at its first iteration boundary, checkpointed and requeued, like one signalled later.
"""

from __future__ import annotations

import os
import signal
from typing import Any, Callable, Optional

_caught: dict[str, Any] = {"installed": False, "previous": None, "signal": None}


def preempt_signal() -> int:
    """The signal submitit treats as preemption (``SUBMITIT_PREEMPT_SIGNAL``, USR2 by default)."""
    return int(getattr(signal, "SIG" + os.environ.get("SUBMITIT_PREEMPT_SIGNAL", "USR2")))


def _early(signum: int, _frame: Any) -> None:
    _caught["signal"] = signal.Signals(signum).name


def catch() -> None:
    """From now on the preemption signal only raises a flag, for ``take_over`` (which
    keeps the handler that was there: submitit's, which requeues). Idempotent."""
    if not _caught["installed"]:
        _caught["previous"] = signal.signal(preempt_signal(), _early)
        _caught["installed"] = True


def take_over(handler: Callable[[int, Any], None]) -> tuple[Any, Optional[str]]:
    """Install ``handler`` for the preemption signal; returns the handler before it (the
    one before ``catch``, if it caught) and the signal's name if ``catch`` caught one."""
    before = signal.signal(preempt_signal(), handler)
    if _caught["installed"] and before is _early:
        before, name = _caught["previous"], _caught["signal"]
        _caught.update(installed=False, previous=None, signal=None)
        return before, name
    return before, None
