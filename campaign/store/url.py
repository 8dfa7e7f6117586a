"""A results store's URL: how messages name it (password hidden) and whether this
install can open it (SQLAlchemy parses it, its driver imports), checked before anything
is written."""

from __future__ import annotations

from sqlalchemy.engine import make_url

from campaign.common.errors import StoreError, one_line
from campaign.store.advice import extra_advice
from campaign_sql.engine import postgres_driver, sqlite_path


def describe_url(url: str) -> str:
    """A store as messages name it: an SQLite file's path, else the URL with its password
    hidden (``***``)."""
    try:
        path = sqlite_path(url)
        return path if path else make_url(url).render_as_string(hide_password=True)
    except Exception:  # not a URL SQLAlchemy reads: its password found as text (redact_url)
        from campaign.common.redact import redact_url

        return redact_url(url)


# SQLAlchemy's driver for each PostgreSQL URL form -> the package that provides it.
DRIVER_PACKAGES = {"psycopg2": "psycopg2-binary", "psycopg": "psycopg[binary]"}


def check_store_url(url: str) -> None:
    """Refuse a URL SQLAlchemy cannot parse or has no driver for, before anything is written."""
    from sqlalchemy.exc import ArgumentError, NoSuchModuleError

    from campaign.common.redact import ambiguous_password, redact_url as redact

    why = ambiguous_password(url)
    if why:  # (before SQLAlchemy reads part of the password as a host name to look up)
        raise StoreError(why)
    try:
        u = postgres_driver(make_url(url))
    except ArgumentError:
        raise StoreError(f"store URL {redact(url)!r} is not a database URL; use e.g. sqlite:///results/campaign.db") from None
    except ValueError:  # SQLAlchemy reads the port with int(): host:abc, or [::1 without its ']'
        raise StoreError(f"store URL {redact(url)!r}: its port is not a number (host:PORT; an IPv6 host in "
                         "brackets, [::1]:5432), e.g. postgresql+psycopg2://host:5432/db") from None
    try:
        u.get_dialect().import_dbapi()  # the driver itself, not only SQLAlchemy's dialect for it
    except NoSuchModuleError:
        raise StoreError(f"store URL {describe_url(url)!r}: SQLAlchemy has no dialect for it") from None
    except ImportError as exc:
        raise StoreError(_driver_missing(url, u, exc)) from None


def _driver_missing(url: str, u, exc: ImportError) -> str:
    shown = describe_url(url)
    if u.get_backend_name() == "postgresql":
        driver = u.get_driver_name()
        extra = extra_advice("postgres")
        if u.drivername == "postgresql":  # a plain URL and no driver installed at all
            return (f"store URL {shown!r}: no PostgreSQL driver is installed; install campaign's postgres "
                    f"extra ({extra}), which brings psycopg 3")
        if driver == "psycopg":
            return f"store URL {shown!r} needs psycopg 3; install campaign's postgres extra ({extra})"
        package = DRIVER_PACKAGES.get(driver, driver)
        return (f"store URL {shown!r} needs the {driver} driver (pip install {package}); or write it "
                f"postgresql+psycopg://... after installing campaign's postgres extra ({extra})")
    return f"store URL {shown!r} needs a database driver SQLAlchemy could not import: {one_line(exc)}"
