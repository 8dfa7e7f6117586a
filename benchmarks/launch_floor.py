"""``benchmarks/launch.py --variant floor``: campaign's launch against its floor, the
controller's own time for the same sbatch calls (issue 26).

A launch of N points (``python -m campaign.launch -m ...``, jobs ``--hold``) runs with the
shim ``sbatch`` of benchmarks/launch.py keeping each call's script and arguments; the
floor then submits those very scripts (``--hold`` is in them) with the real ``sbatch``
from a plain ``bash`` loop, one line per call: what is left of a launch once
composition, validation, pickles and the store cost nothing. Only the calls sbatch
accepted are replayed, so the floor submits exactly the jobs the launch did (points the
launch left ``waiting`` for room are in neither). Launch and floor are interleaved
(A B, B A, ...): a floor run replays the latest launch's scripts. Every job either
submitted is scancelled by id right after its run. Prints per size N:

    N=1000  launch: 1000 of 1000 point(s) submitted, 0 waiting, 0 rejected; 8 sbatch, 1000 array tasks
    N=1000  floor: the same 8 sbatch scripts from a shell loop, 1000 array tasks
    N=1000  launch/floor time to return: 3.10x (...)

Goal (issue 26): at 10,000 points, <= 1.25x the floor with 0 rejected.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from statistics import median

if __package__ in (None, ""):
    from _common import clean_env, figure, ratio_figure, ratio_line
    import launch as bench
else:
    from benchmarks._common import clean_env, figure, ratio_figure, ratio_line
    from benchmarks import launch as bench

GOAL = 1.25  # launch / floor time to return at GOAL_N points
GOAL_N = 10_000
PER_POINT_GOAL_MS = 0.5  # issue 50: a launch's time a point past start-up, at GOAL_N points
SUBMITTED = re.compile(r"campaign \S+: (\d+) of (\d+) point\(s\) submitted")
WAITING = re.compile(r"^(\d+) point\(s\) wait for room", re.M)


@dataclass
class Floor:
    """One floor run: the replayed calls, their time to return, what sbatch answered."""

    return_s: float
    calls: int
    job_ids: list[str] = field(default_factory=list)
    tasks: int = 0
    output: str = ""


def launch_counts(run: "bench.Run") -> dict[str, int]:
    """Points submitted, waiting and rejected, as the launch printed them."""
    m = SUBMITTED.search(run.output)
    if m is None:
        raise SystemExit(f"error: the launch printed no 'N of M point(s) submitted' line:\n{run.output[-3000:]}")
    done, total = int(m.group(1)), int(m.group(2))
    w = WAITING.search(run.output)
    waiting = int(w.group(1)) if w else 0
    return {"points": total, "submitted": done, "waiting": waiting, "rejected": total - done - waiting}


def replay_script(run: "bench.Run") -> tuple[str, int, int]:
    """The floor's bash loop for ``run`` (one plain ``sbatch`` line per call sbatch accepted,
    its kept script and arguments), the number of calls and their array tasks."""
    lines, tasks = ["#!/bin/bash"], 0
    for s in run.sbatches:
        if s.rc != 0 or not s.job_id:
            continue  # refused or full: the launch did not submit it, the floor neither
        copy = run.folder / "scripts" / f"{s.key}.sh"
        if not copy.exists():
            raise SystemExit(f"error: the shim kept no copy of the script of sbatch call {s.key} ({copy})")
        args = Path(f"{copy}.args").read_text().strip()
        lines.append(f"sbatch {args} {shlex.quote(str(copy))}".replace("  ", " "))
        tasks += s.tasks
    return "\n".join(lines) + "\n", len(lines) - 1, tasks


def records() -> tuple[int, int]:
    """(job records the controller holds, its MaxJobCount): an array task is one record,
    and a cancelled one stays one for MinJobAge (here 600 s)."""
    held = subprocess.run(["squeue", "-h", "-a", "-r", "-t", "all", "-o", "%i"], capture_output=True, text=True,
                          timeout=60, check=False).stdout.split()
    config = subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True, timeout=60,
                            check=False).stdout
    m = re.search(r"^MaxJobCount\s*=\s*(\d+)", config, re.M)
    return len(held), int(m.group(1)) if m else 10_000


def wait_for_room(tasks: int, timeout: float) -> float:
    """Wait until the controller has room for ``tasks`` more records (the launch just
    before left its cancelled jobs there until MinJobAge ends them; a floor that met a
    full controller would time sbatch's own two minutes of retries, not the controller);
    returns the seconds waited."""
    t0 = time.time()
    while True:
        held, cap = records()
        if held + tasks < cap:
            return time.time() - t0
        if tasks >= cap:
            raise SystemExit(f"error: MaxJobCount={cap} cannot hold {tasks} job(s) at once; start the local cluster "
                             f"with room for the run (LOCAL_SLURM_MAX_JOBS=40000 bash scripts/local-slurm.sh start)")
        if time.time() - t0 > timeout:
            raise SystemExit(f"error: the controller has no room for {tasks} job(s) after {timeout:.0f} s ({held} "
                             f"of MaxJobCount={cap} records held, ended jobs go after MinJobAge); purge them with "
                             "bash scripts/local-slurm.sh stop && bash scripts/local-slurm.sh start, or start it "
                             "with LOCAL_SLURM_MAX_JOBS=40000")
        print(f"waiting for room for {tasks} job(s): {held} of MaxJobCount={cap} records held "
              "(ended jobs go after MinJobAge)", flush=True)
        time.sleep(20)


def floor_once(run: "bench.Run", seen: list[str], timeout: float) -> Floor:
    """Submit ``run``'s accepted sbatch calls again from a bash loop, time it (from the
    start of ``bash`` to its exit), scancel every job it submitted."""
    text, calls, tasks = replay_script(run)
    wait_for_room(tasks, max(timeout, 900))
    loop = run.folder / f"floor-{time.time_ns()}.sh"
    loop.write_text(text)
    env = clean_env()  # the real sbatch first on PATH: no shim
    t0 = time.time()
    try:
        done = subprocess.run(["bash", str(loop)], env=env, capture_output=True, text=True, timeout=timeout,
                              check=False)
    except subprocess.TimeoutExpired as exc:  # what it got through is still cancelled
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        ids = re.findall(r"Submitted batch job (\d+)", out)
        seen.extend(ids)
        bench.scancel(ids)
        raise SystemExit(f"error: the floor's shell loop took over {timeout:.0f} s ({loop})") from None
    t_ret = time.time()
    ids = re.findall(r"Submitted batch job (\d+)", done.stdout)
    seen.extend(ids)
    bench.scancel(ids)
    floor = Floor(t_ret - t0, calls, ids, tasks, done.stdout + done.stderr)
    if len(ids) != calls:
        raise SystemExit(f"error: the floor's shell loop got {len(ids)} of {calls} sbatch call(s) through, so it "
                         f"did not submit what the launch did:\n{floor.output[-3000:]}")
    return floor


def measure(n: int, rounds: int, work: Path, real: str, seen: list[str], timeout: float) -> dict:
    """``rounds`` interleaved launch / floor pairs at ``n`` points."""
    latest: list = []

    def launch(r: int):
        wait_for_room(n, max(timeout, 900))  # the runs before left their records: a launch meets no full controller
        run = bench.run_once("campaign", n, work, real, "cancel", seen, timeout, keep_scripts=True)
        latest[:] = [run]
        return run

    def floor(r: int):
        if not latest:  # never: round 0 runs the launch first
            raise SystemExit("error: the floor has no launch to replay")
        return floor_once(latest[0], seen, timeout)

    res = bench.interleaved({"launch": launch, "floor": floor}, rounds)
    return {"n": n, **res}


def report(res: dict) -> list[str]:
    """The lines printed per size."""
    n, launches, floors = res["n"], res["launch"], res["floor"]
    c = launch_counts(launches[0])
    return [
        f"N={n}  sweep: {' '.join(bench.sweep(n))}",
        f"N={n}  launch: {c['submitted']} of {c['points']} point(s) submitted, {c['waiting']} waiting, "
        f"{c['rejected']} rejected; {sum(1 for s in launches[0].sbatches if s.rc == 0)} sbatch, "
        f"{launches[0].tasks} array tasks",
        f"N={n}  floor: the same {floors[0].calls} sbatch scripts from a shell loop, {floors[0].tasks} array tasks",
        "N={}  {}".format(n, ratio_line("launch/floor time to return", [r.return_s for r in launches],
                                        [f.return_s for f in floors])),
    ]


def figures(res: dict) -> list[dict]:
    """The saved figures of one size: the ratio (with the goal at GOAL_N points), both
    times, and the launch's waiting and rejected points."""
    n, launches, floors = res["n"], res["launch"], res["floor"]
    counts = [launch_counts(r) for r in launches]
    num, den = [r.return_s for r in launches], [f.return_s for f in floors]
    ratios = [a / b for a, b in zip(num, den) if b > 0]
    goal, met = "", None
    if n == GOAL_N:
        goal = f"<= {GOAL}x with 0 rejected"
        met = bool(ratios) and sorted(ratios)[len(ratios) // 2] <= GOAL and all(c["rejected"] == 0 for c in counts)
    return [
        ratio_figure(f"{n}.launch_over_floor", f"launch of {n:,} points: time to return, campaign's launch / the "
                     "same sbatch calls from a shell loop (the floor)", num, den, goal=goal, met=met),
        figure(f"{n}.launch_return", f"launch of {n:,} points: campaign's time to return", num, unit="s"),
        figure(f"{n}.floor_return", f"launch of {n:,} points: the floor's time to return", den, unit="s"),
        figure(f"{n}.waiting", f"launch of {n:,} points: points left waiting for room (campaign resume submits "
               "them)", [c["waiting"] for c in counts], unit="points"),
        figure(f"{n}.rejected", f"launch of {n:,} points: points rejected", [c["rejected"] for c in counts],
               unit="points"),
    ]


def past_start_up(small: dict, large: dict) -> tuple[list[str], list[dict]]:
    """The launch's cost of a point past start-up at the larger size: (median time to
    return at ``large`` - the same at ``small``) / the points between, in wall time and in
    the launch process's CPU (its sbatch calls included; the CPU figure moves less with
    the machine's other load). Its lines and figures; a size whose launch left points
    waiting or rejected does the work of fewer points, so its figure says so."""
    n0, n1 = small["n"], large["n"]
    c0, c1 = launch_counts(small["launch"][0]), launch_counts(large["launch"][0])
    wall = (median([r.return_s for r in large["launch"]]) - median([r.return_s for r in small["launch"]])) / (n1 - n0)
    cpu = (median([r.cpu_s for r in large["launch"]]) - median([r.cpu_s for r in small["launch"]])) / (n1 - n0)
    whole = c0["submitted"] == c0["points"] and c1["submitted"] == c1["points"]
    goal = f"<= {PER_POINT_GOAL_MS} ms with 0 rejected" if n1 == GOAL_N else ""
    met = (wall * 1e3 <= PER_POINT_GOAL_MS and whole) if goal else None
    note = "" if whole else " (not every point was submitted: a figure of fewer points' work)"
    lines = [f"N={n1}  launch: per point past start-up (against N={n0}): {wall * 1e3:.3f} ms wall, "
             f"{cpu * 1e3:.3f} ms CPU{note}"]
    figures = [
        figure(f"{n1}.per_point", f"launch of {n1:,} points: per point past start-up", [wall * 1e3], unit="ms",
               goal=goal, met=met, note=note.strip(" ()")),
        figure(f"{n1}.per_point_cpu", f"launch of {n1:,} points: per point past start-up, the launch's CPU",
               [cpu * 1e3], unit="ms"),
    ]
    return lines, figures
