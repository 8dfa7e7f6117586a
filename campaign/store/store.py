"""Host-side access to the results store (SQLAlchemy Core, short transactions)."""

from __future__ import annotations

import os
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping, Sequence

from sqlalchemy import and_, func, insert, literal, or_, select, update
from sqlalchemy.engine import Engine
from sqlalchemy.exc import SQLAlchemyError

from campaign.common.bounded import stored
from campaign.common.errors import NotFoundError, SchemaVersionError, StoreError, one_line
from campaign.store.advice import upgrade_advice
from campaign.store.budget import guard
from campaign.store.many import execute_many
from campaign.store.shape import check_shape
from campaign.store.submissions import Submissions
from campaign.store.url import check_store_url, describe_url  # noqa: F401  (their home before url.py)
from campaign_sql.engine import (
    SchemaMismatch,
    check_version,
    create_schema,
    ensure_indexes,
    make_engine,
    sqlite_path,
    stored_version,
)
from campaign_sql.migrate import READABLE, migrate
from campaign_sql.schema import ACTIVE_STATES, JOB_SIGNED_SINCE, SCHEMA_VERSION, SIGNED_SINCE, attempt, campaign, point


FUTURE_SKEW_S = 300.0  # a campaign dated further ahead than this is never "the latest" (Store.find_campaign)


def default_store_url() -> str:
    """The store `campaign status/harvest` read when none is named: $CAMPAIGN_STORE,
    else the launcher's default, ``sqlite:///$CAMPAIGN_RESULTS/campaign.db`` (results/)."""
    if os.environ.get("CAMPAIGN_STORE"):
        return os.environ["CAMPAIGN_STORE"]
    results = os.environ.get("CAMPAIGN_RESULTS", "results")
    return f"sqlite:///{results}/campaign.db"


def find_campaign_noted(store: "Store", ref: str | None) -> dict:
    """``store.find_campaign(ref)`` for a read command, saying on stderr (a line each)
    which campaign a doubtful reference took (``campaign.store.resolve``): what
    ``campaign status NAME``/``harvest NAME`` print."""
    import sys

    from campaign.store.resolve import campaign_for_read
    from campaign.store.typed import typed_campaign

    found, warnings = typed_campaign(campaign_for_read(store, ref))  # a value not of its type: read as none, said once
    for w in warnings:
        print(f"warning: {w}", file=sys.stderr)
    return found


def missing_store(path: str) -> str:
    """What a read command says when there is no SQLite store at ``path``: where it looked
    (absolute, and the working folder a relative path is read from), how to make one, and
    how to name the one meant."""
    where = Path(path).absolute()
    cwd = os.getcwd()
    relative = "" if Path(path).is_absolute() else f"{path} in "
    return (f"no results store at {where} ({relative}the working folder {cwd}); launch a campaign first "
            "(campaign launch ...), or name the store: CAMPAIGN_RESULTS=FOLDER (the folder holding its campaign.db) "
            "or --store URL")


def open_store(url: str, *, create: bool = False, readonly: bool = False, busy_timeout_s: float = 30.0) -> "Store":
    """Open the store at ``url``; with ``create``, make an empty one (and its folder);
    with ``readonly``, through a connection that cannot write (``campaign status`` and
    ``harvest``: a 0-byte or foreign file is refused and left byte for byte as it was).

    A store of an older schema version (``campaign_sql.migrate.READABLE``) is upgraded in
    place by a writing open and read as it is by a read-only one (``Store.version`` says
    which).

    Raises ``StoreError`` for a missing store (without ``create``), an unreachable
    database or a file that is not a database, or a store shaped to run SQL of its own (a
    view, a trigger: campaign.store.shape), ``SchemaVersionError`` for a store of
    another schema version (or none). Every query runs under campaign.store.budget.
    """
    check_store_url(url)
    path = sqlite_path(url)
    if path is not None:
        p = Path(path)
        if p.is_dir():
            raise StoreError(f"results store {path} is a directory, not an SQLite file; name the file with --store URL")
        if not p.exists():
            if not create:
                raise StoreError(missing_store(path))
            p.parent.mkdir(parents=True, exist_ok=True)
        elif not create and p.stat().st_size == 0:
            raise _version_error(url, None)  # SQLite would take it as an empty database
    try:
        if path is not None and Path(path).exists() and not readonly:
            # Checked through a read-only connection first: the writing one switches the
            # journal to WAL, which would rewrite a file that is not a store.
            _check(guard(make_engine(url, busy_timeout_s=busy_timeout_s, readonly=True, json_deserializer=stored),
                         describe_url(url)), url, create, dispose=True)
        engine = guard(make_engine(url, busy_timeout_s=busy_timeout_s, readonly=readonly, interruptible=True,
                                   json_deserializer=stored), describe_url(url))  # others' JSON within bounds
        version = _check(engine, url, create, readonly=readonly)
    except ValueError as exc:
        raise StoreError(f"store URL: {exc}; use e.g. sqlite:///results/campaign.db") from exc
    except SQLAlchemyError as exc:
        raise StoreError(f"cannot open results store {describe_url(url)}: {_db_message(exc)}") from exc
    return Store(engine, url, readonly=readonly, version=version)


