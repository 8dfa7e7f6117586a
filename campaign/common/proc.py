"""Every subprocess campaign runs goes through ``run``: an argv list, a timeout,
captured output, and a typed error that carries the command's own message."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from typing import Mapping, Optional, Sequence

from campaign.common.errors import CampaignError, one_line


class CommandError(CampaignError):
    """A command could not be run, timed out, or exited non-zero."""

    def __init__(self, argv: Sequence[str], message: str, returncode: Optional[int] = None):
        self.argv = list(argv)
        self.returncode = returncode
        self.detail = message
        super().__init__(f"{argv[0]}: {message}")


@dataclass(frozen=True)
class Completed:
    argv: list
    returncode: int
    stdout: str
    stderr: str


def run(
    argv: Sequence[str],
    *,
    timeout: float = 60.0,
    env: Optional[Mapping[str, str]] = None,
    check: bool = True,
    input: Optional[str] = None,
) -> Completed:
    """Run ``argv`` (never through a shell) and return its output.

    Raises ``CommandError`` when the program is missing, runs past ``timeout``
    seconds, or (with ``check``) exits non-zero; the message is the program's own
    stderr, on one line.
    """
    argv = [str(a) for a in argv]
    try:
        proc = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            timeout=timeout,
            env=None if env is None else dict(env),
            input=input,
            stdin=None if input is not None else subprocess.DEVNULL,
        )
    except FileNotFoundError as exc:
        raise CommandError(argv, "command not found on PATH") from exc
    except subprocess.TimeoutExpired as exc:
        raise CommandError(argv, f"no answer within {timeout:g} s") from exc
    done = Completed(argv, proc.returncode, proc.stdout, proc.stderr)
    if check and proc.returncode != 0:
        msg = one_line(proc.stderr) or one_line(proc.stdout) or f"exit status {proc.returncode}"
        raise CommandError(argv, msg, proc.returncode)
    return done
