"""``campaign status``: what ran, what pends, what failed and why.

Each point's state is its effective state (campaign.state: the store, the executors'
view of the points the store has unfinished, the spool folder), the same one
``campaign harvest`` counts. Status reads the store through a read-only connection
and writes nothing: what it observes is derived again at every refresh.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from collections import Counter
from typing import Any, Callable, Optional

from tabulate import tabulate

from campaign.state import FAILED_STATES, SPOOLED, effective_points, is_final
from campaign.store import open_store
from campaign.text import printable

__all__ = ["FAILED_STATES", "show_status", "watch_status", "point_view", "render"]


def _elapsed(p: dict, now: float) -> Optional[float]:
    """Running: since it started. Ended: from start to end; no end known: none (never
    a time that grows after the point has ended)."""
    start = p.get("started_at")
    if not start:
        return None
    if not is_final(p["state"]):
        return max(0.0, now - start)
    end = p.get("ended_at")
    return max(0.0, end - start) if end else None


def _fmt_s(s: Optional[float]) -> str:
    if s is None:
        return "-"
    s = int(round(s))
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"


def failing_log(reason: Optional[str], log_path: str) -> str:
    """The log of the rank the reason names (``rank 3: ...``: submitit's task 3 writes
    ``<job>_3_log.err`` beside task 0's ``<job>_0_log.err``), where it exists."""
    m = re.match(r"rank (\d+): ", reason or "")
    if not m or m.group(1) == "0" or not log_path.endswith("_0_log.err"):
        return log_path
    theirs = f"{log_path[:-len('_0_log.err')]}_{m.group(1)}_log.err"
    return theirs if os.path.exists(theirs) else log_path


def point_view(p: dict, now: float) -> dict[str, Any]:
    reason = p.get("reason")
    log_path = p.get("log_path")
    if p["state"] in FAILED_STATES and log_path:
        log_path = failing_log(reason, log_path)
        reason = f"{reason or p['state']} (log: {log_path})"
    return {
        "idx": p["idx"], "platform": p["platform"], "gpus": p["gpus"], "trainer": p["trainer"],
        "experiment": p["experiment"], "repeat": p["repeat"], "state": p["state"], "job_id": p.get("job_id"),
        "attempts": p.get("attempts", 0),
        "elapsed_s": _elapsed(p, now), "reason": reason, "log_path": log_path,
    }


def summary_line(views: list[dict]) -> str:
    counts = Counter(v["state"] for v in views)
    order = ["completed", "running", "pending", "registered", "waiting", SPOOLED, *FAILED_STATES, "requeued"]
    parts = [f"{counts[s]} {s}" for s in order if counts.get(s)]
    return f"{len(views)} point(s): " + ", ".join(parts)


def render(campaign: dict, views: list[dict]) -> str:
    rows = [[printable(c) for c in (v["idx"], v["platform"], v["gpus"], v["trainer"], v["experiment"], v["state"],
                                      v["job_id"] or "-", v.get("attempts", 0), _fmt_s(v["elapsed_s"]), v["reason"] or "")]
            for v in views]
    head = printable(f"campaign {campaign['id']}" + (f" ({campaign['name']})" if campaign.get("name") else ""))
    table = tabulate(rows, headers=["#", "platform", "gpus", "trainer", "experiment", "state", "job", "attempts", "elapsed",
                              "reason"],
                     tablefmt="simple")
    return f"{head}\n{table}\n{summary_line(views)}"


def watch_status(ref: Optional[str], *, store_url: str, interval: float = 2.0) -> int:
    """Redraw the status table every ``interval`` seconds until every point is final.

    Exit status: 0 (Ctrl-C: ``KeyboardInterrupt`` reaches the CLI, which exits 130)."""
    tty = sys.stdout.isatty()
    with open_store(store_url, readonly=True) as store:
        campaign = store.resolve_campaign(ref)
        while True:
            points, warnings = effective_points(store, campaign)
            views = [point_view(p, time.time()) for p in points]
            text = render(campaign, views)
            stamp = time.strftime("%H:%M:%S")
            if tty:
                print("\033[H\033[2J", end="")
            print(f"{text}\n[{stamp}] refreshing every {interval:g} s; Ctrl-C to stop", flush=True)
            for w in warnings:
                print(f"warning: {printable(w)}", flush=True)
            unfinished = [v for v in views if not is_final(v["state"])]
            if all(v["state"] == "waiting" for v in unfinished):  # nothing will change by itself
                if unfinished:
                    print(f"{len(unfinished)} point(s) wait for room in the scheduler: campaign resume "
                          f"{campaign['id']} submits them", flush=True)
                return 0
            time.sleep(interval)


def show_status(ref: Optional[str], *, store_url: str, as_json: bool = False, wait: bool = False,
                interval: float = 2.0, timeout: Optional[float] = None,
                submit: Optional[Callable[[str], list[str]]] = None) -> int:
    """Print the campaign's status; with ``wait`` block until every point is final.

    ``submit`` (``--wait --submit``): called with the campaign id at every refresh, it
    submits what the campaign has due (the next wave, automatic retries) and returns a
    line per point; without it, a wait ends when only points waiting for room are left.

    Exit status: 0, or 1 when waiting ended with a point that did not complete (or
    ``--timeout`` ran out first).
    """
    with open_store(store_url, readonly=True) as store:
        campaign = store.resolve_campaign(ref)
        start = time.time()
        tty = sys.stderr.isatty()
        last_line = None
        while True:
            points, warnings = effective_points(store, campaign)
            now = time.time()
            views = [point_view(p, now) for p in points]
            pending = [v for v in views if not is_final(v["state"])]
            lines = submit(campaign["id"]) if submit is not None and wait else []
            for line in lines:
                print(printable(f"{chr(13) if tty else ''}{line}"), file=sys.stderr, flush=True)
            if lines:  # points went (or were held back): look again before deciding anything
                continue
            stuck = submit is None and pending and all(v["state"] == "waiting" for v in pending)
            if not wait or not pending or stuck or (timeout is not None and now - start > timeout):
                if wait and stuck:
                    print(f"{chr(10) if tty else ''}{len(pending)} point(s) wait for room in the scheduler: campaign "
                          f"resume {campaign['id']} submits them (or campaign status --wait --submit)",
                          file=sys.stderr)
                break
            counts = summary_line(views)
            if tty:  # one live line
                line = f"waiting for {len(pending)} of {len(views)} point(s) [{_fmt_s(now - start)}] {counts}"
                print("\r" + line + "\033[K", end="", file=sys.stderr, flush=True)
            elif counts != last_line:  # a log: one line per change
                print(f"[{_fmt_s(now - start)}] {counts}", file=sys.stderr, flush=True)
            last_line = counts
            time.sleep(interval)
        if wait and tty:
            print(file=sys.stderr)
    for w in warnings:
        print(f"warning: {printable(w)}", file=sys.stderr)
    if as_json:  # json escapes control characters itself
        counts = Counter(v["state"] for v in views)
        print(json.dumps({"campaign": campaign, "points": views, "counts": dict(counts)}, indent=2, default=str))
    else:
        print(render(campaign, views))
    if wait and any(v["state"] != "completed" for v in views):
        return 1
    return 0
