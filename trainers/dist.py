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


def _master_port(job_id: str) -> int:
    # Same rule as submitit's TorchDistributedEnvironment: every rank derives the
    # same port from the job id, so no rendezvous is needed to agree on it.
    import random

    return random.Random(job_id).randint(20000, 60000)


def _local_port(env: dict, wait_s: float = 120.0) -> int:
    """A free port for a local job, agreed through a file in the job folder.

    Rank 0 binds port 0 to find a free port when the job *starts* (a port picked at
    submission may be taken by the time a queued local job runs) and publishes it;
    the other ranks wait for the file.
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
        tmp.write_text(str(port))
        tmp.replace(path)
        return port
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        try:
            return int(path.read_text())
        except (OSError, ValueError):
            time.sleep(0.05)
    raise RuntimeError(f"rank {env['rank']}: rank 0 never published the rendezvous port ({path})")


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


def setup(*, want_device: str, timeout_s: float = 600.0, master_port: int | None = None,
          rendezvous_timeout_s: float | None = None) -> DistContext:
    """Initialise the process group (if more than one rank) and pick this rank's device.

    ``want_device`` is the platform's ("cuda" or "cpu"). Without a visible CUDA device
    the rank runs on CPU with gloo and says so (``emulated``): the local test cluster
    emulates GPUs. ``timeout_s``: collectives; ``rendezvous_timeout_s`` (default: 5
    minutes, at most ``timeout_s``): how long ranks wait for each other at the start.
    """
    env = _job_env()
    world = env["world_size"]
    local_world = max(1, world // max(1, env["num_nodes"]))
    use_cuda = want_device == "cuda" and torch.cuda.is_available()
    if use_cuda:
        device = torch.device("cuda", env["local_rank"] % torch.cuda.device_count())
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    backend = "none"
    node = os.environ.get("SLURMD_NODENAME") or socket.gethostname()
    rank_nodes: tuple[str, ...] = (node,)
    master_text = ""
    if world > 1:
        from datetime import timedelta

        backend = "nccl" if use_cuda else "gloo"
        submitit_job = bool(os.environ.get("SUBMITIT_EXECUTOR"))
        if master_port is None and os.environ.get("SUBMITIT_EXECUTOR") == "local":
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
            **({"device_id": device} if use_cuda else {}),
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
