"""Stored values typed at the door (issue #41).

A store is shared: whoever can write it can put any value in any column (SQLite keeps
text in an INTEGER column, and numbers beyond any date in a time column). The read
commands (status, harvest, report, plan, cancel, resume) take a campaign's points
through ``typed_points``: each column a read command uses is checked for its type and
range, or coerced where the value means the same (``2.0`` GPUs: 2); a point with a
value that is neither is left out, with one warning line naming the point, the column
and the value (escaped, cut short), and the rest of the campaign reads as ever. Long
texts (a reason) are cut to ``MAX_TEXT`` characters, saying how long they were.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Mapping, Optional, Sequence

from campaign.common.text import printable

MAX_TEXT = 4000  # characters of a reason (or a path) a read command keeps: a line of a table, not a log
MAX_NAME = 64  # a name column's bound (String(64) in the schema, which PostgreSQL enforces and SQLite does not)
LATEST_TIME = 253402300799.0  # 9999-12-31T23:59:59Z: the last unix time a date can show
SHOWN_VALUE = 60  # characters of a refused value its warning shows
LEFT_OUT = "; left out"  # how the warning of a point left out ends


class Refused(ValueError):
    """A stored value that is not of its column's type or range: ``str(exc)`` says what it should be."""


def _integer(value: Any) -> Optional[int]:
    """``value`` as an int where it is one (``2``, ``2.0``); None otherwise (bool and text included)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    return None


def integer(low: int, what: str, *, nullable: bool = False) -> Callable[[Any], Optional[int]]:
    def check(value: Any) -> Optional[int]:
        if value is None and nullable:
            return None
        n = _integer(value)
        if n is None or n < low or n > 2**63 - 1:
            raise Refused(what)
        return n

    return check


def unix_time(value: Any) -> Optional[float]:
    """A time column: a unix time from 1970 up to the year 9999, or none."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= LATEST_TIME:
        raise Refused("not a unix time (seconds from 1970 up to the year 9999)")
    return float(value)


def is_date(value: Any) -> bool:
    """Whether ``value`` is a unix time a date can show (``unix_time``), not none."""
    try:
        return unix_time(value) is not None
    except Refused:
        return False


def name(value: Any) -> str:
    """A name column (platform, trainer, ...): text of 1 to MAX_NAME characters."""
    if not isinstance(value, str) or not 0 < len(value) <= MAX_NAME:
        raise Refused(f"not a name (text of 1 to {MAX_NAME} characters)")
    return value


def text(value: Any) -> Optional[str]:
    """A free text column (a reason, a path, a job id): text or none, cut to MAX_TEXT characters."""
    if value is None:
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    if not isinstance(value, str):
        raise Refused("not text")
    return cut(value)


def path(value: Any) -> Optional[str]:
    """A folder's path (a campaign's results folder): text of at most MAX_TEXT characters
    without a NUL, or none; never cut (a cut path names another folder)."""
    if value is None:
        return None
    if not isinstance(value, str) or not 0 < len(value) <= MAX_TEXT or "\0" in value:
        raise Refused(f"not a path (text of 1 to {MAX_TEXT:,} characters, no NUL)")
    return value


def cut(value: str, limit: int = MAX_TEXT) -> str:
    """``value`` cut to ``limit`` characters, saying how long it was."""
    if len(value) <= limit:
        return value
    return f"{value[:limit]}... ({len(value):,} characters, cut to {limit:,})"


def json_object(value: Any) -> Any:
    """A JSON column that holds an object (a config, a provenance): a mapping or none (one
    beyond the parser's bounds, campaign.common.bounded.Unreadable, is an empty mapping)."""
    if value is not None and not isinstance(value, Mapping):
        raise Refused("not a JSON object")
    return value


def json_words(value: Any) -> Any:
    """A JSON column that holds overrides: a list of ``key=value`` texts, or none
    (``Unreadable`` passes: its readers say so)."""
    if value is None or isinstance(value, Mapping):
        return value
    words = value
    if isinstance(value, str):  # the list's JSON as a text (a store that encoded it twice): its readers parse it
        from campaign.common.bounded import STORED, BoundError, loads

        try:
            words = loads(value, "stored overrides", budget=STORED)
        except (BoundError, ValueError):
            words = None
    if not isinstance(words, list) or not all(isinstance(w, str) for w in words):
        raise Refused("not a JSON list of key=value texts")
    return value


# The columns of Store.points' rows a read command uses, and what each must be.
POINT_COLUMNS: dict[str, Callable[[Any], Any]] = {
    "idx": integer(0, "not a point index (an integer, 0 or more)"),
    "platform": name, "trainer": name, "experiment": name, "dataset": name, "executor": name, "state": name,
    "gpus": integer(1, "not a positive integer"),
    "nodes": integer(1, "not a positive integer"),
    "repeat": integer(0, "not an integer, 0 or more"),
    "batch_per_gpu": integer(1, "not a positive integer", nullable=True),
    "iterations": integer(1, "not a positive integer", nullable=True),
    "job_id": text, "job_folder": text, "log_path": text, "reason": text, "attempt_reason": text,
    "attempt_state": lambda v: None if v is None else name(v),
    "attempt_no": integer(0, "not an integer, 0 or more", nullable=True),
    "submitted_at": unix_time, "started_at": unix_time, "ended_at": unix_time,
    "attempt_started_at": unix_time, "attempt_ended_at": unix_time,
    "config": json_object, "overrides": json_words,
}

