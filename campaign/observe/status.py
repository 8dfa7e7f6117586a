"""``campaign status``: what ran, what runs (how far, how fast, until when), what pends,
what failed and why.

Each point's state is its effective state (campaign.observe.state: the store, the executors'
view of the points the store has unfinished, the spool folder), the same one
``campaign harvest`` counts. Progress, rate and ETA come from the running ranks'
heartbeats (campaign.observe.progress). Status reads the store through a read-only connection
and writes nothing: what it observes is derived again at every refresh.

The table has a column per value that differs between the campaign's points (by its
override name, campaign.common.varying); what every point shares is said once, above it,
the dataset too (worded with its crop from the stored config, a study's stand-in saying
whose shapes it keeps: campaign.catalogue.dataset_label), a column where points differ.
"""

from __future__ import annotations

import contextlib
import json
import re
import sys
import time
from collections import Counter
from typing import Any, Callable, Optional


from campaign.catalogue.dataset_label import dataset_label
from campaign.common import interrupt
from campaign.common.errors import EXIT_TIMEOUT
from campaign.observe.estimate import fmt_duration
from campaign.common.jobfolder import sibling_task_log
from campaign.common.plan_origin import launched_from
from campaign.observe.progress import NOT_STARTED, CampaignETA, PointETA, annotate, campaign_eta, json_safe, read_beats
from campaign.observe.state import FAILED_STATES, SPOOLED, effective_points, is_final
from campaign.store import find_campaign_noted, open_store
from campaign.common import table as tables
from campaign.common.text import printable
from campaign.common.varying import AXES, varying

__all__ = ["FAILED_STATES", "EXIT_TIMEOUT", "show_status", "watch_status", "point_view", "point_image", "render",
           "snapshot"]

BAR_WIDTH = 24
SHARED_AXES = ("trainer", "experiment", "dataset")  # a column when they differ, said above the table when shared


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


_fmt_s = fmt_duration


def failing_log(reason: Optional[str], log_path: str) -> str:
    """The log of the rank the reason names (``rank 3: ...``: submitit's task 3 writes
    ``<job>_3_log.err`` beside task 0's ``<job>_0_log.err``), where it exists."""
    m = re.match(r"rank (\d+): ", reason or "")
    if not m or m.group(1) == "0":
        return log_path
    return sibling_task_log(log_path, m.group(1)) or log_path


def point_view(p: dict, now: float, eta: Optional[PointETA] = None, values: Optional[dict] = None) -> dict[str, Any]:
    """One point as status shows it (and ``--json`` gives it): its effective state, why,
    elapsed time, progress (iteration i of n, rate in iterations/s, seconds left: running,
    until it ends; not started, how long it will take once it starts) and its varying values."""
    reason = p.get("reason")
    log_path = p.get("log_path")
    if p["state"] in FAILED_STATES and log_path:
        log_path = failing_log(reason, log_path)
        reason = f"{reason or p['state']} (log: {log_path})"
    eta = eta or PointETA()
    return {
        "idx": p["idx"], "platform": p["platform"], "gpus": p["gpus"], "nodes": p.get("nodes"),
        "trainer": p["trainer"], "experiment": p["experiment"], "dataset": point_dataset(p), "repeat": p["repeat"],
        "values": dict(values or {}),
        "state": p["state"], "job_id": p.get("job_id"), "attempts": p.get("attempts", 0), "elapsed_s": _elapsed(p, now),
        "iteration": eta.iteration, "iterations": eta.total, "rate_it_s": eta.rate, "eta_s": eta.remaining_s,
        "eta_source": eta.source, "stalled_s": eta.stalled_s, "reason": reason, "log_path": log_path,
    }


def point_image(p: dict) -> Optional[str]:
    """The container image a point runs in, as planned (``container.images`` resolved into
    its stored config: campaign.catalogue.container.point_image); None without one."""
    config = p.get("config")
    container = config.get("container") if isinstance(config, dict) else None
    if not isinstance(container, dict) or container.get("runtime") in (None, "none"):
        return None
    image = container.get("image")
    return image if isinstance(image, str) else None


