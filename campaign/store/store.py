"""Host-side access to the results store (SQLAlchemy Core, short transactions)."""

from __future__ import annotations

import os
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping, Sequence

from sqlalchemy import and_, func, insert, or_, select, update
from sqlalchemy.engine import Engine
from sqlalchemy.exc import SQLAlchemyError

from campaign.errors import NotFoundError, SchemaVersionError, StoreError, one_line
from campaign_sql.engine import SchemaMismatch, check_version, create_schema, ensure_indexes, make_engine, sqlite_path
from campaign_sql.schema import ACTIVE_STATES, SCHEMA_VERSION, attempt, campaign, point


def default_store_url() -> str:
    """The store `campaign status/harvest` read when none is named: $CAMPAIGN_STORE,
    else the launcher's default, ``sqlite:///$CAMPAIGN_RESULTS/campaign.db`` (results/)."""
    if os.environ.get("CAMPAIGN_STORE"):
        return os.environ["CAMPAIGN_STORE"]
    results = os.environ.get("CAMPAIGN_RESULTS", "results")
    return f"sqlite:///{results}/campaign.db"


def _describe(url: str) -> str:
    path = sqlite_path(url)
    return path if path else url


def check_store_url(url: str) -> None:
    """Refuse a URL SQLAlchemy cannot parse or has no driver for, before anything is written."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError, NoSuchModuleError

    try:
        make_url(url).get_dialect()
    except ArgumentError:
        raise StoreError(f"store URL {url!r} is not a database URL; use e.g. sqlite:///results/campaign.db") from None
    except NoSuchModuleError:
        raise StoreError(f"store URL {url!r}: SQLAlchemy has no dialect for it") from None
    except ImportError as exc:
        raise StoreError(f"store URL {url!r} needs a database driver: {exc}; e.g. pip install psycopg2-binary") from None


def open_store(url: str, *, create: bool = False, busy_timeout_s: float = 30.0) -> "Store":
    """Open the store at ``url``; with ``create``, make an empty one (and its folder).

    Raises ``StoreError`` for a missing store (without ``create``) or an unreachable
    database, ``SchemaVersionError`` for a store of another schema version.
    """
    check_store_url(url)
    path = sqlite_path(url)
    if path is not None:
        if not Path(path).exists():
            if not create:
                raise StoreError(
                    f"no results store at {path}; launch a campaign first "
                    "(python -m campaign.launch ...) or name one with --store URL"
                )
            Path(path).parent.mkdir(parents=True, exist_ok=True)
    try:
        engine = make_engine(url, busy_timeout_s=busy_timeout_s)
        try:
            check_version(engine)
        except SchemaMismatch as exc:
            if exc.found is None and create:
                create_schema(engine)
            else:
                raise _version_error(url, exc.found) from None
        else:
            if create:  # a store made before an index was added gets it (same schema version)
                ensure_indexes(engine)
    except ValueError as exc:
        raise StoreError(f"store URL: {exc}; use e.g. sqlite:///results/campaign.db") from exc
    except SQLAlchemyError as exc:
        raise StoreError(f"cannot open results store {_describe(url)}: {one_line(exc.args[0] if exc.args else exc)}") from exc
    return Store(engine, url)


def _version_error(url: str, found: str | None) -> SchemaVersionError:
    where = _describe(url)
    if found is None:
        return SchemaVersionError(
            f"{where} is not a campaign results store (no schema version); "
            "name another store with --store URL or store.url=URL"
        )
    if found.isdigit() and int(found) > SCHEMA_VERSION:
        return SchemaVersionError(
            f"results store {where} has schema version {found}, newer than this campaign's "
            f"{SCHEMA_VERSION}; upgrade campaign (pip install -U campaign) to read it"
        )
    return SchemaVersionError(
        f"results store {where} has schema version {found}, this campaign needs {SCHEMA_VERSION}; "
        "no migration exists from it: keep it for the older campaign and start a new store "
        "with store.url=sqlite:///NEW.db"
    )


class Store:
    """A results store opened and version-checked by ``open_store``."""

    def __init__(self, engine: Engine, url: str):
        self.engine = engine
        self.url = url

    def close(self) -> None:
        self.engine.dispose()

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ------------------------------------------------------------------ writes
    def register(self, campaign_row: Mapping[str, Any], point_rows: Sequence[Mapping[str, Any]]) -> list[int]:
        """Insert a campaign and its points in one transaction; return the point ids in order."""
        with self._begin() as conn:
            conn.execute(insert(campaign), [dict(campaign_row)])
            conn.execute(insert(point), [dict(r, campaign_id=campaign_row["id"]) for r in point_rows])
            rows = conn.execute(
                select(point.c.idx, point.c.id).where(point.c.campaign_id == campaign_row["id"])
            ).all()
        ids = dict(rows)
        return [ids[r["idx"]] for r in point_rows]

    def mark_submitted(self, updates: Iterable[Mapping[str, Any]]) -> None:
        """Record job ids and folders; a point a job already moved on stays as the job left it."""
        now = time.time()
        with self._begin() as conn:
            for u in updates:
                conn.execute(
                    update(point)
                    .where(point.c.id == u["point_id"])
                    .values(job_id=u["job_id"], job_folder=u.get("job_folder"), log_path=u.get("log_path"), submitted_at=now)
                )
                conn.execute(
                    update(point)
                    .where(and_(point.c.id == u["point_id"], point.c.state == "registered"))
                    .values(state=u.get("state", "pending"), reason=u.get("reason"))
                )

    def set_state(self, point_id: int, state: str, reason: str | None = None, *, only_from: Sequence[str] | None = ACTIVE_STATES,
                  failed_since: float | None = None, **values: Any) -> bool:
        """Move a point to ``state`` (only from ``only_from`` states, or from ``failed``
        if it failed at ``failed_since`` or later); True if it moved."""
        cond = point.c.id == point_id
        if only_from is not None:
            allowed = point.c.state.in_(list(only_from))
            if failed_since is not None:
                allowed = or_(allowed, and_(point.c.state == "failed", point.c.ended_at >= failed_since))
            cond = and_(cond, allowed)
        with self._begin() as conn:
            res = conn.execute(update(point).where(cond).values(state=state, reason=reason, **values))
        return res.rowcount > 0

    # ------------------------------------------------------------------ reads
    def resolve_campaign(self, ref: str | None) -> dict:
        """The campaign named by id, unique id prefix or name; the latest one for None."""
        with self.engine.connect() as conn:
            if ref is None:
                row = conn.execute(select(campaign).order_by(campaign.c.created_at.desc()).limit(1)).mappings().first()
                if row is None:
                    raise NotFoundError(f"no campaign in {_describe(self.url)} yet; launch one with python -m campaign.launch -m ...")
                return dict(row)
            rows = conn.execute(
                select(campaign).where((campaign.c.id.startswith(ref, autoescape=True)) | (campaign.c.name == ref))
                .order_by(campaign.c.created_at.desc())
            ).mappings().all()
        exact = [r for r in rows if r["id"] == ref]
        if exact:
            return dict(exact[0])
        if len(rows) == 1:
            return dict(rows[0])
        if not rows:
            known = ", ".join(c["id"] for c in self.campaigns(limit=5)) or "none"
            raise NotFoundError(f"no campaign '{ref}' in {_describe(self.url)}; recent: {known}")
        raise NotFoundError(f"'{ref}' matches {len(rows)} campaigns ({', '.join(r['id'] for r in rows[:5])}); give more of the id")

    def campaigns(self, limit: int = 20) -> list[dict]:
        with self.engine.connect() as conn:
            rows = conn.execute(select(campaign).order_by(campaign.c.created_at.desc()).limit(limit)).mappings().all()
        return [dict(r) for r in rows]

    def points(self, campaign_id: str) -> list[dict]:
        """The campaign's points in sweep order, each with its latest attempt's fields."""
        latest = (
            select(attempt.c.point_id, func.max(attempt.c.attempt_no).label("attempt_no"))
            .group_by(attempt.c.point_id)
            .subquery()
        )
        q = (
            select(
                point,
                attempt.c.id.label("attempt_id"),
                attempt.c.attempt_no,
                attempt.c.state.label("attempt_state"),
                attempt.c.reason.label("attempt_reason"),
                attempt.c.started_at.label("attempt_started_at"),
                attempt.c.ended_at.label("attempt_ended_at"),
            )
            .select_from(
                point.outerjoin(latest, latest.c.point_id == point.c.id).outerjoin(
                    attempt, and_(attempt.c.point_id == point.c.id, attempt.c.attempt_no == latest.c.attempt_no)
                )
            )
            .where(point.c.campaign_id == campaign_id)
            .order_by(point.c.idx)
        )
        with self.engine.connect() as conn:
            return [dict(r) for r in conn.execute(q).mappings().all()]

    @contextmanager
    def _begin(self) -> Iterator[Any]:
        """A short write transaction; database errors become one-line ``StoreError``s."""
        try:
            with self.engine.begin() as conn:
                yield conn
        except SQLAlchemyError as exc:
            raise StoreError(f"results store {_describe(self.url)}: {one_line(exc)}") from exc