def _check(engine: Engine, url: str, create: bool, dispose: bool = False, readonly: bool = True) -> int:
    """The schema-version check of ``open_store``; returns the store's version. A new
    store is made (with ``create``) only in an empty database, never beside another
    application's tables; a store of an older version (``READABLE``) is read as it is
    by a read-only engine and upgraded in place by a writing one (``sql/migrate.py``).
    The store's shape is checked first (``campaign.store.shape``): the version is read
    from a table that others could have made a view."""
    try:
        check_shape(engine, describe_url(url))
        check_version(engine, READABLE)
    except StoreError:
        engine.dispose()
        raise
    except SchemaMismatch as exc:
        if not (exc.found is None and create and _is_empty(engine)):
            engine.dispose()
            raise _version_error(url, exc.found) from None
        if not dispose:
            create_schema(engine)
        return SCHEMA_VERSION
    else:
        if dispose or readonly:
            return int(stored_version(engine))
        migrate(engine)
        if create:  # a store made before an index was added gets it (same schema version)
            ensure_indexes(engine)
        return SCHEMA_VERSION
    finally:
        if dispose:
            engine.dispose()


def _is_empty(engine: Engine) -> bool:
    """Whether a database holds no table at all (a new store may be made in it, not in a
    database of something else)."""
    from sqlalchemy import inspect

    return not inspect(engine).get_table_names()


def _db_message(exc: SQLAlchemyError) -> str:
    """The driver's own message of a database error, on one line."""
    orig = getattr(exc, "orig", None)
    text = str(orig) if orig is not None else str(exc.args[0] if exc.args else exc)
    text = one_line(text)
    if "file is not a database" in text:
        return "not an SQLite database (file is not a database); name another store with --store URL"
    if "readonly database" in text or "read-only transaction" in text:
        return (f"{text}: the store (or its folder) is read-only to you; this command writes to it. Ask its "
                "owner, or copy it and name the copy with --store URL")
    return text


def _version_error(url: str, found: str | None) -> SchemaVersionError:
    where = describe_url(url)
    if found is None:
        return SchemaVersionError(
            f"{where} is not a campaign results store (no schema version); "
            "name another store with --store URL or store.url=URL"
        )
    if found.isdigit() and int(found) > SCHEMA_VERSION:
        return SchemaVersionError(
            f"results store {where} has schema version {found}, newer than this campaign's "
            f"{SCHEMA_VERSION}; {upgrade_advice()}"
        )
    return SchemaVersionError(
        f"results store {where} has schema version {found}, this campaign needs {SCHEMA_VERSION}; "
        "no migration exists from it: keep it for the older campaign and start a new store "
        "with store.url=sqlite:///NEW.db"
    )


