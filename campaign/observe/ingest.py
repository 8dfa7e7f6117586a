"""``campaign ingest``: fold into the store what jobs left outside it, exactly once.

A job that cannot reach the store within its busy timeout appends its operations
to ``<results>/jobs/<campaign>/spool/*.jsonl`` (trainers.writer). Ingest replays each
file in one transaction and then renames it ``*.jsonl.ingested``; the operations are
idempotent, so a file replayed twice (a crash between commit and rename) changes
nothing. A line that is not an operation (not JSON, not UTF-8, too large or too deep)
is quarantined alone: kept with its line number in ``*.jsonl.bad`` beside the file,
one warning each, and the file's other operations are applied. A file none of whose
lines is an operation, one with a well-formed operation of another point, attempt or
rank (forged or confused: nothing of it is trusted), or whose operations the store
refuses, is renamed ``*.jsonl.bad`` whole with a warning, and the other files are
still ingested.

A results folder is writable by others than the campaign's owner, so a spool file is
data from anyone: it changes only the campaign, point, attempt and rank its folder and
name stand for (``<results>/jobs/<campaign>/spool/p<point>-a<attempt>-r<rank>.jsonl``).
A file named otherwise, one that is not a regular file (a link, a FIFO), one past
``MAX_SPOOL_BYTES`` or ``MAX_SPOOL_ELEMENTS`` (its JSON's values and keys, counted
before a line is parsed: bytes are not memory, campaign.common.bounded), one whose point
is of another campaign, or one holding an operation for another point, attempt or rank is
quarantined whole, nothing of it applied. Files are read one at a time: what one file
takes is freed before the next is read.

Ingest also records the final states the executors observe for points the store
still has unfinished (a job killed from outside never reports itself): read commands
derive them every time (campaign.observe.state) and never write; this keeps them once the
scheduler has forgotten the job.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Iterable, Optional

from sqlalchemy.exc import DataError, DBAPIError, IntegrityError, SQLAlchemyError, StatementError

from campaign.common.bounded import BoundError, check, elements, loads
from campaign.common.errors import StoreError, one_line
from campaign.common.ids import shown
from campaign.common.jobfolder import SPOOL_FOLDER_FORM, SPOOL_FORM, spool_campaign, spool_dir, spool_key
from campaign.store import Store, open_store
from campaign.store.resolve import campaign_for_write
from campaign.common.text import printable
from campaign.common.untrusted import open_append, read_bytes
from campaign_sql.ops import ROW_TABLES, AttemptKey, apply_op
from campaign_sql.schema import point

OPS = ("start", "rows", "rank", "finish")
MAX_SPOOL_BYTES = 256 << 20  # one rank's spool file; a long run's rows take tens of MB
# JSON values and keys in one spool file (bounded.elements): ~20 an iteration row, so ~200,000 rows;
# what they can make in memory: bounded.ELEMENT_BYTES each, ~340 MB, beside the file's bytes and lines
MAX_SPOOL_ELEMENTS = 1 << 22
MAX_LINE_BYTES = 64 << 20  # one operation: at most BATCH_ROWS iteration rows (trainers.writer), far below
# the payload keys trainers.writer writes per operation (anything else could reach a column it must not)
PAYLOAD_KEYS = {
    "start": {"job_id", "world_size", "started_at", "provenance", "origin"},
    "rows": {"table", "rank", "rows"},
    "rank": {"rank", "tables"},
    "finish": {"state", "reason", "ended_at"},
}


class MalformedSpool(ValueError):
    """A spool file that is not what trainers.writer writes."""


def _check_record(r: object, where: str, key: Optional[tuple[int, int, int]] = None) -> dict:
    """One operation as trainers.writer writes it, or ``MalformedSpool``; with ``key`` (the
    file name's point, attempt and rank) one of that point's attempt and rank only."""
    if not isinstance(r, dict) or r.get("op") not in OPS:
        raise MalformedSpool(f"{where}: not a spool operation (op one of {', '.join(OPS)})")
    for name in ("point_id", "attempt_no"):
        if not isinstance(r.get(name), int) or isinstance(r.get(name), bool):
            raise MalformedSpool(f"{where}: {name} is not an integer")
    payload = r.get("payload")
    if not isinstance(payload, dict):
        raise MalformedSpool(f"{where}: payload is not an object")
    extra = sorted(set(payload) - PAYLOAD_KEYS[r["op"]])
    if extra:
        raise MalformedSpool(f"{where}: {r['op']} with a field the job never writes ({shown(extra[0])})")
    if key is not None:
        said = {"point_id": r["point_id"], "attempt_no": r["attempt_no"], "rank": payload.get("rank", key[2])}
        for (name, value), own in zip(said.items(), key):
            if value != own:
                said_as = value if isinstance(value, int) else shown(value)
                raise MalformedSpool(f"{where}: {name} {said_as} but the file's name stands for {own}")
    if r["op"] == "rows" and (payload.get("table") not in ROW_TABLES or not isinstance(payload.get("rows"), list)):
        raise MalformedSpool(f"{where}: rows of an unknown table")
    if r["op"] == "rank" and not isinstance(payload.get("tables"), dict):
        raise MalformedSpool(f"{where}: rank without tables")
    if r["op"] == "finish" and not isinstance(payload.get("state"), str):
        raise MalformedSpool(f"{where}: finish without a state")
    return r


def _spool_bytes(path: Path) -> bytes:
    """A spool file's bytes through campaign.common.untrusted.read_bytes (a regular file, no link
    followed, no FIFO blocked on, at most ``MAX_SPOOL_BYTES`` and ``MAX_SPOOL_ELEMENTS``). What it refuses is the
    file's fault (``MalformedSpool``, quarantined); a file that cannot be read at all
    (gone, no permission) is ``OSError``, the reader's trouble."""
    data, reason = read_bytes(path, MAX_SPOOL_BYTES)
    if data is not None:
        count = elements(data)
        if count > MAX_SPOOL_ELEMENTS:
            raise MalformedSpool(f"{count:,} JSON elements, more than the {MAX_SPOOL_ELEMENTS:,} campaign reads "
                                 "from a spool file")
        return data
    # read_bytes' reasons (campaign.common.untrusted) in this module's own words
    if reason == "is not a regular file (a symbolic link)":
        raise MalformedSpool("a symbolic link, not a file the job wrote")
    if reason.startswith("is not a regular file"):
        raise MalformedSpool("not a regular file (a FIFO, device or folder)")
    if reason.startswith("is larger than"):
        raise MalformedSpool(f"more than the {MAX_SPOOL_BYTES:,} bytes campaign reads from a spool file")
    raise OSError(None, reason)


