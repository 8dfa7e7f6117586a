"""``campaign ingest``: fold into the store what jobs left outside it, exactly once.

A job that cannot reach the store within its busy timeout appends its operations
to ``<results>/jobs/<campaign>/spool/*.jsonl`` (trainers.writer). Ingest replays each
file in one transaction and then renames it ``*.jsonl.ingested``; the operations are
idempotent, so a file replayed twice (a crash between commit and rename) changes
nothing. A file that is not a well-formed spool (a line that is not an operation, an
operation the store refuses) is renamed ``*.jsonl.bad`` with a warning, and the
other files are still ingested.

Ingest also records the final states the executors observe for points the store
still has unfinished (a job killed from outside never reports itself): read commands
derive them every time (campaign.state) and never write; this keeps them once the
scheduler has forgotten the job.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Iterable, Optional

from sqlalchemy.exc import DataError, DBAPIError, IntegrityError, SQLAlchemyError, StatementError

from campaign.errors import StoreError, one_line
from campaign.store import Store, open_store
from campaign.text import printable
from campaign_sql.ops import ROW_TABLES, AttemptKey, apply_op

OPS = ("start", "rows", "rank", "finish")


class MalformedSpool(ValueError):
    """A spool file that is not what trainers.writer writes."""


def spool_dir(campaign: dict) -> Optional[Path]:
    if not campaign.get("results_dir"):
        return None
    return Path(campaign["results_dir"]) / "jobs" / campaign["id"] / "spool"


def _check_record(r: object, where: str) -> dict:
    """One operation as trainers.writer writes it, or ``MalformedSpool``."""
    if not isinstance(r, dict) or r.get("op") not in OPS:
        raise MalformedSpool(f"{where}: not a spool operation (op one of {', '.join(OPS)})")
    for key in ("point_id", "attempt_no"):
        if not isinstance(r.get(key), int) or isinstance(r.get(key), bool):
            raise MalformedSpool(f"{where}: {key} is not an integer")
    payload = r.get("payload")
    if not isinstance(payload, dict):
        raise MalformedSpool(f"{where}: payload is not an object")
    if r["op"] == "rows" and (payload.get("table") not in ROW_TABLES or not isinstance(payload.get("rows"), list)):
        raise MalformedSpool(f"{where}: rows of an unknown table")
    if r["op"] == "rank" and not isinstance(payload.get("tables"), dict):
        raise MalformedSpool(f"{where}: rank without tables")
    if r["op"] == "finish" and not isinstance(payload.get("state"), str):
        raise MalformedSpool(f"{where}: finish without a state")
    return r


def read_spool(path: Path) -> list[dict]:
    """The operations of one spool file. Its last line may be cut short (a job killed
    while writing it: what follows never happened); any other bad line makes the whole
    file ``MalformedSpool``."""
    try:
        lines = path.read_bytes().decode("utf-8").splitlines()
    except UnicodeDecodeError as exc:
        raise MalformedSpool(f"not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    out = []
    numbered = [(i, line) for i, line in enumerate(lines, 1) if line.strip()]
    for n, (i, line) in enumerate(numbered):
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            if n == len(numbered) - 1:
                break
            raise MalformedSpool(f"line {i} is not JSON") from None
        out.append(_check_record(record, f"line {i}"))
    return out


def _quarantine(path: Path, why: str) -> None:
    bad = path.with_name(path.name + ".bad")
    try:
        path.rename(bad)
    except OSError as exc:
        raise StoreError(f"cannot quarantine malformed spool file {path}: {exc.strerror}") from exc
    print(printable(f"warning: {path}: {why}; renamed to {bad.name}, its operations were not applied"),
          file=sys.stderr)


def ingest_files(store: Store, files: Iterable[Path]) -> tuple[int, int]:
    """Replay spool files; returns (files, operations) ingested. Malformed files are
    quarantined (``*.bad``) with a warning; a store that cannot be written stops it."""
    n_files = n_ops = 0
    for path in sorted(files):
        try:
            records = read_spool(path)
        except MalformedSpool as exc:
            _quarantine(path, str(exc))
            continue
        except OSError as exc:
            raise StoreError(f"cannot read spool file {path}: {exc.strerror}") from exc
        try:
            with store.engine.begin() as conn:
                cache: dict = {}
                for r in records:
                    apply_op(conn, r["op"], AttemptKey(r["point_id"], r["attempt_no"]), r["payload"], cache)
        except (IntegrityError, DataError) as exc:  # rows the store refuses: the file's fault
            _quarantine(path, f"the store refuses its operations ({one_line(exc.orig)})")
            continue
        except DBAPIError as exc:  # the store's own trouble (locked, read-only, unreachable): stop
            raise StoreError(f"cannot ingest {path}: {one_line(exc.orig)}{_read_only_hint(exc)}") from exc
        except (StatementError, TypeError, ValueError, KeyError, AttributeError) as exc:  # values that fit no column
            _quarantine(path, f"an operation does not fit the store ({type(exc).__name__}: {one_line(exc)})")
            continue
        except SQLAlchemyError as exc:
            raise StoreError(f"cannot ingest {path}: {one_line(exc)}") from exc
        try:
            path.rename(path.with_name(path.name + ".ingested"))
        except OSError as exc:  # ingested (idempotent), but the next ingest will replay it
            raise StoreError(f"ingested {path} but cannot rename it: {exc.strerror}") from exc
        n_files += 1
        n_ops += len(records)
    return n_files, n_ops


def _read_only_hint(exc: DBAPIError) -> str:
    return "; the store is read-only to you" if "readonly" in str(exc.orig).lower().replace("-", "") else ""


def ingest_campaigns(store: Store, campaigns: Iterable[dict]) -> tuple[int, int]:
    """Replay the campaigns' spool files (``ingest_files``)."""
    return ingest_files(store, _spool_files(campaigns))