# The columns of Store.attempts' rows (the attempts table, the report), and what each must be.
ATTEMPT_COLUMNS: dict[str, Callable[[Any], Any]] = {
    "attempt_no": integer(0, "not an integer, 0 or more"),
    "state": name, "origin": lambda v: None if v is None else name(v),
    "job_id": text, "reason": text, "node_list": text,
    "world_size": integer(1, "not a positive integer", nullable=True),
    "started_at": unix_time, "ended_at": unix_time, "submitted_at": unix_time,
    "provenance": json_object, "overrides": json_words,
}

# The columns of a campaign's row, and what each must be; ``created_at``: typed_created_at.
CAMPAIGN_COLUMNS: dict[str, Callable[[Any], Any]] = {
    "name": text, "command": text, "results_dir": path, "host": text, "user": text, "overrides": json_words,
}


# The stored config's values a read command computes with (a point's dataset in words:
# campaign.catalogue.dataset_label), by their dotted path; absent or null: left to their defaults.
CONFIG_VALUES: dict[tuple[str, ...], Callable[[Any], Any]] = {
    ("dataset", "image_size"): integer(1, "not a positive integer", nullable=True),
    ("dataset", "channels"): integer(1, "not a positive integer", nullable=True),
    ("dataset", "num_classes"): integer(1, "not a positive integer", nullable=True),
}


def _check_config(config: Any) -> None:
    """A Refused naming the first value of CONFIG_VALUES ``config`` holds that is not of its type."""
    if not isinstance(config, Mapping):  # none, or unreadable: said by unreadable_warnings
        return
    for path, check in CONFIG_VALUES.items():
        section: Any = config
        for key in path[:-1]:
            section = section.get(key) if isinstance(section, Mapping) else None
        if not isinstance(section, Mapping) or path[-1] not in section:
            continue
        try:
            check(section[path[-1]])
        except Refused as exc:
            raise Refused(f"{'.'.join(path)}={shown_value(section[path[-1]])} is {exc}") from None


def shown_value(value: Any) -> str:
    """A refused value as its warning shows it: its repr, escaped, cut short."""
    r = repr(value)
    if len(r) > SHOWN_VALUE:
        r = r[:SHOWN_VALUE] + "..."
    return printable(r)


def _typed(row: Mapping[str, Any], columns: Mapping[str, Callable[[Any], Any]]) -> dict:
    """``row`` with each of ``columns`` it holds checked (and coerced); a Refused naming the
    first column that is neither (``gpus='x' is not a positive integer``)."""
    out = dict(row)
    for column, check in columns.items():
        if column in out:
            try:
                out[column] = check(out[column])
            except Refused as exc:
                raise Refused(f"{column}={shown_value(out[column])} is {exc}") from None
    return out


def typed_point(row: Mapping[str, Any]) -> dict:
    """``row`` with each column of POINT_COLUMNS it holds checked (and coerced), and its
    config's CONFIG_VALUES; a Refused naming the first value that is neither."""
    out = _typed(row, POINT_COLUMNS)
    _check_config(out.get("config"))
    return out


def typed_points(campaign_id: str, rows: Sequence[Mapping[str, Any]]) -> tuple[list[dict], list[str]]:
    """The rows whose columns are of their type and range (coerced), and one warning per
    row left out: ``point #3 (id 17) of campaign X: gpus='x' is not a positive integer; left out``."""
    good, warnings = [], []
    for row in rows:
        try:
            good.append(typed_point(row))
        except Refused as exc:
            idx = row.get("idx")
            where = f"#{idx}" if _integer(idx) is not None else f"#{shown_value(idx)}"
            warnings.append(f"point {where} (id {printable(row.get('id'))}) of campaign {printable(campaign_id)}: "
                            f"{exc}{LEFT_OUT}")
    return good, warnings


def typed_attempts(campaign_id: str, rows: Sequence[Mapping[str, Any]]) -> tuple[list[dict], list[str]]:
    """The attempts (``Store.attempts``' rows) whose columns are of their type and range
    (ATTEMPT_COLUMNS, coerced), and one warning per attempt left out:
    ``attempt 0 of point #3 of campaign X: started_at='x' is not a unix time ...; left out``."""
    good, warnings = [], []
    for row in rows:
        try:
            good.append(_typed(row, ATTEMPT_COLUMNS))
        except Refused as exc:
            no, idx = row.get("attempt_no"), row.get("idx")
            warnings.append(f"attempt {no if _integer(no) is not None else shown_value(no)} of point "
                            f"#{idx if _integer(idx) is not None else shown_value(idx)} of campaign "
                            f"{printable(campaign_id)}: {exc}{LEFT_OUT}")
    return good, warnings


def typed_campaign(campaign: Mapping[str, Any]) -> tuple[dict, list[str]]:
    """The campaign row with each value that is not of its type (CAMPAIGN_COLUMNS, and
    ``created_at``: typed_created_at) read as none, one warning line each: a campaign is
    what a command was asked about, so it is shown without the value, not left out."""
    out, warnings = typed_created_at(campaign)
    for column, check in CAMPAIGN_COLUMNS.items():
        if column in out:
            try:
                out[column] = check(out[column])
            except Refused as exc:
                warnings.append(f"campaign {printable(out.get('id'))}: {column}={shown_value(out[column])} is {exc}; "
                                "shown without it")
                out[column] = None
    return out, warnings


def typed_created_at(campaign: Mapping[str, Any]) -> tuple[dict, list[str]]:
    """The campaign row with a ``created_at`` that is no date read as none, and its warning."""
    out = dict(campaign)
    try:
        unix_time(out.get("created_at"))
    except Refused as exc:
        warning = (f"campaign {printable(out.get('id'))}: created_at={shown_value(out.get('created_at'))} is {exc}; "
                   "shown without it")
        out["created_at"] = None
        return out, [warning]
    return out, []
