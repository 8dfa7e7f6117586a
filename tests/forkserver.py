"""The suite's campaign commands, forked from a process that imported campaign once.

A test runs ``python -m campaign ...`` and ``python -m campaign.launch ...`` as a user would,
in a process of their own (``Workspace.run``, tests/conftest.py). Most of such a process's
CPU was its start: the interpreter, then SQLAlchemy, Hydra, submitit and campaign imported
again, about a second a command, a thousand times a run, on a 2-core machine that the suite
keeps busy. Here one server a pytest worker imports them once and forks a child a command.
The child is the command as a process: its own pid, the test's environment and folder, its
standard input /dev/null, its output in files read back as ``subprocess.run`` would have
given them (text, universal newlines), ``runpy`` running the module as ``-m`` does, its
exit status what ``sys.exit`` said, atexit handlers run.

What the server imports starts no thread (it checks: a fork copies only the forking thread,
and a library whose pool threads are gone can hang its child). Polars starts its pool at
import, so harvest's commands import it in the child. A command goes to a subprocess as
before when its interpreter would differ: another executable or form than ``sys.executable
-m campaign[.launch]``, or a ``PYTHON*``/locale variable other than the server's
(``CAMPAIGN_TEST_FORK=0`` sends every command there).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Optional

MODULES = ("campaign", "campaign.launch")
# What the children would import first; nothing here may start a thread (polars does).
PRELOAD = (
    "sqlite3", "sqlalchemy", "sqlalchemy.dialects.sqlite", "omegaconf", "hydra", "hydra.core.config_store",
    "hydra._internal.utils", "submitit", "campaign.cli", "campaign.cli.launch", "campaign.store",
    "campaign.observe.status", "campaign.launch.main", "campaign.launch.run", "campaign.launch.submit",
    "campaign.launch.dryrun", "campaign.launch.plan", "campaign.launch.compose",
)
SAME = ("LANG", "LC_ALL", "LC_CTYPE")  # with every PYTHON* variable: what the interpreter's start reads


def _interpreter_env(env: dict) -> dict:
    return {k: v for k, v in env.items() if k.startswith("PYTHON") or k in SAME}


class ForkServer:
    """One per pytest worker, started at its first command; ``run`` returns None when the
    command is not one it can fork (the caller runs a subprocess)."""

    def __init__(self, env: dict) -> None:
        self._base = dict(env)  # the worker's environment before any test changed it
        self._proc: Optional[subprocess.Popen] = None
        self._folder = ""  # its socket, ready mark and log: removed when it stops
        self._sock = ""
        self._env: dict = {}
        self._lock = threading.Lock()
        self._broken = env.get("CAMPAIGN_TEST_FORK", "1") == "0"

    def _start(self) -> bool:
        folder = self._folder = tempfile.mkdtemp(prefix="campaign-fork-")
        self._sock = os.path.join(folder, "s")
        self._env = self._base
        log = open(os.path.join(folder, "server.log"), "wb")
        self._proc = subprocess.Popen([sys.executable, __file__, self._sock], stdin=subprocess.DEVNULL,
                                      stdout=log, stderr=log, env=self._env, cwd=folder)
        log.close()
        ready = os.path.join(folder, "ready")
        for _ in range(600):  # its imports: seconds on a loaded machine
            if os.path.exists(ready):
                return Path(ready).read_text() == "ok"
            if self._proc.poll() is not None:
                return False
            time.sleep(0.05)
        return False

    def run(self, argv: list[str], env: dict, cwd: Path, timeout: float):
        if self._broken or len(argv) < 3 or argv[0] != sys.executable or argv[1] != "-m" or argv[2] not in MODULES:
            return None
        with self._lock:
            if self._proc is None and not self._start():
                self._broken = True
            if self._broken or self._proc.poll() is not None:
                self._broken = True
                return None
        if _interpreter_env(env) != _interpreter_env(self._env):
            return None
        out, err = tempfile.TemporaryFile(), tempfile.TemporaryFile()
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                s.connect(self._sock)
                request = json.dumps({"module": argv[2], "args": argv[3:], "env": env, "cwd": str(cwd)}).encode()
                socket.send_fds(s, [request + b"\n"], [out.fileno(), err.fileno()])
                reader = s.makefile("rb")
                s.settimeout(timeout)
                pid = int(reader.readline())
                try:
                    line = reader.readline()
                except TimeoutError:
                    _kill(pid)
                    raise subprocess.TimeoutExpired(argv, timeout) from None
            code = int(line) if line.strip() else -9  # no status: it was killed
            return code, _text(out), _text(err)
        finally:
            out.close()
            err.close()

    def stop(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait()
        if self._folder:
            import shutil

            shutil.rmtree(self._folder, ignore_errors=True)


def _kill(pid: int) -> None:
    try:
        os.kill(pid, 9)
    except ProcessLookupError:
        pass


def _text(f) -> str:
    """As ``subprocess.run(text=True)`` decodes: the locale's encoding, universal newlines."""
    import locale

    f.seek(0)
    text = f.read().decode(locale.getpreferredencoding(False))
    return text.replace("\r\n", "\n").replace("\r", "\n")


# ---- the server (this file run as a script) ----

def _serve(path: str) -> None:
    import importlib
    import signal

    for name in PRELOAD:
        importlib.import_module(name)
    ok = len(os.listdir("/proc/self/task")) == 1 if os.path.isdir("/proc/self/task") else threading.active_count() == 1
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(16)
    Path(path).with_name("ready").write_text("ok" if ok else "threads")
    if not ok:
        return
    listener.settimeout(1.0)
    while True:
        try:
            while os.waitpid(-1, os.WNOHANG)[0]:
                pass
        except ChildProcessError:
            pass
        try:
            conn, _ = listener.accept()
        except TimeoutError:
            if os.getppid() == 1:  # its worker is gone
                return
            continue
        conn.settimeout(None)
        msg, fds, _, _ = socket.recv_fds(conn, 1 << 20, 2)
        while not msg.endswith(b"\n"):
            msg += conn.recv(1 << 20)
        pid = os.fork()
        if pid == 0:
            listener.close()
            signal.signal(signal.SIGINT, signal.default_int_handler)
            _child(conn, json.loads(msg), fds)  # never returns
        conn.close()
        for fd in fds:
            os.close(fd)


def _child(conn: socket.socket, req: dict, fds: list[int]) -> None:
    import atexit
    import runpy
    import traceback

    code = 1
    try:
        conn.sendall(f"{os.getpid()}\n".encode())
        os.chdir(req["cwd"])
        os.environ.clear()
        os.environ.update(req["env"])
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(fds[0], 1)
        os.dup2(fds[1], 2)
        for fd in (null, *fds):
            os.close(fd)
        sys.path[0] = req["cwd"]  # -m: the current folder first
        sys.argv = ["-m", *req["args"]]
        try:
            runpy.run_module(req["module"], run_name="__main__", alter_sys=True)
            code = 0
        except SystemExit as exc:
            if exc.code is None:
                code = 0
            elif isinstance(exc.code, int):
                code = exc.code
            else:
                print(exc.code, file=sys.stderr)
                code = 1
        except KeyboardInterrupt:
            traceback.print_exc()
            code = 130
        except BaseException:
            traceback.print_exc()
            code = 1
        atexit._run_exitfuncs()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except Exception:
            pass
        try:
            conn.sendall(f"{code}\n".encode())
        except Exception:
            pass
        os._exit(code & 0xFF if code >= 0 else 1)


if __name__ == "__main__":
    sys.path[0] = os.getcwd()  # not tests/: a child puts its own folder there, as -m does
    _serve(sys.argv[1])
