"""``campaign resume [CAMPAIGN] [--state S,...] [--dry-run] [KEY=VALUE ...]``: run again,
as new attempts of the same points in the same campaign, every point that did not
complete: failed, timeout, cancelled, out of memory, node failure, preempted, lost,
refused at submit (``rejected``) or still ``waiting`` for room. Completed points and
those still running (or pending, requeued, or whose results wait in spool files) are
left alone. Overrides apply to the resubmitted points only and are recorded on their
attempt. Campaigns larger than the scheduler's caps go out in waves (waves.py).

The same machinery submits what a campaign has due without a user asking
(``submit_due``): the next wave once room frees, and points that failed for a reason
in their ``retry_on`` within ``max_retries`` (``campaign status --wait --submit``, and a
launch that waits).

A store may be written by others, so every one of these rebuilds a point only once it is
known to be what its launcher stored (``trusted``, through ``replan``): the point's
signature with the user's own key (campaign/common/signing.py), its config's ``results_dir``
the campaign's; and it hands a job no value the store holds masked (a secret: given
again with the resume). One point that fails refuses the whole resubmission.
"""

from __future__ import annotations

import shlex
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Sequence

from campaign.backends import Submitted
from campaign.common import table as tables
from campaign.common.errors import ConfigError, LaunchIncomplete
from campaign.launch.plan import PointPlan
from campaign.common.redact import SECRET, redact
from campaign.launch.waves import in_flight
from campaign.observe.state import FAILED_STATES

RESUMABLE = FAILED_STATES + ("waiting",)
SHOWN = 3


@dataclass
class Resubmission:
    """What one resume (or one ``submit_due``) did."""

    campaign_id: str
    store_url: str
    rows: list[dict] = field(default_factory=list)  # the points chosen (effective states before)
    plans: list[PointPlan] = field(default_factory=list)
    submitted: list[Submitted] = field(default_factory=list)  # one per row
    left: Counter = field(default_factory=Counter)  # states of the points left alone
    skipped: int = 0  # chosen points another command took meanwhile
    dry_run: bool = False  # nothing was submitted (``submitted`` says which would wait)
    notes: list[str] = field(default_factory=list)  # a dry run: what this machine lacks (preflight's notes)


def parse_states(text: Optional[str]) -> Optional[list[str]]:
    """``--state failed,timeout`` -> the states, each one a resume can take."""
    if not text:
        return None
    states = [s.strip() for s in text.split(",") if s.strip()]
    bad = [s for s in states if s not in RESUMABLE]
    if bad or not states:
        raise ConfigError(f"--state {text!r}: {bad[0] if bad else 'empty'} is not a state a resume reruns; "
                          f"valid: {', '.join(RESUMABLE)}")
    return states


def choose(points: Sequence[dict], states: Optional[Sequence[str]] = None) -> tuple[list[dict], Counter]:
    """The points to rerun (effective state resumable, and in ``states`` if given) and the
    count of the others by state."""
    chosen, left = [], Counter()
    for p in points:
        if p["state"] in RESUMABLE and (states is None or p["state"] in states):
            chosen.append(p)
        else:
            left[p["state"]] += 1
    return chosen, left


UNSIGNED = ("its stored config is not signed with your key (changed in the store since launch, launched by another "
            "user, or launched before campaign signed configs); nothing was submitted: launch it anew")


def trusted(rows: Sequence[dict], camp: dict) -> None:
    """Refuse (``ConfigError``, one line naming the point and why) unless every row is what
    its launcher stored: its config's ``results_dir`` the campaign's, and its signature
    (campaign/common/signing.py) that of the row and the campaign with the user's own key.
    Reads nothing the rows name: nothing of them is imported or planned before this."""
    from campaign.common.bounded import is_unreadable
    from campaign.common.signing import key_path, signing_key, verify

    if not rows:
        return
    cid, results = camp["id"], camp.get("results_dir")
    key = signing_key()
    for r in rows:
        where = f"point #{r['idx']}"
        for k in ("config", "overrides"):
            if is_unreadable(r.get(k)):  # (its signature could not match either: say why)
                verb = "are" if k == "overrides" else "is"
                raise ConfigError(f"{where}: its stored {k} {verb} unreadable ({r[k].reason}): changed in the "
                                  "store since launch; nothing was submitted: launch it anew")
        config = r.get("config")
        stored = config.get("results_dir") if isinstance(config, dict) else None
        if stored is not None and not _same_folder(stored, results):
            raise ConfigError(f"{where}: its stored config's results_dir ({stored}) is not its campaign's ({results}): "
                              "changed in the store since launch; nothing was submitted: launch it anew")
        if not r.get("signature"):
            raise ConfigError(f"{where}: {UNSIGNED}")
        if key is None:
            raise ConfigError(f"{where}: its stored config cannot be checked: you have no signing key ({key_path()}, "
                              "made by your first launch), so another user or account launched it; nothing was "
                              "submitted: launch it anew")
        if not verify(key, cid, results, r):
            raise ConfigError(f"{where}: {UNSIGNED}")


