"""What a SLURM partition's nodes hold, the points that could never be placed there, and
whether the GPUs its nodes hold are emulated.

``sinfo -h -a -e -o '%R|%D|%G|%c'`` prints one line per partition and group of like nodes
(``-e``: same state, generic resources, cores and the rest): the partition, how many nodes, their ``gres``
(``gpu:4``, ``gpu:a100:4(S:0-1)``, ``gpu:2,mps:200``, ``(null)``) and cores per node.
A point needs ``nodes`` nodes that each have ``gpus_per_node`` GPUs and
``tasks_per_node * cpus_per_task`` cores; where fewer exist, sbatch refuses it at
submission ("Node count specification invalid", "Requested node configuration is not
available"), so a launch refuses it before anything is stored. Pure: the query is
``SlurmBackend.placement_refusals``'. A partition's GPUs are emulated (gres entries with CPU
ranks behind them, as on scripts/local-slurm.sh's cluster) when every node a job may get
there carries the feature ``emulated_gpu`` (``sinfo -h -a -o '%R|%f'``, ``emulated_gpus``;
the query is ``SlurmBackend.emulated_gpus``'): such a point's compute capability is not
checked against the torch build (campaign/launch/arch.py).
"""

from __future__ import annotations

import re
from typing import Any, Optional

# gpu[:type]:count, optionally followed by a socket or index note: gpu:4, gpu:a100:4(S:0-1)
_GPU = re.compile(r"^gpu(?::[^:(]+)?:(\d+)(?:\(.*\))?$")


def gres_gpus(gres: str) -> Optional[int]:
    """GPUs per node in one ``%G`` field (0: none, ``(null)``; None: a ``gpu`` item this
    cannot read, so nothing is refused on it)."""
    total = 0
    for item in re.split(r",(?![^(]*\))", gres.strip()):  # commas inside "(S:0,1)" are not separators
        item = item.strip()
        if not re.match(r"^gpu\b", item):
            continue
        m = _GPU.match(item)
        if m is None:
            return None
        total += int(m.group(1))
    return total


def partition_nodes(sinfo_out: str, wanted: Optional[set] = None) -> dict[str, list[tuple[int, Optional[int], Optional[int]]]]:
    """partition -> [(nodes, GPUs per node, cores per node)], one per node group printed
    (``sinfo -e``: nodes grouped only when alike); a figure sinfo gives as a minimum
    (``64+``) or not at all (``N/A``) is None: unknown, never a reason to refuse."""
    groups: dict[str, list[tuple[int, Optional[int], Optional[int]]]] = {}
    for line in sinfo_out.splitlines():
        fields = [f.strip() for f in line.split("|")]
        if len(fields) != 4 or not fields[1].isdigit():
            continue
        part = fields[0].rstrip("*")  # the default partition is printed with a '*' by %P (not %R); both read
        if wanted is not None and part not in wanted:
            continue
        cores = int(fields[3]) if fields[3].isdigit() else None
        groups.setdefault(part, []).append((int(fields[1]), gres_gpus(fields[2]), cores))
    return groups