def read_spool(path: Path, key: Optional[tuple[int, int, int]] = None) -> list[dict]:
    """The operations of one spool file, every line well-formed (``read_spool_lines``);
    ``MalformedSpool`` naming the first bad line otherwise."""
    records, bad = read_spool_lines(path, key)
    if bad:
        raise MalformedSpool(bad[0][2])
    return records


def read_spool_lines(path: Path, key: Optional[tuple[int, int, int]] = None
                     ) -> tuple[list[dict], list[tuple[int, bytes, str]]]:
    """The well-formed operations of one spool file (``key``: of that point, attempt and
    rank only, ``_check_record``) and its bad lines as (line number, bytes, why). A line
    that is not UTF-8, not JSON, too large or too deep (campaign.common.bounded) is bad
    alone: the lines around it are still read; an operation of another point, attempt or
    rank makes the whole file ``MalformedSpool``. The
    last line may be cut short (a job killed while writing it: what follows never
    happened, not a bad line). A file that cannot be read as a whole (a link, a FIFO,
    too large) is ``MalformedSpool``."""
    lines = _spool_bytes(path).splitlines()
    numbered = [(i, raw) for i, raw in enumerate(lines, 1) if raw.strip()]
    out: list[dict] = []
    bad: list[tuple[int, bytes, str]] = []
    for n, (i, raw) in enumerate(numbered):
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            bad.append((i, raw, f"line {i} is not UTF-8 text ({exc.reason} at byte {exc.start})"))
            continue
        try:
            check(line, f"line {i}", max_bytes=MAX_LINE_BYTES)  # too large or too deep: never parsed
            record = loads(line, f"line {i}", max_bytes=MAX_LINE_BYTES)
        except BoundError as exc:
            if n == len(numbered) - 1 and str(exc).startswith(f"line {i}: not JSON"):
                break
            bad.append((i, raw, f"line {i} is not JSON" if ": not JSON" in str(exc) else str(exc)))
            continue
        # A well-formed line for another point, attempt or rank, or with a field the job
        # never writes, is no accident of a killed writer: the file is forged or confused,
        # and nothing of it is applied (MalformedSpool, the whole file quarantined).
        out.append(_check_record(record, f"line {i}", key))
    return out, bad


def _quarantine_lines(path: Path, bad: list[tuple[int, bytes, str]]) -> None:
    """Keep a spool file's bad lines beside it (``*.jsonl.bad``: ``<line number><TAB><the
    line as it was>``), one warning each; its other lines are applied."""
    kept = path.with_name(path.name + ".bad")
    try:
        with os.fdopen(open_append(kept), "ab") as f:  # never through a link, nor into a FIFO
            f.writelines(b"%d\t%s\n" % (i, raw) for i, raw, _ in bad)
    except OSError as exc:
        raise StoreError(f"cannot keep the malformed lines of spool file {path}: {exc.strerror}") from exc
    for _, _, why in bad:
        print(printable(f"warning: {path}: {why}; kept in {kept.name}, not applied (the file's other lines were)"),
              file=sys.stderr)