def _same_folder(stored: Any, campaign_dir: Optional[str]) -> bool:
    """Whether a point's stored ``results_dir`` is its campaign's: the same path (what a
    launch stores), or a relative one the campaign's absolute path ends with (a point
    stored by hand, or by an older launch, as given on its command line)."""
    if campaign_dir is None:  # a campaign row without one: the signature alone covers the point
        return True
    if not isinstance(stored, str):
        return False
    if stored == campaign_dir:
        return True
    rel = Path(stored)
    return not rel.is_absolute() and ".." not in rel.parts and bool(rel.parts) and \
        Path(campaign_dir).parts[-len(rel.parts):] == rel.parts


def masked(value: Any, path: str = "") -> Optional[str]:
    """The key path of the first string in ``value`` that holds a masked secret
    (``campaign.common.redact.SECRET``), or None."""
    if isinstance(value, dict):
        for k, v in value.items():
            found = masked(v, f"{path}.{k}" if path else str(k))
            if found:
                return found
    elif isinstance(value, (list, tuple)):
        for v in value:  # a list is given again whole: its key names it
            if masked(v, path):
                return path
    elif isinstance(value, str) and SECRET in value:
        return path
    return None


def replan(rows: Sequence[dict], store_url: str, camp: dict,
           overrides: Sequence[tuple[str, Any]] = ()) -> list[PointPlan]:
    """The stored points planned again (with ``overrides``), once each is ``trusted``, and
    checked that they are still the same points (schedule unchanged) and hand their job
    no masked secret. The job folder is the campaign's ``results_dir``."""
    from campaign.launch.overrides import apply_overrides
    from campaign.launch.plan import plan_point

    trusted(rows, camp)
    results_dir = str(camp.get("results_dir") or "results")
    plans = []
    for r in rows:
        try:
            config = apply_overrides(dict(r["config"] or {}), overrides)
            config["store"] = dict(config["store"], url=store_url)  # the stored one is redacted
            config["results_dir"] = results_dir
            p = plan_point(config, r["idx"], list(r.get("overrides") or []), repeat=r.get("repeat") or 0)
        except ConfigError as exc:
            raise ConfigError(f"point #{r['idx']}: {exc}") from None
        except (KeyError, TypeError, ValueError) as exc:  # a stored config this campaign cannot read
            raise ConfigError(f"point #{r['idx']}: its stored config cannot be planned again ({type(exc).__name__}: "
                              f"{exc}); launch the point anew") from None
        for what, was, now in (("images per GPU", r.get("batch_per_gpu"), p.batch_per_gpu),
                               ("iterations", r.get("iterations"), p.iterations)):
            if was is not None and was != now:
                raise ConfigError(f"point #{r['idx']}: the overrides change its {what} ({was} -> {now}), which makes "
                                  "another point: launch a campaign for it")
        hidden = masked(p.config)
        if hidden:
            raise ConfigError(f"point #{r['idx']}: {hidden} is stored masked ({SECRET}; secrets are never stored in "
                              f"clear), and its job would get that; nothing was submitted: give it again: "
                              f"campaign resume {camp['id']} {hidden}=...")
        plans.append(p)
    return plans


