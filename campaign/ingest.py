"""``campaign ingest``: fold spooled job results into the store, exactly once.

A job that cannot reach the store within its busy timeout appends its operations
to ``<results>/jobs/<campaign>/spool/*.jsonl`` (trainers.writer). Ingest replays each
file in one transaction and then renames it ``*.jsonl.ingested``; the operations are
idempotent, so a file replayed twice (a crash between commit and rename) changes
nothing.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterable, Optional

from sqlalchemy.exc import SQLAlchemyError

from campaign.errors import StoreError, one_line
from campaign.store import Store, open_store
from campaign_sql.ops import AttemptKey, apply_op


def spool_dir(campaign: dict) -> Optional[Path]:
    if not campaign.get("results_dir"):
        return None
    return Path(campaign["results_dir"]) / "jobs" / campaign["id"] / "spool"


def _records(path: Path) -> list[dict]:
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            break  # a line cut short by a killed job: what follows it never happened
    return out


def ingest_files(store: Store, files: Iterable[Path]) -> tuple[int, int]:
    """Replay spool files; returns (files, operations) ingested."""
    n_files = n_ops = 0
    for path in sorted(files):
        records = _records(path)
        try:
            with store.engine.begin() as conn:
                cache: dict = {}
                for r in records:
                    apply_op(conn, r["op"], AttemptKey(r["point_id"], r["attempt_no"]), r["payload"], cache)
        except SQLAlchemyError as exc:
            raise StoreError(f"cannot ingest {path}: {one_line(exc)}") from exc
        path.rename(path.with_name(path.name + ".ingested"))
        n_files += 1
        n_ops += len(records)
    return n_files, n_ops


def ingest_campaigns(store: Store, campaigns: Iterable[dict]) -> tuple[int, int]:
    files: list[Path] = []
    for c in campaigns:
        d = spool_dir(c)
        if d is not None and d.is_dir():
            files += list(d.glob("*.jsonl"))
    return ingest_files(store, files)


def ingest(ref: Optional[str], *, store_url: str, all_campaigns: bool = False) -> int:
    with open_store(store_url) as store:
        campaigns = store.campaigns(limit=100000) if all_campaigns else [store.resolve_campaign(ref)]
        n_files, n_ops = ingest_campaigns(store, campaigns)
    print(f"ingested {n_files} spool file(s), {n_ops} operation(s)")
    return 0