def placement_problem(res: Any, groups: Optional[list]) -> Optional[str]:
    """Why ``res`` (nodes, gpus_per_node, tasks_per_node x cpus_per_task) never fits the
    partition whose node groups are ``groups``, or None (also when nothing is known: no
    groups, or none of its nodes visible, as on a cloud cluster whose nodes come later)."""
    have = sum(n for n, _, _ in groups or ())
    if not have:
        return None
    part = res.partition
    if res.nodes > have:
        return (f"SLURM partition '{part}' has {have} node(s); nodes={res.nodes} cannot be placed there "
                f"(use nodes<={have} or another platform.partition)")
    gpus, cores = res.gpus_per_node, res.tasks_per_node * res.cpus_per_task
    fit = sum(n for n, g, c in groups if (g is None or g >= gpus) and (c is None or c >= cores))
    if fit >= res.nodes:
        return None
    known_gpus = [g for _, g, _ in groups if g is not None]
    known_cores = [c for _, _, c in groups if c is not None]
    if len(known_gpus) == len(groups) and gpus > max(known_gpus):
        return (f"SLURM partition '{part}' has at most {max(known_gpus)} GPU(s) a node (gres); {gpus} GPU(s) a node "
                f"cannot be placed there (spread the GPUs over more nodes, or set "
                f"platform.gpus_per_node<={max(known_gpus)} or another platform.partition)")
    if len(known_cores) == len(groups) and cores > max(known_cores):
        return (f"SLURM partition '{part}' has at most {max(known_cores)} core(s) a node; {res.tasks_per_node} "
                f"task(s) x {res.cpus_per_task} core(s) = {cores} a node cannot be placed there (set "
                f"platform.cpus_per_task lower, or another platform.partition)")
    return (f"SLURM partition '{part}' has {fit} node(s) of its {have} with {gpus} GPU(s) and {cores} core(s) a node"
            f"; nodes={res.nodes} cannot be placed there (use nodes<={fit} or another platform.partition)")


# ---------------------------------------------------------------- GPUs emulated (node features)

EMULATED_FEATURE = "emulated_gpu"  # the node feature of a node whose gres GPUs are stand-ins (CPU ranks behind them)
_FEATURE_NAME = re.compile(r"[A-Za-z0-9_.:+-]+")  # one feature of a constraint (a count "*2" stripped)


def partition_features(sinfo_out: str) -> dict[str, list[frozenset[str]]]:
    """partition -> the features of each node group, from ``sinfo -h -a -o '%R|%f'`` (one
    line per partition and group of like nodes: ``v100|a100_40g,emulated_gpu``); ``(null)``
    or an empty field is a group without features, a ``*`` after the name (the default
    partition, as ``%P`` prints it) is dropped, and a line that is not ``NAME|FEATURES``
    is skipped."""
    groups: dict[str, list[frozenset[str]]] = {}
    for line in sinfo_out.splitlines():
        fields = line.split("|")
        if len(fields) != 2:
            continue
        part = fields[0].strip().rstrip("*")
        if not part:
            continue
        text = fields[1].strip()
        names = frozenset() if text in ("", "(null)") else frozenset(f.strip() for f in text.split(",") if f.strip())
        groups.setdefault(part, []).append(names)
    return groups


def constraint_alternatives(constraint: Optional[str]) -> Optional[list[frozenset[str]]]:
    """The feature sets a node may carry to satisfy ``constraint`` (any one of them, all of its
    features): ``a100_80g`` -> [{a100_80g}], ``a&b`` -> [{a, b}], ``a|b`` and ``[a|b]`` ->
    [{a}, {b}], counts (``a*2``) dropped; [frozenset()] without a constraint (every node);
    None for one this cannot read (parentheses, an odd character): nothing is known."""
    text = (constraint or "").strip()
    if not text:
        return [frozenset()]
    if "(" in text or ")" in text:
        return None
    out = []
    for alternative in text.replace("[", "").replace("]", "").split("|"):
        names = set()
        for item in re.split(r"[&,]", alternative):
            name = re.sub(r"\*\d+$", "", item.strip())
            if not _FEATURE_NAME.fullmatch(name):
                return None
            names.add(name)
        out.append(frozenset(names))
    return out


def emulated_gpus(groups: Optional[list[frozenset[str]]], constraint: Optional[str] = None) -> bool:
    """Whether the GPUs a job gets from a partition whose node groups carry ``groups`` (its
    features, ``partition_features``) are emulated: some node satisfies ``constraint`` (any
    node without one) and every node that does carries ``EMULATED_FEATURE``. False when
    nothing is known (no groups, a constraint this cannot read) or some such node lacks it:
    a real GPU may be what the job gets, so its point is checked."""
    alternatives = constraint_alternatives(constraint)
    if not groups or alternatives is None:
        return False
    eligible = [g for g in groups if any(a <= g for a in alternatives)]
    return bool(eligible) and all(EMULATED_FEATURE in g for g in eligible)