def resubmit(store: Any, camp: dict, rows: Sequence[dict], plans: Sequence[PointPlan], *, store_url: str,
             origin: str, overrides: Sequence[str] = (), flying: Optional[dict[str, int]] = None) -> Resubmission:
    """Submit the wave of ``rows`` the scheduler has room for and keep the rest
    ``waiting``, each point taken first (``Store.claim``: a point another command took
    meanwhile is skipped); a point already waiting that still has no room is left as it
    is (nothing written). ``flying``: the campaign's points in their scheduler now, per
    platform (``waves.in_flight``), against ``platform.max_submit``. Returns what happened."""
    from campaign.launch.submit import job_python, submit_registered
    from campaign.launch.waves import wave_for
    from campaign.common.redact import redact_obj
    from campaign.common.signing import sign, signing_key

    key = signing_key() if overrides else None  # trusted() found it: the points are signed with it
    out = Resubmission(camp["id"], store_url)
    wave = wave_for(plans, flying)
    by_id: dict[int, Submitted] = {}
    now: list[int] = []
    # Every point to take is claimed in one transaction, and those that wait are held in one
    # per reason (a resume of 10,000 points made 20,000 transactions); each is still taken alone.
    stays = [wave.later.get(i) is not None and r["state"] == "waiting" for i, r in enumerate(rows)]
    claimed = iter(store.claim_many([r for r, stay in zip(rows, stays) if not stay]))
    held: dict[str, list[int]] = {}
    for i, (r, p) in enumerate(zip(rows, plans)):
        why = wave.later.get(i)
        if stays[i]:
            out.rows.append(r)
            out.plans.append(p)
            by_id[r["id"]] = Submitted(r["id"], None, waiting=why)
            continue
        if not next(claimed):
            out.skipped += 1
            continue
        out.rows.append(r)
        out.plans.append(p)
        if overrides:  # the point's new config, signed as it is stored
            stored = redact_obj(p.config)
            store.update_config(r["id"], stored, sign(key, camp["id"], camp.get("results_dir"), dict(r, config=stored))
                                if key is not None else None)
        if why is not None:
            held.setdefault(why, []).append(r["id"])
            by_id[r["id"]] = Submitted(r["id"], None, waiting=why)
        else:
            now.append(len(out.rows) - 1)
    for why, ids_held in held.items():
        store.hold(ids_held, why, origin=origin, overrides=overrides)
    if now:
        plans_now, ids = [out.plans[i] for i in now], [out.rows[i]["id"] for i in now]
        from campaign.common.jobfolder import job_folder

        results = Path(str(camp.get("results_dir") or plans_now[0].config["results_dir"]))
        folder = job_folder(results, camp["id"])  # a stored id that is not one campaign writes: StoreError
        for s in submit_registered(store, plans_now, ids, camp["id"], store_url, folder, job_python(plans_now),
                                   origin=origin, overrides=overrides):
            by_id[s.point_id] = s
    out.submitted = [by_id[r["id"]] for r in out.rows]
    return out


def resume(ref: Optional[str], store_url: str, *, states: Optional[Sequence[str]] = None, dry_run: bool = False,
           overrides: Sequence[str] = ()) -> Resubmission:
    """``campaign resume``: choose, plan, check and resubmit (module docstring); prints
    what it resubmits and returns at once."""
    from campaign.launch.overrides import parse_overrides
    from campaign.launch.preflight import preflight
    from campaign.launch.submit import absolute_store_url, private_files
    from campaign.observe.state import effective_points
    from campaign.store import open_store
    from campaign.store.resolve import campaign_for_write

    parsed = parse_overrides(overrides)
    store_url = absolute_store_url(store_url)
    # Read-only until there is something to submit: a resume with nothing to do (or a
    # dry run) leaves the store as it was, an older schema version included.
    with open_store(store_url, readonly=True) as store:
        camp = campaign_for_write(store, ref, "resume")  # a doubtful reference: refused, naming the ids
        points, warnings = effective_points(store, camp)
    for w in warnings:
        print(f"warning: {w}", file=sys.stderr)
    chosen, left = choose(points, states)
    plans = replan(chosen, store_url, camp, parsed) if chosen else []
    # a dry run writes nothing and needs no write access: what a resume would be refused
    # here for (a read-only store, no sbatch) are notes, as a launch's dry run says them
    notes = preflight(plans, dry_run=dry_run) if plans else []
    if dry_run or not chosen:
        out = Resubmission(camp["id"], store_url, chosen, plans, [], left, dry_run=dry_run, notes=notes)
        if plans:  # which would go now and which would wait for room
            from campaign.launch.waves import wave_for

            wave = wave_for(plans, in_flight(points))
            out.submitted = [Submitted(r["id"], None, waiting=wave.later.get(i)) for i, r in enumerate(chosen)]
        print_plan(out, dry_run=dry_run, overrides=overrides)
        return out
    with private_files(), open_store(store_url) as store:
        out = resubmit(store, camp, chosen, plans, store_url=store_url, origin="resume",
                       overrides=[redact(o) for o in overrides], flying=in_flight(points))
        out.left = left
    print_plan(out, overrides=overrides)
    return out


def due(points: Sequence[dict]) -> tuple[list[dict], list[dict]]:
    """What a campaign has due without a user asking: (points waiting for room, points
    that ended in one of their ``retry_on`` states with automatic retries left)."""
    waiting = [p for p in points if p["state"] == "waiting"]
    retry = []
    for p in points:
        config = p.get("config") if isinstance(p.get("config"), dict) else {}
        try:  # what the store says, before it is trusted (replan): a value that is no count is none
            allowed = int(config.get("max_retries") or 0)
            retry_on = [str(s) for s in config.get("retry_on") or ()]
        except (TypeError, ValueError):
            continue
        if p["state"] in retry_on and int(p.get("retries") or 0) < allowed:
            retry.append(p)
    return waiting, retry


