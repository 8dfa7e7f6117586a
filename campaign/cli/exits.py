"""The CLI's one error mapper, and the one place that exits the process.

Every command runs under ``guarded``: a ``CampaignError`` becomes ``error: <message>``
on stderr (secrets redacted, control characters escaped: campaign.common.text.shown) and the
error's own ``exit_code`` (campaign/common/errors.py); Ctrl-C one line and 130; a closed
stdout (``campaign ... | head``) a quiet 0. A command that takes a store also gets one
line and exit 2 for a file or folder it cannot use and for a database error no store
function translated. Anything else is a bug: its traceback is what to report.
"""

from __future__ import annotations

import os
import sys
from typing import Callable, NoReturn, Optional

from campaign.common.errors import EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, CampaignError

INTERRUPTED = "interrupted (Ctrl-C)"  # what a command says on Ctrl-C unless it says more


def report(problem: object, exit_code: Optional[int] = None, *, redact: bool = True) -> int:
    """Print ``error: <problem>`` on one line (``redact``: secrets as ``***``); return
    ``exit_code``, else the error's own (a CampaignError's ``exit_code``; 2 for anything
    else: bad input or a refused action)."""
    from campaign.common.text import printable, shown

    print(f"error: {(shown if redact else printable)(problem)}", file=sys.stderr)
    if exit_code is not None:
        return exit_code
    return problem.exit_code if isinstance(problem, CampaignError) else EXIT_USAGE


def interrupted(message: str = INTERRUPTED) -> int:
    """Ctrl-C: one line, exit status 130; nothing half-written (stores change in transactions)."""
    try:
        # a live progress line (status --wait on a terminal) is ended first
        print(("\n" if sys.stderr.isatty() else "") + message, file=sys.stderr, flush=True)
    except (BrokenPipeError, OSError):
        pass
    return EXIT_INTERRUPTED


def quiet_broken_pipe() -> None:
    """`campaign ... | head` closes our stdout early: end quietly, as Unix tools do."""
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        pass
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


def std_streams() -> None:
    """A standard stream the caller closed (``campaign harvest >&-``) becomes /dev/null: what
    is printed goes nowhere, as into a pipe nobody reads (Python leaves ``sys.stdout`` None:
    an AttributeError at the first print), and no file this process opens later takes its
    number (a store opened as descriptor 1 would receive what is printed, and an sbatch
    child would inherit it as its output)."""
    for fd, name, mode in ((0, "stdin", "r"), (1, "stdout", "w"), (2, "stderr", "w")):
        try:
            os.fstat(fd)
            continue
        except OSError:
            pass
        null = os.open(os.devnull, os.O_RDWR)
        if null != fd:
            os.dup2(null, fd)
            os.close(null)
        if getattr(sys, name) is None:
            setattr(sys, name, open(fd, mode, closefd=False))


def os_message(exc: OSError) -> str:
    """``<file>: <reason>`` of an OSError, as one line."""
    where = f"{exc.filename}: " if exc.filename else ""
    return f"{where}{exc.strerror or exc}"


def guarded(command: Callable[[], Optional[int]], *, interrupted_message: str = INTERRUPTED,
            store_url: Optional[str] = None, redact: bool = True) -> int:
    """Run ``command`` and return its exit status (None: 0), mapping what it raises as the
    module says. ``store_url``: the store the command uses (its database and file errors
    are reported as one line naming it); ``redact``: see ``report``."""
    from campaign.common.interrupt import Interrupted, catching

    try:
        with catching():  # a Ctrl-C a finalizer swallows still ends the command (its loops' sleep)
            code = command()
    except CampaignError as exc:
        return report(exc, redact=redact)
    except KeyboardInterrupt as exc:  # a command's own line (Interrupted), else the default
        return interrupted(str(exc) if isinstance(exc, Interrupted) and str(exc) else interrupted_message)
    except BrokenPipeError:
        quiet_broken_pipe()
        return EXIT_OK
    except OSError as exc:  # a folder or file the command cannot use (read-only, missing, full)
        if store_url is None:
            raise
        return report(os_message(exc))
    except Exception as exc:
        if store_url is None or not type(exc).__module__.startswith("sqlalchemy"):
            raise  # a bug: its traceback is what to report
        # a database error no store function translated (sqlalchemy is not imported
        # at start-up for `except` to name it: --help stays fast)
        from campaign.common.errors import one_line
        from campaign.store import describe_url

        return report(f"results store {describe_url(store_url)}: {one_line(getattr(exc, 'orig', None) or exc)}")
    return EXIT_OK if code is None else code


def exit_with(status: int) -> NoReturn:
    """End the process with ``status``: the only ``sys.exit`` of campaign (``__main__`` modules)."""
    sys.exit(status)