def point_dataset(p: dict) -> str:
    """The dataset a point trains on, worded from its stored config (name, crop, channels
    where not 3, classes; a study's stand-in says whose shapes it keeps:
    campaign.catalogue.dataset_label); the store's dataset name where no config was stored."""
    config = p.get("config")
    if not isinstance(config, dict) or not isinstance(config.get("dataset"), dict):
        return str(p.get("dataset") or "-")
    overrides = p.get("overrides")
    return dataset_label(config, overrides if isinstance(overrides, list) else ())


def summary_line(views: list[dict]) -> str:
    counts = Counter(v["state"] for v in views)
    order = ["completed", "running", "pending", "registered", "waiting", SPOOLED, *FAILED_STATES, "requeued"]
    parts = [f"{counts[s]} {s}" for s in order if counts.get(s)]
    return f"{len(views)} point(s): " + ", ".join(parts)


def clock(at: float, now: float) -> str:
    """A time of day (``14:05:09``), with the date when it is not today's."""
    t = time.localtime(at)
    return time.strftime("%H:%M:%S" if time.localtime(now)[:3] == t[:3] else "%b %d %H:%M:%S", t)


def eta_text(ceta: CampaignETA, now: float) -> str:
    """``ETA 14:05:09 (in 3:12)``; with a scheduler's queue, a lower bound saying so."""
    if ceta.running + ceta.pending == 0:
        return "every point has ended"
    if ceta.ends_at is None:
        return f"ETA unknown ({ceta.unknown} point(s) without an estimate or a heartbeat yet)"
    text = f"ETA {clock(ceta.ends_at, now)} (in {fmt_duration(ceta.ends_at - now)})"
    return text + (", not counting the queue's wait" if ceta.queue else "")


def progress_line(ceta: CampaignETA, now: float) -> str:
    """The campaign's bar: ``[#######.................] 1/2 done, 1 running, 0 pending; ETA ...``."""
    filled = int(round(ceta.fraction * BAR_WIDTH))
    bar = "#" * filled + "." * (BAR_WIDTH - filled)
    total = ceta.done + ceta.running + ceta.pending
    if ceta.done == total:
        return f"[{bar}] {ceta.done}/{total} done; every point has ended"
    return (f"[{bar}] {ceta.done}/{total} done, {ceta.running} running, {ceta.pending} pending; "
            f"{eta_text(ceta, now)}")


def _progress(v: dict) -> str:
    if v["iteration"] is None or not v["iterations"] or v["state"] != "running":
        return "-"
    return f"{v['iteration']}/{v['iterations']}"


def _eta_cell(v: dict) -> str:
    if v["stalled_s"] is not None:
        return f"stalled? no heartbeat for {fmt_duration(v['stalled_s'])}"
    if v["eta_s"] is None or is_final(v["state"]):
        return "-"
    return fmt_duration(v["eta_s"]) if v["state"] == "running" else f"~{fmt_duration(v['eta_s'])}"


def render(campaign: dict, views: list[dict], ceta: Optional[CampaignETA] = None, now: Optional[float] = None) -> str:
    """The status text: a head line (the campaign, what its points share), one row per
    point, the states' counts and the progress bar with the ETA."""
    now = time.time() if now is None else now
    names = list(dict.fromkeys(k for v in views for k in v["values"]))  # in the sweep's order
    shown = [a for a in SHARED_AXES if len({v[a] for v in views}) > 1]
    shared = [f"{a}={views[0][a]}" for a in SHARED_AXES if a not in shown and views]
    extra = (["nodes"] if len({v["nodes"] for v in views}) > 1 else []) + \
            (["repeat"] if any(v["repeat"] for v in views) else []) + \
            (["attempts"] if any((v.get("attempts") or 0) > 1 for v in views) else [])  # resubmitted or requeued
    headers = ["#", "platform", "gpus", *extra, *shown, *names, "state", "progress", "it/s", "ETA", "elapsed", "job",
               "reason"]
    rows = []
    for v in views:
        rate = f"{v['rate_it_s']:.3g}" if v["rate_it_s"] and v["state"] == "running" else "-"
        cells = [v["idx"], v["platform"], v["gpus"], *(v[k] for k in extra), *(v[k] for k in shown),
                 *(v["values"].get(k) or "-" for k in names), v["state"], _progress(v), rate, _eta_cell(v),
                 _fmt_s(v["elapsed_s"]), v["job_id"] or "-", v["reason"] or ""]
        rows.append([printable(c) for c in cells])
    head = f"campaign {campaign['id']}" + (f" ({campaign['name']})" if campaign.get("name") else "")
    origin = launched_from(campaign)  # campaign submit FILE: the saved plan it sent
    head += f" [{origin}]" if origin else ""
    if shared:
        head += ": " + " ".join(shared)
    table = tables.render(rows, headers=headers)
    out = [printable(head), table, summary_line(views)]
    if ceta is not None:
        out.append(progress_line(ceta, now))
    return "\n".join(out)


