"""Which campaigns are the user's own: the ones whose points verify with the user's key (issue #48).

A shared store (a group's PostgreSQL, an SQLite file in a group's folder) holds campaigns
of others, and anyone who can write it can date a crafted campaign newest and put any
name and ``user`` on it. So a command given no campaign (``status``, ``harvest``, ``plan``,
``report``, ``cancel``, ``resume``, ``ingest``) takes the newest campaign *launched by
you*: one of whose first points (by ``idx``: the first, then up to ``MAX_POINTS``)
carries a signature that verifies with your key (campaign/common/signing.py: the launch
signs every point over the campaign id, its results folder and the point's stored config;
no key, nothing is yours), and whose stored ``user`` is none or yours
(``current_user``: a group store's trigger records it; a campaign of
yours someone re-labelled is not taken). The signature is what proves it: the ``user``,
name and date are anyone's to write.

It stays cheap on a large store: campaigns are read newest first in pages of ``PAGE``, a
page's first points in one query, and the walk stops at the first that verifies (a
campaign whose stored ``user`` is another's costs nothing more; one whose first point was
changed since launch, its next ``MAX_POINTS`` points). A point whose stored config or
overrides exceed ``MAX_SIGNED_JSON`` characters (no launch writes one) is not even
fetched, and a results folder longer than ``MAX_PATH`` is nobody's. A store older than
version 4 (no signatures) holds no campaign of yours: name one.
"""

from __future__ import annotations

import getpass
from typing import Any, Optional

from sqlalchemy import Text, and_, cast, func, select

from campaign.common.bounded import loads
from campaign.common.signing import SIGNED_COLUMNS, signing_key, verify
from campaign_sql.schema import SIGNED_SINCE, campaign, point

PAGE = 200  # campaigns read (and their first points verified) per query
MAX_POINTS = 16  # points of a campaign whose first did not verify that are tried before it is not yours
MAX_SIGNED_JSON = 1 << 20  # characters of a stored config or overrides a launch never exceeds
MAX_PATH = 4096  # characters of a results folder (PATH_MAX)
_JSON_COLUMNS = ("config", "overrides")  # read as text and parsed here: a value that is no JSON verifies nothing
_POINT_COLUMNS = ("signature", *SIGNED_COLUMNS)


def current_user(store: Any) -> Optional[str]:
    """Who a campaign's ``user`` would be if this user launched it now: PostgreSQL's
    connecting role (a group store's trigger records it), else the login name."""
    if store.engine.dialect.name == "postgresql":
        from sqlalchemy import text

        with store.engine.connect() as conn:
            return conn.execute(text("select current_user")).scalar()
    try:
        return getpass.getuser()
    except Exception:  # no login name to compare with: nobody's campaign is flagged
        return None


def own_key() -> Optional[bytes]:
    """The user's signing key, or None when there is none yet (they launched nothing)."""
    return signing_key()


def is_mine(store: Any, row: dict, key: Optional[bytes] = None) -> bool:
    """Whether campaign ``row`` (a campaign table row) was launched by this user: one of its
    first ``MAX_POINTS`` points verifies with their key (``key``: read when not given), and
    its stored ``user`` is none or theirs."""
    key = key if key is not None else own_key()
    if key is None or not _user_is_me(row.get("user"), current_user(store)):
        return False
    ref = (row["id"], row.get("results_dir"))
    return bool(_verified(store, [ref], key) or _verified_further(store, [ref], key))


