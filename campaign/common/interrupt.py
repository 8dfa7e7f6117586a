"""Ctrl-C that nothing can swallow.

Python turns SIGINT into ``KeyboardInterrupt`` wherever the main thread happens to be; when
that is a finalizer (a ``__del__``, a weakref callback: SQLAlchemy's pool has several), the
exception is printed as "Exception ignored" and lost, and a loop such as ``campaign status
--watch`` would go on as if no Ctrl-C had come. ``catching()`` (around every CLI command,
campaign.cli.exits.guarded) notes each SIGINT too, and ``sleep`` (the loops' wait) raises
``KeyboardInterrupt`` for a noted one that was lost, so the command still ends with its
one-line "interrupted" (exit 130). A command that knows more to say on Ctrl-C (what goes on
without it, how to stop that) raises ``Interrupted`` with that line instead. While
``catching()`` runs, such a lost ``KeyboardInterrupt`` is not printed either (its "Exception
ignored ... Traceback" would stand before the one line): ``sys.unraisablehook`` passes over it
and hands every other unraisable exception to the hook before it."""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from typing import Iterator

_seen = threading.Event()


class Interrupted(KeyboardInterrupt):
    """A Ctrl-C whose one line (``str``) says what goes on and what to do: the CLI prints it
    in place of its plain "interrupted (Ctrl-C)" (exit 130 all the same)."""


@contextlib.contextmanager
def saying(line: str) -> Iterator[None]:
    """A Ctrl-C inside the block ends the command with ``line`` (``Interrupted``)."""
    try:
        yield
    except Interrupted:
        raise
    except KeyboardInterrupt:
        raise Interrupted(line) from None


def _on_sigint(signum, frame) -> None:
    _seen.set()
    raise KeyboardInterrupt


def _quiet_hook(previous):
    """An unraisable hook that drops a ``KeyboardInterrupt`` (a Ctrl-C a finalizer lost, noted
    by ``_on_sigint``) and hands anything else to ``previous``."""
    def hook(unraisable) -> None:
        if isinstance(unraisable.exc_value, KeyboardInterrupt) or unraisable.exc_type is KeyboardInterrupt:
            return
        previous(unraisable)
    return hook


@contextlib.contextmanager
def catching() -> Iterator[None]:
    """Note every SIGINT while the block runs (main thread, Python's own handler only);
    the previous handler and a clear note afterwards."""
    if threading.current_thread() is not threading.main_thread() \
            or signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        yield
        return
    _seen.clear()
    previous_hook = sys.unraisablehook
    sys.unraisablehook = _quiet_hook(previous_hook)
    signal.signal(signal.SIGINT, _on_sigint)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        sys.unraisablehook = previous_hook
        _seen.clear()


def heard() -> bool:
    """Whether a Ctrl-C came while ``catching()`` runs (one whose exception was lost
    included): what a loop in C, such as SQLite's, asks between its steps
    (campaign.store.budget)."""
    return _seen.is_set()


def sleep(seconds: float) -> None:
    """``time.sleep`` that ends in ``KeyboardInterrupt`` once a Ctrl-C came, even one whose
    exception a finalizer swallowed."""
    if _seen.is_set():
        raise KeyboardInterrupt
    _seen.wait(max(float(seconds), 0.0))
    if _seen.is_set():
        raise KeyboardInterrupt