class Follower:
    """One campaign's snapshots, refreshed: the store's points (effective states), their
    heartbeats and the ETA; the store's previous rates are read once."""

    def __init__(self, store: Any, campaign: dict):
        self.store, self.campaign = store, campaign
        self._measured: Optional[dict] = None

    def _measured_rates(self, points: list[dict]) -> dict:
        if self._measured is None:
            from campaign.observe.measured import measured_rates

            waiting = [p for p in points if p["state"] in NOT_STARTED]
            self._measured = measured_rates(self.store, {p["platform"] for p in waiting},
                                            {p["trainer"] for p in waiting}) if waiting else {}
        return self._measured

    def snapshot(self, now: Optional[float] = None) -> tuple[list[dict], CampaignETA, list[str]]:
        """(the point views, the campaign's ETA, warnings) now."""
        points, warnings = effective_points(self.store, self.campaign)
        now = time.time() if now is None else now
        unfinished = any(not is_final(p["state"]) for p in points)
        beats, unread = read_beats(self.store, [p.get("attempt_id") for p in points])
        warnings = warnings + [f"point #{p['idx']} (id {p['id']}) of campaign {printable(self.campaign['id'])}: its "
                               f"heartbeats are not read: {unread[p['attempt_id']]}; shown without its progress"
                               for p in points if p.get("attempt_id") in unread]
        etas, _ = annotate(points, beats, now=now, measured=self._measured_rates(points) if unfinished else {})
        # a swept dataset=A,B is the dataset column (worded with its crop), not an override column too
        _, values = varying([p.get("overrides") for p in points], skip=(*AXES, "dataset"))
        images = [point_image(p) for p in points]
        if len(set(images)) > 1:  # container.images: a column only where points run in different images
            values = [{**v, "image": image or ""} for v, image in zip(values, images)]
        views = [point_view(p, now, etas.get(p["id"]), vals) for p, vals in zip(points, values)]
        return views, campaign_eta(points, etas, now=now, is_final=is_final), warnings


def snapshot(store: Any, campaign: dict, now: Optional[float] = None) -> tuple[list[dict], CampaignETA, list[str]]:
    """One snapshot of ``campaign`` (``Follower.snapshot``)."""
    return Follower(store, campaign).snapshot(now)


def watch_status(ref: Optional[str], *, store_url: str, interval: float = 2.0) -> int:
    """Redraw the status table and progress bar every ``interval`` seconds until every
    point is final.

    Exit status: 0 (Ctrl-C: ``Interrupted``, saying that the jobs go on (``jobs_go_on``),
    reaches the CLI, which exits 130)."""
    tty = sys.stdout.isatty()
    with open_store(store_url, readonly=True) as store:
        campaign = find_campaign_noted(store, ref)
        follower = Follower(store, campaign)
        with interrupt.saying(jobs_go_on(campaign["id"])):
            while True:
                now = time.time()
                views, ceta, warnings = follower.snapshot(now)
                text = render(campaign, views, ceta, now)
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
                interrupt.sleep(interval)


def jobs_go_on(cid: str) -> str:
    """What Ctrl-C in ``status --wait``/``--watch`` says: it stops the following, not the jobs."""
    return printable(f"interrupted (Ctrl-C): campaign {cid}'s jobs go on running (campaign status {cid} "
                     f"follows them again; campaign cancel {cid} stops them)")


def _live(views: list[dict], ceta: CampaignETA, waited: float, now: float) -> str:
    pending = sum(1 for v in views if not is_final(v["state"]))
    return f"waiting for {pending} of {len(views)} point(s) [{_fmt_s(waited)}] {summary_line(views)}; {eta_text(ceta, now)}"


