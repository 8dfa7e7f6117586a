"""torch.distributed set-up from the job's environment (submitit, SLURM or torchrun).

The rendezvous is found and checked first (trainers/rendezvous.py): a master no rank can
resolve or reach fails the job in seconds naming host and port, instead of every rank
waiting out the process-group timeout. The store it runs on is made here with the
rendezvous timeout; collectives keep the process-group timeout (platform.dist_timeout_min).
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass

import torch
import torch.distributed as dist

from trainers import rendezvous


@dataclass
class DistContext:
    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    num_nodes: int
    device: torch.device
    backend: str  # "nccl" | "gloo" | "none" (one rank, no process group)
    emulated: bool  # the platform asked for CUDA but none is visible: ran on CPU
    host: str
    node: str = ""  # the node SLURM put this rank on (SLURMD_NODENAME; else host)
    rank_nodes: tuple[str, ...] = ()  # every rank's node, by rank (gathered at set-up)
    master: str = ""  # the rendezvous, e.g. "n1:23456 (127.0.0.1)"; "" with one rank

    @property
    def distributed(self) -> bool:
        return self.backend != "none"


def _job_env() -> dict:
    """Rank layout of this process: submitit's JobEnvironment, else torchrun's variables."""
    if os.environ.get("SUBMITIT_EXECUTOR"):  # set by submitit in local and SLURM jobs
        import submitit

        env = submitit.JobEnvironment()
        return {
            "rank": env.global_rank,
            "world_size": env.num_tasks,
            "local_rank": env.local_rank,
            "num_nodes": env.num_nodes,
            "hostnames": list(env.hostnames),
            "job_id": str(env.job_id),
        }
    return {
        "rank": int(os.environ.get("RANK", 0)),
        "world_size": int(os.environ.get("WORLD_SIZE", 1)),
        "local_rank": int(os.environ.get("LOCAL_RANK", 0)),
        "num_nodes": int(os.environ.get("GROUP_WORLD_SIZE", os.environ.get("SLURM_NNODES", 1))),
        "hostnames": [os.environ.get("MASTER_ADDR", "127.0.0.1")],
        "job_id": os.environ.get("TORCHELASTIC_RUN_ID", "0"),
    }


MASTER_PORTS = (20000, 32767)  # below Linux's ephemeral range (32768-60999 by default)


def _master_port(job_id: str) -> int:
    # As submitit's TorchDistributedEnvironment: every rank derives the same port from
    # the job id, so no rendezvous is needed to agree on it. Not from the ephemeral
    # range, where any outgoing connection on the node (a TCPStore client, sacct, the
    # store's database) may hold the port: rank 0 then fails with EADDRINUSE (seen in CI).
    import random

    return random.Random(job_id).randint(*MASTER_PORTS)


def _local_port(env: dict, wait_s: float = 120.0) -> int:
    """A free port for a local job, agreed through a file in the job folder.

    Rank 0 binds port 0 to find a free port when the job *starts* (a port picked at
    submission may be taken by the time a queued local job runs) and publishes it with
    its own identity (pid and start time); the other ranks wait for the file.

    A requeued job restarts its ranks under the same job id, so the file of the run
    before is still there: a rank that read it would knock at a port nobody serves
    any more for the whole rendezvous timeout while rank 0 waits for it (found by the
    checkpoint test under load). So the other ranks accept only the file of *their*
    rank 0, the ``submitit.core._submit`` process that their controller (their parent)
    started as rank 0, and fail at once when that one has ended without publishing.
    """
    import socket
    import time
    from pathlib import Path

    folder = Path(os.environ.get("CAMPAIGN_JOB_FOLDER") or ".")
    path = folder / f"{env['job_id']}.master_port"
    if env["rank"] == 0:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(f"{port} {_process_identity(os.getpid()) or ''}".strip())
        tmp.replace(path)
        return port
    rank0 = _local_rank0(str(env["job_id"]))
    if rank0 == "":
        raise RuntimeError(f"rank {env['rank']}: rank 0 of local job {env['job_id']} ended before it published "
                           "the rendezvous port (see rank 0's log)")
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        try:
            words = path.read_text().split()
            if rank0 is None or words[1:] == [rank0]:  # None: no /proc to tell runs apart
                return int(words[0])
        except (OSError, ValueError, IndexError):
            pass
        if rank0 is not None and _process_identity(int(rank0.split(":")[0])) != rank0:
            raise RuntimeError(f"rank {env['rank']}: rank 0 of local job {env['job_id']} (pid {rank0.split(':')[0]}) "
                               "ended before it published the rendezvous port (see rank 0's log)")
        time.sleep(0.05)
    raise RuntimeError(f"rank {env['rank']}: rank 0 never published the rendezvous port ({path})")


def _process_identity(pid: int) -> "str | None":
    """``pid:start time`` of a live process (a pid reused later has another start time);
    None when /proc cannot say (gone, a zombie, not Linux)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[1].split()
        if fields[0] in (b"Z", b"X"):  # ended, not yet reaped
            return None
        return f"{pid}:{int(fields[19])}"  # field 22 of proc(5): starttime
    except (OSError, IndexError, ValueError):
        return None