class Store(Submissions):
    """A results store opened and version-checked by ``open_store``; ``version`` is its
    schema version (an older one is read as it is, campaign_sql.migrate)."""

    def __init__(self, engine: Engine, url: str, *, readonly: bool = False, version: int = SCHEMA_VERSION):
        self.engine = engine
        self.url = url
        self.readonly = readonly
        self.version = version

    def has(self, since_version: int) -> bool:
        """Whether the store has what schema version ``since_version`` added."""
        return self.version >= since_version

    def close(self) -> None:
        self.engine.dispose()

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ------------------------------------------------------------------ writes
    def register(self, campaign_row: Mapping[str, Any], point_rows: Sequence[Mapping[str, Any]]) -> list[int]:
        """Insert a campaign and its points in one transaction; return the point ids in order.
        Each point is signed with the user's key (``campaign.common.signing``, made on first use):
        exactly what is stored, which a resubmission checks before it trusts any of it."""
        from campaign.common.jsontext import Texts
        from campaign.common.signing import sign, signing_key

        key = signing_key(create=True)
        cid, results = campaign_row["id"], campaign_row.get("results_dir")
        # Each config's canonical (signed) and stored JSON made from its sections' texts, once
        # a section the points share (campaign.common.jsontext): the same bytes as json.dumps's.
        texts = Texts()
        signed = [dict(r, campaign_id=cid, signature=sign(key, cid, results, r, texts)) for r in point_rows]
        for r in signed:
            if type(r.get("config")) is dict:
                r["config"] = texts.stored_value(r["config"])
        with self._begin() as conn:
            conn.execute(insert(campaign), [dict(campaign_row)])
            execute_many(conn, insert(point), signed)
            rows = conn.execute(
                select(point.c.idx, point.c.id).where(point.c.campaign_id == campaign_row["id"])
            ).all()
        ids = dict(rows)
        return [ids[r["idx"]] for r in point_rows]

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
        """The campaign named by id, unique id prefix or name; your newest one for None
        (``find_campaign`` also says how a name was resolved)."""
        return self.find_campaign(ref)[0]

    def find_campaign(self, ref: str | None) -> tuple[dict, str | None]:
        """The campaign ``ref`` names, and a note when it took one of several: ``None`` is
        the newest campaign launched by this user (campaign.store.mine: its points verify
        with their key); then, in this order, an exact id, a unique id prefix, a name
        (the latest campaign of that name; the note names it and how many share the name).
        ``campaign.store.resolve`` says when a reference is doubtful (a name and a prefix),
        and whose a campaign is when it is not the user's.
        "Latest" never means a campaign dated more than ``FUTURE_SKEW_S`` ahead of now (a
        clock far off, or a crafted store): such a campaign is taken by its id, or by a
        name no campaign dated up to now has (the note says so).
        Raises ``NotFoundError`` naming recent campaigns, or the ids a prefix matches."""
        horizon = time.time() + FUTURE_SKEW_S
        if ref is None:
            from campaign.store.mine import newest_mine

            row = newest_mine(self, horizon)
            if row is not None:
                return row, None
            raise NotFoundError(self._none_of_yours(horizon))
        with self.engine.connect() as conn:
            rows = conn.execute(
                select(campaign).where((campaign.c.id.startswith(ref, autoescape=True)) | (campaign.c.name == ref))
                .order_by(campaign.c.created_at.desc(), campaign.c.id.desc())
            ).mappings().all()
        exact = [r for r in rows if r["id"] == ref]
        if exact:
            return dict(exact[0]), None
        prefixed = [r for r in rows if str(r["id"]).startswith(ref)]
        if len(prefixed) == 1:  # an id prefix before a name: whoever names a campaign can pick any name
            return dict(prefixed[0]), None
        if len(prefixed) > 1:
            raise NotFoundError(f"'{ref}' matches {len(prefixed)} campaigns ({', '.join(str(r['id']) for r in prefixed[:5])})"
                                "; give more of the id")
        named = [r for r in rows if r["name"] == ref]
        if named:
            named.sort(key=lambda r: not _dated_by(r, horizon))  # stable: the latest dated up to now first
            note = None
            if len(named) > 1:
                note = (f"'{ref}' names {len(named)} campaigns; showing the latest, {named[0]['id']} "
                        f"(an id picks another: {_ids([r['id'] for r in named[1:]])})")
            if not _dated_by(named[0], horizon):
                note = (f"campaign {named[0]['id']} is dated in the future (a clock off, or a store others "
                        f"altered){'; ' + note if note else ''}")
            return dict(named[0]), note
        raise NotFoundError(self._not_found(ref))

    def _not_found(self, ref: str) -> str:
        """``no campaign 'REF'``, the closest name or id among recent campaigns (a typo), and
        the recent ones by name and id."""
        import difflib

        recent = self.campaigns(limit=200)
        words = {}
        for c in recent:
            for word in (c.get("name"), c.get("id")):
                if isinstance(word, str) and word:
                    words.setdefault(word, c)
        close = difflib.get_close_matches(ref, list(words), n=1, cutoff=0.6)
        hint = ""
        if close:
            c = words[close[0]]
            hint = f"; did you mean '{close[0]}'" + (f" ({c['id']})" if close[0] != c["id"] else "") + "?"
        shown = [f"{c['name']} ({c['id']})" if c.get("name") and c["name"] != c["id"] else str(c["id"])
                 for c in recent[:5]]
        return f"no campaign '{ref}' in {describe_url(self.url)}{hint}; recent: {', '.join(shown) or 'none'}"

    def _none_of_yours(self, horizon: float) -> str:
        """Why a command given no campaign has none to take: the store is empty, every
        campaign is dated ahead, or none is the user's (the line says how to name another's)."""
        with self.engine.connect() as conn:
            dated = conn.execute(select(campaign.c.id).where(campaign.c.created_at <= horizon)
                                 .order_by(campaign.c.created_at.desc(), campaign.c.id.desc()).limit(3)).scalars().all()
            ahead = [] if dated else conn.execute(select(campaign.c.id).limit(4)).scalars().all()
        where = describe_url(self.url)
        if ahead:  # every campaign is dated ahead (or undated): none is "the latest"
            return (f"no campaign in {where} is dated up to now; {_ids(ahead)} {'is' if len(ahead) == 1 else 'are'} "
                    "dated in the future (a clock off, or a store others altered): name one by its id")
        if not dated:
            return f"no campaign in {where} yet; launch one with campaign launch -m ..."
        return (f"no campaign of yours in {where} (none is signed with your key); another's is read only when "
                f"named: give its id or name (latest: {_ids(dated)})")

    def candidates(self, ref: str) -> list[dict]:
        """Every campaign whose id is ``ref``, starts with it, or whose name it is (latest first)."""
        with self.engine.connect() as conn:
            return [dict(r) for r in conn.execute(
                select(campaign).where(campaign.c.id.startswith(ref, autoescape=True) | (campaign.c.name == ref))
                .order_by(campaign.c.created_at.desc(), campaign.c.id.desc())).mappings().all()]

    def campaigns(self, limit: int = 20) -> list[dict]:
        """The campaigns, latest first (any dated ahead of now first of all: a listing)."""
        with self.engine.connect() as conn:
            rows = conn.execute(select(campaign).order_by(campaign.c.created_at.desc()).limit(limit)).mappings().all()
        return [dict(r) for r in rows]

    def points(self, campaign_id: str) -> list[dict]:
        """The campaign's points in sweep order, each with its latest attempt's fields, its
        number of attempts and of automatic retries."""
        counts = [func.max(attempt.c.attempt_no).label("attempt_no"), func.count().label("attempts")]
        if self.version >= 2:  # automatic retries (max_retries) used so far
            counts.append(func.count().filter(attempt.c.origin == "retry").label("retries"))
        latest = select(attempt.c.point_id, *counts).group_by(attempt.c.point_id).subquery()
        q = (
            select(
                *[c for c in point.c if _has(c.name, self.version)],  # an older store: none
                func.coalesce(latest.c.attempts, 0).label("attempts"),
                (func.coalesce(latest.c.retries, 0) if self.version >= 2 else literal(0)).label("retries"),
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
        if self.readonly:  # a bug, not a user's error: read commands never write
            raise RuntimeError("write through a read-only store")
        try:
            with self.engine.begin() as conn:
                yield conn
        except SQLAlchemyError as exc:
            raise StoreError(f"results store {describe_url(self.url)}: {_write_message(exc)}") from exc


def _has(column: str, version: int) -> bool:
    """Whether a store of schema ``version`` has the point column ``column``."""
    since = {"signature": SIGNED_SINCE, "job_signature": JOB_SIGNED_SINCE}.get(column, 1)
    return version >= since


def _dated_by(row: Mapping[str, Any], horizon: float) -> bool:
    """Whether a campaign row's creation date is a number no later than ``horizon``."""
    created = row.get("created_at")
    return isinstance(created, (int, float)) and not isinstance(created, bool) and created <= horizon


def _ids(ids: Sequence[str], shown: int = 3) -> str:
    """``a, b, c, ...``: the first ``shown`` ids (as text: a store others write may hold another type)."""
    return ", ".join(str(i) for i in ids[:shown]) + (", ..." if len(ids) > shown else "")


def _write_message(exc: SQLAlchemyError) -> str:
    return _db_message(exc)
