"""Every subprocess campaign runs goes through ``run``: an argv list, a timeout,
captured output, and a typed error that carries the command's own message."""

from __future__ import annotations

import os
import subprocess
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator, Mapping, Optional, Sequence

from campaign.common.errors import CampaignError, one_line
from campaign.common.text import printable


class CommandError(CampaignError):
    """A command could not be run, timed out, or exited non-zero."""

    def __init__(self, argv: Sequence[str], message: str, returncode: Optional[int] = None, stderr: str = ""):
        self.argv = list(argv)
        self.returncode = returncode
        self.detail = message
        self.stderr = stderr  # what the program wrote to stderr (by a timeout: what it had written until then)
        super().__init__(f"{argv[0]}: {message}")


def decoded(raw: bytes, argv: Sequence[str]) -> str:
    """A program's output as text: UTF-8, where it is not (a job name, a node's message in
    another encoding) the bad bytes as U+FFFD and one warning on stderr, never a
    ``UnicodeDecodeError`` that ends the command. Newlines as text mode gives them."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        text = raw.decode("utf-8", "replace")
        print(f"warning: {printable(argv[0])} wrote bytes that are not UTF-8 (the first at byte {exc.start}); "
              "read with each such byte as U+FFFD", file=sys.stderr)
    return text.replace("\r\n", "\n").replace("\r", "\n")


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
            timeout=timeout,
            env=None if env is None else dict(env),
            input=None if input is None else input.encode("utf-8"),
            stdin=None if input is not None else subprocess.DEVNULL,
        )
    except FileNotFoundError as exc:
        raise CommandError(argv, "command not found on PATH") from exc
    except subprocess.TimeoutExpired as exc:
        # a client that retries by itself (sbatch meeting a full controller) said why before it was stopped
        partial = decoded(exc.stderr, argv) if isinstance(exc.stderr, bytes) else ""
        raise CommandError(argv, f"no answer within {timeout:g} s", stderr=partial) from exc
    done = Completed(argv, proc.returncode, decoded(proc.stdout, argv), decoded(proc.stderr, argv))
    if check and proc.returncode != 0:
        msg = one_line(proc.stderr) or one_line(proc.stdout) or f"exit status {proc.returncode}"
        raise CommandError(argv, msg, proc.returncode)
    return done


@contextmanager
def variables_in_environment(variables: dict[str, str]) -> Iterator[None]:
    """``variables`` set in this process's environment, which the jobs submitted inside
    inherit (sbatch exports it to the job and its ``srun`` tasks, submitit's local
    executor hands it to its processes): the private way to a job, readable only by its
    user, unlike a command line. Each is restored (or removed) after."""
    saved = {k: os.environ.get(k) for k in variables}
    os.environ.update(variables)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