def newest_mine(store: Any, horizon: float) -> Optional[dict]:
    """The newest campaign dated up to ``horizon`` that is this user's (``is_mine``); None
    when there is none."""
    key = own_key()
    if key is None or store.version < SIGNED_SINCE:
        return None
    order = (campaign.c.created_at.desc(), campaign.c.id.desc())
    sane = and_(campaign.c.created_at <= horizon,
                func.coalesce(func.length(campaign.c.results_dir), 0) <= MAX_PATH)
    me, offset = current_user(store), 0
    while True:
        with store.engine.connect() as conn:
            page = conn.execute(select(campaign.c.id, campaign.c.results_dir, campaign.c.user).where(sane)
                                .order_by(*order).limit(PAGE).offset(offset)).all()
        if not page:
            return None
        candidates = [(r.id, r.results_dir) for r in page if _user_is_me(r.user, me)]
        mine = _verified(store, candidates, key)  # one query: each one's first point
        # those newer than the first verified whose first point did not verify (changed in the
        # store since): their next points, each campaign's in one query
        upto = next((i for i, (cid, _) in enumerate(candidates) if cid in mine), len(candidates))
        mine |= _verified_further(store, [c for c in candidates[:upto]], key)
        for r in page:  # newest first: the first verified one
            if r.id in mine:
                with store.engine.connect() as conn:
                    return dict(conn.execute(select(campaign).where(campaign.c.id == r.id)).mappings().one())
        offset += PAGE


def _user_is_me(user: Any, me: Optional[str]) -> bool:
    """Whether a campaign's stored ``user`` allows it to be this user's (``me``: None when
    the login name is unknown, then only the signature decides)."""
    return user is None or me is None or user == me


def _verified(store: Any, campaigns: list[tuple[str, Optional[str]]], key: bytes) -> set[str]:
    """The ids among ``campaigns`` (id, results folder) whose first point verifies with ``key``."""
    if store.version < SIGNED_SINCE or not campaigns:
        return set()
    folders = dict(campaigns)
    first = (select(point.c.campaign_id, func.min(point.c.idx).label("idx"))
             .where(point.c.campaign_id.in_(list(folders))).group_by(point.c.campaign_id).subquery())
    q = _signed_points().join(first, and_(first.c.campaign_id == point.c.campaign_id, first.c.idx == point.c.idx))
    with store.engine.connect() as conn:
        rows = conn.execute(q).mappings().all()
    return {r["campaign_id"] for r in rows if verify(key, r["campaign_id"], folders[r["campaign_id"]], _parsed(r))}


def _verified_further(store: Any, campaigns: list[tuple[str, Optional[str]]], key: bytes) -> set[str]:
    """The ids among ``campaigns`` one of whose first ``MAX_POINTS`` points verifies (a point
    changed in the store since launch does not disown a campaign; the index on
    ``(campaign_id, idx)`` reads ``MAX_POINTS`` rows a campaign, however many it has)."""
    if store.version < SIGNED_SINCE:
        return set()
    out = set()
    with store.engine.connect() as conn:
        for cid, folder in campaigns:
            rows = conn.execute(_signed_points(point.c.campaign_id == cid).order_by(point.c.idx)
                                .limit(MAX_POINTS)).mappings().all()
            if any(verify(key, cid, folder, _parsed(r)) for r in rows):
                out.add(cid)
    return out


def _signed_points(*where: Any) -> Any:
    """A select of the points' signed columns (JSON ones as text), leaving out any whose
    JSON is longer than ``MAX_SIGNED_JSON`` characters."""
    small = and_(func.coalesce(func.length(cast(point.c.config, Text)), 0) <= MAX_SIGNED_JSON,
                 func.coalesce(func.length(cast(point.c.overrides, Text)), 0) <= MAX_SIGNED_JSON, *where)
    return (select(point.c.campaign_id, *[point.c[name] for name in _POINT_COLUMNS],
                   *[cast(point.c[name], Text).label(name) for name in _JSON_COLUMNS]).where(small))


def _parsed(row: Any) -> dict:
    """``row`` with its JSON columns parsed (a value that does not parse: a string no
    signature covers)."""
    out = dict(row)
    for name in _JSON_COLUMNS:
        if out[name] is not None:
            try:  # within campaign.common.bounded's bounds: a crafted value parses to nothing
                out[name] = loads(out[name], name, max_bytes=MAX_SIGNED_JSON)
            except ValueError:
                out[name] = ["unparsable"]
    return out
