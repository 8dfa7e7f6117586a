"""Where the ranks of a job meet, found and checked before torch.distributed waits on it.

torch.distributed's env:// rendezvous waits for the master for the whole process-group
timeout (``platform.dist_timeout_min``, 10 minutes): a master name no rank can resolve
hangs every rank that long, printing only c10d warnings, while SLURM and
``campaign status`` say running. Here the master is found from what SLURM knows and
checked first, so that such a job fails in seconds with one line naming host and port:

1. host: ``CAMPAIGN_MASTER_ADDR`` if set (a site's override, and the tests' way to name
   an unresolvable master), else the first node of ``SLURM_JOB_NODELIST``
   (``scontrol show hostnames``), else ``MASTER_ADDR`` (torchrun), else loopback;
2. address: the host's name resolved (``getaddrinfo``); a node name that does not resolve
   is looked up in SLURM (``scontrol show node``: its ``NodeAddr``, the address SLURM
   itself reaches the node at; the local test cluster's nodes n1, n2 are 127.0.0.1 there);
   neither: fail at once;
3. rank 0 (which serves the rendezvous) checks the address is one of its node's;
   the other ranks connect to host:port until rank 0 answers: refused means rank 0 is not
   listening yet (wait up to the rendezvous timeout), unreachable fails sooner.

torch-free: the job side imports it before torch.distributed is set up, tests without torch.
"""

from __future__ import annotations

import errno
import os
import socket
import subprocess
import time
from dataclasses import dataclass
from typing import Callable, Optional

OVERRIDE_ENV = "CAMPAIGN_MASTER_ADDR"
SCONTROL_TIMEOUT_S = 10.0  # scontrol retries a missing config for a minute: never wait that long
RENDEZVOUS_TIMEOUT_S = 300.0  # rank 0 not listening (or a rank not joining) for this long: fail
UNREACHABLE_S = 30.0  # the master's host does not answer at all (no route, filtered) for this long: fail
CONNECT_TIMEOUT_S = 3.0  # one connection attempt
RETRY_S = 0.5


class RendezvousError(RuntimeError):
    """The master of a job's rendezvous cannot be resolved, is not this node's, or does not
    answer; the message is one line naming host and port."""


@dataclass(frozen=True)
class Master:
    host: str  # the name the master was given by (a SLURM node name, an override)
    addr: str  # its resolved address (what MASTER_ADDR is set to)
    port: int
    source: str  # where host came from: CAMPAIGN_MASTER_ADDR, SLURM_JOB_NODELIST, MASTER_ADDR, local

    def __str__(self) -> str:
        return f"{self.host}:{self.port}" + (f" ({self.addr})" if self.addr != self.host else "")


def _scontrol(*args: str) -> Optional[str]:
    """``scontrol ARGS``'s output, or None when scontrol is missing or fails."""
    try:
        done = subprocess.run(["scontrol", *args], capture_output=True, text=True, timeout=SCONTROL_TIMEOUT_S)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


def slurm_hostnames(nodelist: str) -> list[str]:
    """The host names of a SLURM node list (``n[1-2]`` -> n1, n2): ``scontrol show
    hostnames``, SLURM's own expansion; submitit's parser where scontrol is missing."""
    out = _scontrol("show", "hostnames", nodelist)
    names = out.split() if out else []
    if names:
        return names
    from submitit.slurm.slurm import _parse_node_list  # pinned with submitit (tests/test_private_api.py)

    return list(_parse_node_list(nodelist))


def slurm_node_addr(node: str) -> Optional[str]:
    """SLURM's ``NodeAddr`` of ``node`` (``scontrol show node -o``), None if SLURM does not know it."""
    out = _scontrol("show", "node", "-o", node)
    for word in (out or "").split():
        if word.startswith("NodeAddr="):
            return word.partition("=")[2] or None
    return None


