"""Issue #48: Ctrl-C and the query budget end a read in one line wherever SQLite runs.

SQLite runs a query while its rows are fetched, not only when it starts: harvest's bulk
fetch (campaign.harvest.derive._frame, the driver's own cursor, for speed) took rows past
SQLAlchemy's error events, so a Ctrl-C there printed a 41-line ``sqlite3.OperationalError:
interrupted`` and exited 1. Each case runs the frame builder on a query whose rows never
end (a recursive CTE: its first row comes at once, the rest while fetching) under the CLI's
own error mapper, in process."""

from __future__ import annotations

import os
import signal
import threading

from sqlalchemy import literal, select

from campaign.cli.exits import guarded
from campaign.store import open_store


def _endless():
    c = select(literal(1).label("x")).cte("c", recursive=True)
    c = c.union_all(select((c.c.x + 1).label("x")))
    return select(c.c.x)


def _read(url: str) -> None:
    from campaign.harvest.derive import _frame

    with open_store(url, readonly=True) as store, store.engine.connect() as conn:
        _frame(conn, _endless())


def _store(tmp_path) -> str:
    url = f"sqlite:///{tmp_path}/campaign.db"
    open_store(url, create=True).close()
    return url


def test_the_bulk_fetch_ends_at_the_query_budget_in_one_line(tmp_path, monkeypatch, capsys):
    url = _store(tmp_path)
    monkeypatch.setenv("CAMPAIGN_QUERY_TIMEOUT_S", "0.3")
    assert guarded(lambda: _read(url), store_url=url) == 2
    out, err = capsys.readouterr()
    assert out == "" and err == (f"error: results store {tmp_path}/campaign.db: a query ran past its budget of 0.3 s "
                                 "(CAMPAIGN_QUERY_TIMEOUT_S); a store made to hang its readers (docs/security.md) or a "
                                 "very large one: set CAMPAIGN_QUERY_TIMEOUT_S higher to wait longer\n")


def test_ctrl_c_during_the_bulk_fetch_ends_in_one_line(tmp_path, monkeypatch, capsys, default_sigint):
    url = _store(tmp_path)
    monkeypatch.setenv("CAMPAIGN_QUERY_TIMEOUT_S", "20")  # should the Ctrl-C be lost: the budget, not a hang
    timer = threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    try:
        assert guarded(lambda: _read(url), store_url=url) == 130
    finally:
        timer.cancel()
    assert capsys.readouterr() == ("", "interrupted (Ctrl-C)\n")


def test_another_database_error_while_fetching_is_one_store_line(tmp_path, capsys):
    """A value SQLite's JSON functions refuse while the rows are fetched (not the first row's)."""
    from sqlalchemy import func, union_all

    url = _store(tmp_path)

    def read() -> None:
        from campaign.harvest.derive import _frame

        bad = union_all(select(literal("[1]").label("j")), select(literal("[").label("j"))).subquery()
        with open_store(url, readonly=True) as store, store.engine.connect() as conn:
            _frame(conn, select(func.json_extract(bad.c.j, "$[0]").label("x")))

    assert guarded(read, store_url=url) == 2
    out, err = capsys.readouterr()
    assert out == "" and err == f"error: results store {tmp_path}/campaign.db: malformed JSON\n"