def _quarantine(path: Path, why: str) -> None:
    bad = path.with_name(path.name + ".bad")
    try:
        path.rename(bad)
    except OSError as exc:
        raise StoreError(f"cannot quarantine malformed spool file {path}: {exc.strerror}") from exc
    print(printable(f"warning: {path}: {why}; renamed to {bad.name}, its operations were not applied"),
          file=sys.stderr)


def _check_owner(conn, point_id: int, campaign_id: str) -> None:
    """``MalformedSpool`` unless the store has point ``point_id`` in ``campaign_id``."""
    from sqlalchemy import select

    owner = conn.execute(select(point.c.campaign_id).where(point.c.id == point_id)).scalar()
    if owner is None:
        raise MalformedSpool(f"the store has no point {point_id}")
    if owner != campaign_id:
        raise MalformedSpool(f"point {point_id} is one of campaign {shown(owner)}, not of {shown(campaign_id)} "
                             "whose spool folder holds the file")


def ingest_files(store: Store, files: Iterable[Path], campaign_id: Optional[str] = None) -> tuple[int, int]:
    """Replay spool files of ``campaign_id`` (None: each file's folder's,
    ``<results>/jobs/<campaign>/spool``); returns (files, operations) ingested. A file
    applies to the point, attempt and rank its name stands for, in that campaign, or
    not at all: malformed or foreign files are quarantined (``*.bad``) with a warning;
    a store that cannot be written stops it."""
    n_files = n_ops = 0
    for path in sorted(files):
        key, owner = spool_key(path.name), campaign_id or spool_campaign(path)
        try:
            if key is None:
                raise MalformedSpool(f"not a spool file's name ({SPOOL_FORM})")
            if owner is None:
                raise MalformedSpool(f"not in a campaign's spool folder ({SPOOL_FOLDER_FORM})")
            records, bad = read_spool_lines(path, key)
            if bad and not records:  # nothing of it is an operation of this file: the whole file, one warning
                raise MalformedSpool(bad[0][2])
        except MalformedSpool as exc:
            _quarantine(path, str(exc))
            continue
        except OSError as exc:
            raise StoreError(f"cannot read spool file {path}: {exc.strerror}") from exc
        try:
            with store.engine.begin() as conn:
                _check_owner(conn, key[0], owner)
                cache: dict = {}
                for r in records:
                    apply_op(conn, r["op"], AttemptKey(r["point_id"], r["attempt_no"]), r["payload"], cache)
        except MalformedSpool as exc:  # another campaign's point: rolled back, nothing applied
            _quarantine(path, str(exc))
            continue
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
        if bad:
            _quarantine_lines(path, bad)
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
    """Replay the campaigns' spool files (``ingest_files``), each within its campaign."""
    n_files = n_ops = 0
    for cid, files in _spool_files(campaigns).items():
        f, o = ingest_files(store, files, cid)
        n_files, n_ops = n_files + f, n_ops + o
    return n_files, n_ops


def observed_finals(store: Store, campaigns: Iterable[dict]) -> list[dict]:
    """The points the store has unfinished whose executor says they ended (campaign.observe.state)."""
    from campaign.observe.state import SPOOLED, effective_points, is_final
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


def _spool_files(campaigns: Iterable[dict]) -> dict[str, list[Path]]:
    """Campaign id -> its spool files not yet ingested."""
    files: dict[str, list[Path]] = {}
    for c in campaigns:
        d = spool_dir(c)
        if d is not None and d.is_dir():
            found = list(d.glob("*.jsonl"))
            if found:
                files[c["id"]] = found
    return files


def _usable(campaigns: list[dict]) -> list[dict]:
    """The campaigns whose stored id can name their folder; a warning for each other one
    (``ingest --all`` goes on with the rest)."""
    out = []
    for c in campaigns:
        try:
            spool_dir(c)
        except StoreError as exc:
            print(printable(f"warning: skipped: {exc}"), file=sys.stderr)
            continue
        out.append(c)
    return out


def ingest(ref: Optional[str], *, store_url: str, all_campaigns: bool = False) -> int:
    """Ingest spool files and record observed final states. Exit status: 0, or 1 when a
    malformed spool file was quarantined. The store is opened for writing only when
    there is something to write."""
    with open_store(store_url, readonly=True) as store:
        campaigns = _usable(store.campaigns(limit=100000)) if all_campaigns else [campaign_for_write(store, ref, "ingest")]
        files = _spool_files(campaigns)
        finals = observed_finals(store, campaigns) if not files else []
    n_files = n_ops = moved = quarantined = 0
    if files or finals:
        with open_store(store_url) as store:
            bad_before = _bad_files(campaigns)
            n_files, n_ops = ingest_campaigns(store, campaigns)
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
