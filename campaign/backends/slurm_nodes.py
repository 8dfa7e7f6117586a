"""What a SLURM partition's nodes hold, and the points that could never be placed there.

``sinfo -h -a -o '%R|%D|%G|%c'`` prints one line per partition and group of like nodes
(same state, generic resources and cores): the partition, how many nodes, their ``gres``
(``gpu:4``, ``gpu:a100:4(S:0-1)``, ``gpu:2,mps:200``, ``(null)``) and cores per node.
A point needs ``nodes`` nodes that each have ``gpus_per_node`` GPUs and
``tasks_per_node * cpus_per_task`` cores; where fewer exist, sbatch refuses it at
submission ("Node count specification invalid", "Requested node configuration is not
available"), so a launch refuses it before anything is stored. Pure: the query is
``SlurmBackend.placement_refusals``'.
"""

from __future__ import annotations

import re
from typing import Any, Optional

# gpu[:type]:count, optionally followed by a socket note: gpu:4, gpu:a100:4(S:0-1)
_GPU = re.compile(r"^gpu(?::[^:(]+)?:(\d+)")


def gres_gpus(gres: str) -> int:
    """GPUs per node in one ``%G`` field (0: none, ``(null)``)."""
    total = 0
    for item in re.split(r",(?![^(]*\))", gres.strip()):  # commas inside "(S:0,1)" are not separators
        m = _GPU.match(item.strip())
        if m:
            total += int(m.group(1))
    return total


def partition_nodes(sinfo_out: str, wanted: Optional[set] = None) -> dict[str, list[tuple[int, int, int]]]:
    """partition -> [(nodes, GPUs per node, cores per node)], one per node group printed."""
    groups: dict[str, list[tuple[int, int, int]]] = {}
    for line in sinfo_out.splitlines():
        fields = [f.strip() for f in line.split("|")]
        if len(fields) != 4 or not fields[1].isdigit():
            continue
        part = fields[0].rstrip("*")  # the default partition is printed with a '*' by %P (not %R); both read
        if wanted is not None and part not in wanted:
            continue
        cores = int(fields[3].rstrip("+")) if fields[3].rstrip("+").isdigit() else 0
        groups.setdefault(part, []).append((int(fields[1]), gres_gpus(fields[2]), cores))
    return groups


def placement_problem(res: Any, groups: Optional[list[tuple[int, int, int]]]) -> Optional[str]:
    """Why ``res`` (nodes, gpus_per_node, tasks_per_node x cpus_per_task) never fits the
    partition whose node groups are ``groups``, or None (also when nothing is known)."""
    if not groups:
        return None
    part = res.partition
    have = sum(n for n, _, _ in groups)
    if res.nodes > have:
        return (f"SLURM partition '{part}' has {have} node(s); nodes={res.nodes} cannot be placed there "
                f"(use nodes<={have} or another platform.partition)")
    gpus, cores = res.gpus_per_node, res.tasks_per_node * res.cpus_per_task
    known_cores = all(c > 0 for _, _, c in groups)
    fit = sum(n for n, g, c in groups if g >= gpus and (not known_cores or c >= cores))
    if fit >= res.nodes:
        return None
    most_gpus = max(g for _, g, _ in groups)
    if gpus > most_gpus:
        return (f"SLURM partition '{part}' has at most {most_gpus} GPU(s) a node (gres); {gpus} GPU(s) a node "
                f"cannot be placed there (spread the GPUs over more nodes, or set platform.gpus_per_node<={most_gpus} "
                f"or another platform.partition)")
    if known_cores and cores > max(c for _, _, c in groups):
        most = max(c for _, _, c in groups)
        return (f"SLURM partition '{part}' has at most {most} core(s) a node; {res.tasks_per_node} task(s) x "
                f"{res.cpus_per_task} core(s) = {cores} a node cannot be placed there (set platform.cpus_per_task "
                f"lower, or another platform.partition)")
    return (f"SLURM partition '{part}' has {fit} node(s) of its {have} with {gpus} GPU(s) and {cores} core(s) a node"
            f"; nodes={res.nodes} cannot be placed there (use nodes<={fit} or another platform.partition)")