def _local_rank0(job_id: str) -> "str | None":
    """The identity of this local rank's rank 0: its sibling (same parent, submitit's
    controller) with ``SUBMITIT_LOCAL_GLOBALID=0`` of the same job. The controller starts
    rank 0 first, so "" means it has ended already; None: no /proc to look in."""
    if not os.path.isdir("/proc"):
        return None
    parent = os.getppid()
    want = {b"SUBMITIT_LOCAL_GLOBALID": b"0", b"SUBMITIT_LOCAL_JOB_ID": job_id.encode()}
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                if int(fh.read().rsplit(b")", 1)[1].split()[1]) != parent:
                    continue
            with open(f"/proc/{entry}/environ", "rb") as fh:
                environ = dict(kv.split(b"=", 1) for kv in fh.read().split(b"\0") if b"=" in kv)
        except (OSError, ValueError, IndexError):  # gone meanwhile, or not ours to read
            continue
        if all(environ.get(k) == v for k, v in want.items()):
            return _process_identity(int(entry)) or ""
    return ""


def _store(master: rendezvous.Master, rank: int, world: int, timeout_s: float) -> "dist.Store":
    """The rendezvous' TCPStore (rank 0 serves it), waiting at most ``timeout_s`` for every
    rank to join; a RendezvousError naming the master when they do not."""
    from datetime import timedelta

    try:
        return dist.TCPStore(master.addr, master.port, world, rank == 0, timedelta(seconds=timeout_s),
                             wait_for_workers=True)
    except (RuntimeError, OSError) as exc:  # DistStoreError, DistNetworkError: RuntimeError
        line = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise rendezvous.RendezvousError(f"rendezvous at the master {master} (from {master.source}) failed: {line}") from exc


