"""Headless Chromium driven over the Chrome DevTools Protocol: the browser the report page's
and the manual's tests open pages in (Debian's ``chromium``; those tests skip, saying why,
where it is missing)."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import time
from pathlib import Path


def chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if path := shutil.which(name):
            return path
    return None


class DevTools:
    """The Chrome DevTools Protocol over ``--remote-debugging-pipe``: the browser reads
    commands on fd 3 and writes replies and events on fd 4, each a JSON text ending in NUL."""

    def __init__(self, binary: str, profile: Path):
        r_cmd, self._w = os.pipe()
        self._r, w_out = os.pipe()
        # the child's fds 3 and 4, put in place by bash (from fds above 9, no clash with 3 and 4; dash takes one digit)
        high = [fcntl.fcntl(fd, fcntl.F_DUPFD, 10) for fd in (r_cmd, w_out)]
        os.close(r_cmd)
        os.close(w_out)
        argv = [binary, "--headless", "--no-sandbox", "--disable-gpu", "--remote-debugging-pipe", "--no-first-run",
                f"--user-data-dir={profile}", "--window-size=1280,900"]
        moved = f'exec "$0" "$@" 3<&{high[0]} 4>&{high[1]} {high[0]}<&- {high[1]}>&-'
        self.proc = subprocess.Popen(["bash", "-c", moved, *argv], pass_fds=high, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        for fd in high:
            os.close(fd)
        self._buf, self._id, self.events = b"", 0, []

    def _read(self, deadline: float) -> dict:
        while b"\0" not in self._buf:
            if time.monotonic() > deadline:
                raise TimeoutError("chromium did not answer")
            chunk = os.read(self._r, 1 << 16)
            if not chunk:
                raise RuntimeError("chromium closed its pipe")
            self._buf += chunk
        msg, self._buf = self._buf.split(b"\0", 1)
        return json.loads(msg)

    def call(self, method: str, session: str | None = None, timeout: float = 60, **params) -> dict:
        self._id += 1
        msg = {"id": self._id, "method": method, "params": params}
        if session:
            msg["sessionId"] = session
        os.write(self._w, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            reply = self._read(deadline)
            if reply.get("id") == self._id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def wait_for(self, method: str, timeout: float = 60) -> dict:
        deadline = time.monotonic() + timeout
        for e in self.events:
            if e.get("method") == method:
                return e
        while True:
            e = self._read(deadline)
            self.events.append(e)
            if e.get("method") == method:
                return e

    def close(self):
        try:
            self.call("Browser.close", timeout=10)
        except Exception:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self._w)
        os.close(self._r)