def observed_finals(store: Store, campaigns: Iterable[dict]) -> list[dict]:
    """The points the store has unfinished whose executor says they ended (campaign.state)."""
    from campaign.state import SPOOLED, effective_points, is_final
    from campaign_sql.schema import ACTIVE_STATES

    out = []
    for c in campaigns:
        points, _ = effective_points(store, c)
        out += [p for p in points if p["stored_state"] in ACTIVE_STATES and is_final(p["state"]) and p["state"] != SPOOLED]
    return out


def record_observed(store: Store, finals: Iterable[dict]) -> int:
    """Write those final states; returns how many points moved."""
    moved = 0
    for p in finals:
        extra = {k: p[k] for k in ("started_at", "ended_at") if p.get(k)}
        moved += store.set_state(p["id"], p["state"], p["reason"], **extra)
    return moved


def _spool_files(campaigns: Iterable[dict]) -> list[Path]:
    files: list[Path] = []
    for c in campaigns:
        d = spool_dir(c)
        if d is not None and d.is_dir():
            files += list(d.glob("*.jsonl"))
    return files


def ingest(ref: Optional[str], *, store_url: str, all_campaigns: bool = False) -> int:
    """Ingest spool files and record observed final states. Exit status: 0, or 1 when a
    malformed spool file was quarantined. The store is opened for writing only when
    there is something to write."""
    with open_store(store_url, readonly=True) as store:
        campaigns = store.campaigns(limit=100000) if all_campaigns else [store.resolve_campaign(ref)]
        files = _spool_files(campaigns)
        finals = observed_finals(store, campaigns) if not files else []
    n_files = n_ops = moved = quarantined = 0
    if files or finals:
        with open_store(store_url) as store:
            bad_before = _bad_files(campaigns)
            n_files, n_ops = ingest_files(store, files)
            moved = record_observed(store, observed_finals(store, campaigns) if files else finals)
            quarantined = _bad_files(campaigns) - bad_before
    print(f"ingested {n_files} spool file(s), {n_ops} operation(s)"
          + (f"; recorded the observed final state of {moved} point(s)" if moved else "")
          + (f"; quarantined {quarantined} malformed file(s) (*.bad)" if quarantined else ""))
    return 1 if quarantined else 0


def _bad_files(campaigns: Iterable[dict]) -> int:
    n = 0
    for c in campaigns:
        d = spool_dir(c)
        if d is not None and d.is_dir():
            n += len(list(d.glob("*.jsonl.bad")))
    return n