def master_host(environ: Optional[dict] = None, num_nodes: int = 1) -> tuple[str, str]:
    """(host, source) of the master, in the order of the module's docstring; a job on one
    node meets on loopback."""
    env = os.environ if environ is None else environ
    if env.get(OVERRIDE_ENV):
        return env[OVERRIDE_ENV], OVERRIDE_ENV
    if num_nodes > 1 and env.get("SLURM_JOB_NODELIST") and env.get("SUBMITIT_EXECUTOR") == "slurm":
        return slurm_hostnames(env["SLURM_JOB_NODELIST"])[0], "SLURM_JOB_NODELIST"
    if env.get("MASTER_ADDR") and not env.get("SUBMITIT_EXECUTOR"):
        return env["MASTER_ADDR"], "MASTER_ADDR"
    return "127.0.0.1", "local"


def _getaddr(host: str, port: int) -> str:
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    # IPv4 first: c10d and gloo are happiest with it, and a test node's names map to 127.0.0.1
    infos.sort(key=lambda info: info[0] != socket.AF_INET)
    return infos[0][4][0]


def resolve(host: str, port: int, source: str = "", *,
            node_addr: Callable[[str], Optional[str]] = slurm_node_addr) -> Master:
    """``host`` resolved to an address, or SLURM's NodeAddr of it resolved; else
    RendezvousError naming host, port and both failures."""
    try:
        return Master(host, _getaddr(host, port), port, source)
    except (socket.gaierror, UnicodeError) as exc:
        first = getattr(exc, "strerror", None) or str(exc)
    addr = node_addr(host) if source == "SLURM_JOB_NODELIST" else None
    if addr and addr != host:
        try:
            return Master(host, _getaddr(addr, port), port, source)
        except (socket.gaierror, UnicodeError) as exc:
            raise RendezvousError(
                f"cannot resolve the master {host}:{port} (from {source}): {first}; "
                f"nor its SLURM NodeAddr {addr!r}: {getattr(exc, 'strerror', None) or exc}") from None
    where = f" (from {source})" if source else ""
    hint = "; SLURM knows no other address of it" if source == "SLURM_JOB_NODELIST" else ""
    raise RendezvousError(f"cannot resolve the master {host}:{port}{where}: {first}{hint}") from None


def check_local(master: Master) -> None:
    """Rank 0 serves the rendezvous: the master's address must be one of this node's."""
    family = socket.AF_INET6 if ":" in master.addr else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as s:
            s.bind((master.addr, 0))
    except OSError as exc:
        if exc.errno == errno.EADDRNOTAVAIL:
            raise RendezvousError(
                f"the master {master} is not an address of this node ({socket.gethostname()}), "
                f"where rank 0 serves the rendezvous (from {master.source})") from None
        raise RendezvousError(f"rank 0 cannot use the master address {master}: {exc.strerror or exc}") from None


def wait_reachable(master: Master, *, timeout_s: float = RENDEZVOUS_TIMEOUT_S,
                   unreachable_s: float = UNREACHABLE_S) -> float:
    """Connect to the master until rank 0 answers; the seconds it took. Refused (rank 0
    not listening yet) is retried up to ``timeout_s``; no answer at all (unreachable,
    filtered) up to ``unreachable_s``. Then RendezvousError naming host and port."""
    start = time.monotonic()
    last = ""
    while True:
        try:
            with socket.create_connection((master.addr, master.port), timeout=CONNECT_TIMEOUT_S):
                return time.monotonic() - start
        except OSError as exc:
            refused = isinstance(exc, ConnectionRefusedError)
            last = "connection refused" if refused else (exc.strerror or str(exc) or type(exc).__name__)
        waited = time.monotonic() - start
        limit = timeout_s if refused else unreachable_s
        if waited >= limit:
            what = ("rank 0 never listened there (see rank 0's log)" if refused
                    else "the host does not answer")
            raise RendezvousError(
                f"cannot reach the master {master} (from {master.source}) after {waited:.0f} s: {last}; {what}")
        time.sleep(RETRY_S)


def find_master(rank: int, port: int, *, num_nodes: int = 1, environ: Optional[dict] = None,
                timeout_s: float = RENDEZVOUS_TIMEOUT_S) -> Master:
    """The job's master, resolved and checked for this rank (see the module docstring)."""
    host, source = master_host(environ, num_nodes)
    master = resolve(host, port, source)
    if rank == 0:
        check_local(master)
    else:
        wait_reachable(master, timeout_s=timeout_s, unreachable_s=min(UNREACHABLE_S, timeout_s))
    return master