def submit_due(store_url: str, campaign_id: str) -> list[Resubmission]:
    """Submit what ``campaign_id`` has due (``due``): automatic retries, then the next
    wave. Opens the store for writing only when something is due."""
    from campaign.launch.submit import absolute_store_url, private_files
    from campaign.observe.state import effective_points
    from campaign.store import open_store

    store_url = absolute_store_url(store_url)
    with open_store(store_url, readonly=True) as store:
        camp = store.resolve_campaign(campaign_id)
        waiting, retry = due(effective_points(store, camp)[0])
    if not waiting and not retry:
        return []
    trusted(retry + waiting, camp)  # refused before the store is opened to write: nothing written
    done = []
    with private_files(), open_store(store_url) as store:
        points = effective_points(store, camp)[0]  # again, now that it may write
        waiting, retry = due(points)
        flying = in_flight(points)
        # every point planned (and trusted) before any is submitted; a waiting point keeps
        # the attempt its launch or resume opened (and its origin)
        groups = [(rows, replan(rows, store_url, camp), origin)
                  for rows, origin in ((retry, "retry"), (waiting, "resume")) if rows]
        for rows, plans, origin in groups:
            out = resubmit(store, camp, rows, plans, store_url=store_url, origin=origin, flying=flying)
            done.append(out)
            for r, s in zip(out.rows, out.submitted):  # what went now is in flight for the next rows
                if s.job_id:
                    flying[r["platform"]] = flying.get(r["platform"], 0) + 1
    return done


def due_lines(done: Sequence[Resubmission]) -> list[str]:
    """One line per point ``submit_due`` submitted, refused, or held back again after a retry."""
    lines = []
    for out in done:
        for r, s in zip(out.rows, out.submitted):
            retried = r["state"] != "waiting"
            what = (f"{r['state']}: automatic retry {int(r.get('retries') or 0) + 1} of "
                    f"{(r.get('config') or {}).get('max_retries')}" if retried else "waited for room")
            if s.job_id:
                lines.append(f"#{r['idx']} {what}: submitted, job {s.job_id}")
            elif s.waiting:
                if retried:  # (a point that waited and still waits says nothing new)
                    lines.append(f"#{r['idx']} {what}: {s.waiting}")
            else:
                lines.append(f"#{r['idx']} {what}: rejected: {redact(s.error)}")
    return lines


def print_plan(out: Resubmission, *, dry_run: bool = False, overrides: Sequence[str] = ()) -> None:
    """What a resume resubmits (or would), one row per point, and the commands that follow it."""
    from campaign.common.text import printable

    cid = out.campaign_id
    kept = ", ".join(f"{n} {s}" for s, n in sorted(out.left.items()))
    if not out.rows:
        print(printable(f"campaign {cid}: nothing to resume" + (f" ({kept})" if kept else "")))
        return
    rows = []
    for i, (r, p) in enumerate(zip(out.rows, out.plans)):
        s = out.submitted[i] if i < len(out.submitted) else None
        if dry_run:
            now = "would wait for room" if s is not None and s.waiting else "would go"
        else:
            now = "-" if s is None else (f"job {s.job_id}" if s.job_id else
                                         ("waiting for room" if s.waiting else f"rejected: {redact(s.error)}"))
        rows.append([printable(c) for c in (f"#{r['idx']}", p.platform, p.gpus, p.config["trainer"]["name"],
                                              r["state"], (r.get("reason") or "")[:60], now)])
    head = "would resubmit" if dry_run else "resubmitted"
    went = sum(1 for s in out.submitted if s.job_id)
    print(printable(f"campaign {cid}: {head} {len(out.rows)} point(s) as new attempts"
                    + ("" if dry_run else f" ({went} submitted)")
                    + (f"; with {shlex.join(overrides)}" if overrides else "")
                    + (f"; left alone: {kept}" if kept else "")))
    print(tables.render(rows, headers=["point", "platform", "gpus", "trainer", "was", "why", "now"]))
    if out.skipped:
        print(f"({out.skipped} point(s) were taken by another command meanwhile)")
    for n in out.notes:
        print(printable(f"note: would be refused here: {redact(n)}"))
    if not dry_run:
        print(f"\nfollow it:  campaign status {cid} --wait")
        print(f"attempts:   campaign harvest {cid} --table attempts")
    print(flush=True)


def check_resubmitted(out: Resubmission) -> None:
    """``LaunchIncomplete`` (exit 3) when a resubmitted point was refused: one line naming
    them and the command that tries again."""
    refused = [(r, s) for r, s in zip(out.rows, out.submitted) if not s.job_id and not s.waiting]
    if not refused or out.dry_run:
        return
    named = "; ".join(f"#{r['idx']}: {redact(s.error)}" for r, s in refused[:SHOWN])
    more = f"; and {len(refused) - SHOWN} more" if len(refused) > SHOWN else ""
    raise LaunchIncomplete(f"campaign {out.campaign_id}: {len(refused)} of {len(out.rows)} point(s) were not submitted "
                           f"({named}{more}); once the cause is fixed: campaign resume {out.campaign_id}")