def final_line(views: list[dict], waited: float, timed_out: bool, ceta: CampaignETA, now: float) -> str:
    """The one line a ``--wait`` ends with."""
    if timed_out:
        left = sum(1 for v in views if not is_final(v["state"]))
        return (f"timed out after {_fmt_s(waited)}: {left} of {len(views)} point(s) not finished "
                f"({summary_line(views).split(': ', 1)[1]}); {eta_text(ceta, now)}")
    bad = sum(1 for v in views if v["state"] != "completed")
    verdict = "every point completed" if not bad else f"{bad} of {len(views)} point(s) did not complete"
    return f"waited {_fmt_s(waited)}: {verdict} ({summary_line(views).split(': ', 1)[1]})"


def _follow(follower: "Follower", campaign: dict, wait: bool, interval: float, timeout: Optional[float],
            submit: Optional[Callable[[str], list[str]]]) -> tuple:
    """``show_status``'s loop: one snapshot, or (``wait``) snapshots until every point is
    final, the timeout runs out or only points waiting for room are left; returns (views,
    ETA, warnings, the last snapshot's time, the start, whether it timed out)."""
    start = time.time()
    tty = sys.stderr.isatty()
    last_line = None
    timed_out = False
    while True:
        now = time.time()
        views, ceta, warnings = follower.snapshot(now)
        pending = [v for v in views if not is_final(v["state"])]
        lines = submit(campaign["id"]) if submit is not None and wait else []
        for line in lines:
            print(printable(f"{chr(13) if tty else ''}{line}"), file=sys.stderr, flush=True)
        if lines:  # points went (or were held back): look again before deciding anything
            continue
        stuck = submit is None and pending and all(v["state"] == "waiting" for v in pending)
        if not wait or not pending:
            break
        if stuck:
            print(f"{chr(10) if tty else ''}{len(pending)} point(s) wait for room in the scheduler: campaign "
                  f"resume {campaign['id']} submits them (or campaign status --wait --submit)", file=sys.stderr)
            break
        if timeout is not None and now - start > timeout:
            timed_out = True
            break
        counts = summary_line(views)
        if tty:  # one live line
            print("\r" + _live(views, ceta, now - start, now) + "\033[K", end="", file=sys.stderr, flush=True)
        elif counts != last_line:  # a log: one line per change
            print(f"[{_fmt_s(now - start)}] {counts}; {eta_text(ceta, now)}", file=sys.stderr, flush=True)
        last_line = counts
        interrupt.sleep(interval)
    if wait and tty and last_line is not None:
        print(file=sys.stderr)
    return views, ceta, warnings, now, start, timed_out


def show_status(ref: Optional[str], *, store_url: str, as_json: bool = False, wait: bool = False,
                interval: float = 2.0, timeout: Optional[float] = None,
                submit: Optional[Callable[[str], list[str]]] = None) -> int:
    """Print the campaign's status; with ``wait`` block until every point is final.

    ``submit`` (``--wait --submit``): called with the campaign id at every refresh, it
    submits what the campaign has due (the next wave, automatic retries) and returns a
    line per point; without it, a wait ends when only points waiting for room are left.

    Exit status: 0; with ``wait`` 1 when a point did not complete, ``EXIT_TIMEOUT`` (124)
    when ``timeout`` ran out with points unfinished. A wait ends with one line on stderr.
    """
    with open_store(store_url, readonly=True) as store:
        campaign = find_campaign_noted(store, ref)
        follower = Follower(store, campaign)
        with interrupt.saying(jobs_go_on(campaign["id"])) if wait else contextlib.nullcontext():
            views, ceta, warnings, now, start, timed_out = _follow(follower, campaign, wait, interval, timeout, submit)
    for w in warnings:
        print(f"warning: {printable(w)}", file=sys.stderr)
    if as_json:  # json escapes control characters itself
        counts = Counter(v["state"] for v in views)
        print(json.dumps({"campaign": campaign, "points": views, "counts": dict(counts), "progress": json_safe(ceta)},
                         indent=2, default=str))
    else:
        print(render(campaign, views, ceta, now))
    if wait:
        print(printable(final_line(views, time.time() - start, timed_out, ceta, now)), file=sys.stderr)
        if timed_out:
            return EXIT_TIMEOUT
        if any(v["state"] != "completed" for v in views):
            return 1
    return 0