def setup(*, want_device: str, timeout_s: float = 600.0, rendezvous_timeout_s: float | None = None,
          shared_devices: bool = False) -> DistContext:
    """Initialise the process group (if more than one rank) and pick this rank's device.

    ``want_device`` is the platform's ("cuda" or "cpu"). Without a visible CUDA device
    the rank runs on CPU with gloo and says so (``emulated``): the local test cluster
    emulates GPUs. ``timeout_s``: collectives; ``rendezvous_timeout_s`` (default: 5
    minutes, at most ``timeout_s``): how long ranks wait for each other at the start.
    ``shared_devices``: every rank drives all the job's GPUs (a single-process engine, at
    ``procs_per_node`` > 1 several such processes on one node): each rank's device is the
    first GPU (where the engine keeps its module), and the ranks meet over gloo, since NCCL
    refuses two ranks of one communicator on one GPU (the 1-GPU points).
    """
    env = _job_env()
    world = env["world_size"]
    local_world = max(1, world // max(1, env["num_nodes"]))
    use_cuda = want_device == "cuda" and torch.cuda.is_available()
    if use_cuda:
        device = torch.device("cuda", 0 if shared_devices else env["local_rank"] % torch.cuda.device_count())
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    backend = "none"
    node = os.environ.get("SLURMD_NODENAME") or socket.gethostname()
    rank_nodes: tuple[str, ...] = (node,)
    master_text = ""
    if world > 1:
        from datetime import timedelta

        backend = "nccl" if use_cuda and not shared_devices else "gloo"
        submitit_job = bool(os.environ.get("SUBMITIT_EXECUTOR"))
        # The master's port: a local job's rank 0 picks a free one at start; torchrun's
        # own; else derived from the job id by every rank alike (_master_port).
        master_port: int | None = None
        if os.environ.get("SUBMITIT_EXECUTOR") == "local":
            master_port = _local_port(env)
        if master_port is None and not submitit_job and os.environ.get("MASTER_PORT"):
            master_port = int(os.environ["MASTER_PORT"])  # torchrun's (a submitit job's shell's is not its)
        rdv_s = min(timeout_s, rendezvous_timeout_s or rendezvous.RENDEZVOUS_TIMEOUT_S)
        master = rendezvous.find_master(env["rank"], master_port or _master_port(env["job_id"]),
                                        num_nodes=env["num_nodes"], timeout_s=rdv_s)
        os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = master.addr, str(master.port)
        master_text = str(master)
        if env["num_nodes"] == 1 and "GLOO_SOCKET_IFNAME" not in os.environ:
            os.environ["GLOO_SOCKET_IFNAME"] = "lo"
        # torchrun's agent serves the store itself; otherwise rank 0 does, made here so
        # that its timeout is the rendezvous', not the collectives'.
        own_store = os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True"
        store = _store(master, env["rank"], world, rdv_s) if own_store else None
        dist.init_process_group(
            backend=backend,
            **({"store": store} if store is not None else {"init_method": "env://"}),
            rank=env["rank"],
            world_size=world,
            timeout=timedelta(seconds=timeout_s),
            **({"device_id": device} if backend == "nccl" else {}),
        )
        if store is not None:
            store.set_timeout(timedelta(seconds=timeout_s))  # later groups (DeepSpeed's) wait as collectives do
        every: list = [None] * world
        dist.all_gather_object(every, node)
        rank_nodes = tuple(str(n) for n in every)
    return DistContext(
        rank=env["rank"],
        world_size=world,
        local_rank=env["local_rank"],
        local_world_size=local_world,
        num_nodes=env["num_nodes"],
        device=device,
        backend=backend,
        emulated=want_device == "cuda" and not use_cuda,
        host=socket.gethostname(),
        node=node,
        rank_nodes=rank_nodes,
        master=master_text,
    )


def end_local_peers() -> int:
    """On the local executor, SIGKILL this job's other ranks: what ``srun
    --kill-on-bad-exit=1`` does on SLURM, so that a failed rank's peers do not wait in a
    collective until the process-group timeout (NCCL never notices a peer's exit) while
    holding the GPUs and the machine's lock. The peers are the other ``submitit.core._submit``
    processes of this rank's controller (its parent). Returns how many were signalled."""
    if os.environ.get("SUBMITIT_EXECUTOR") != "local" or not os.path.isdir("/proc"):
        return 0
    import signal

    me, parent, killed = os.getpid(), os.getppid(), 0
    try:  # orphaned (its controller died): the new parent's other children are not its peers
        with open(f"/proc/{parent}/cmdline", "rb") as fh:
            if b"submitit.local._local" not in fh.read():
                return 0
    except OSError:
        return 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                ppid = int(fh.read().rsplit(b")", 1)[1].split()[1])
            if ppid != parent:
                continue
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                if b"submitit.core._submit" not in fh.read():
                    continue
            os.kill(int(entry), signal.SIGKILL)
            killed += 1
        except (OSError, ValueError, IndexError):  # gone meanwhile, or not ours to read
            continue
    return killed


def teardown(ctx: DistContext) -> None:
    if ctx.distributed and dist.is_initialized():
        dist.destroy_process_group()


def broadcast_object(ctx: DistContext, obj, src: int = 0):
    """``obj`` from rank ``src`` on every rank (identity with one rank)."""
    if not ctx.distributed:
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=src, device=ctx.device if ctx.backend == "nccl" else None)
    return box[0]
