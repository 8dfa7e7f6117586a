"""The ids campaign writes, checked where they come back from a store others can write.

A shared store is data: whoever can write it can put any text where the tool keeps a
campaign id, a point's job id or a spool file's name. Such a value becomes a path
(``<results>/jobs/<campaign id>/...``) or a scheduler's argument only after it is
checked against the grammar the tool itself writes it in; anything else is refused
with one line that shows the value escaped and cut short, never used.
"""

from __future__ import annotations

import re
from typing import Any, Optional, Pattern

from campaign.common.errors import StoreError

# campaign.launch.submit.new_campaign_id: launch time and 4 random hex digits
CAMPAIGN_ID = re.compile(r"\d{8}-\d{6}-[0-9a-f]{4}")
CAMPAIGN_ID_FORM = "YYYYmmdd-HHMMSS-xxxx"
# trainers.writer: p<point id>-a<attempt no>-r<rank>.jsonl
SPOOL_NAME = re.compile(r"p([1-9]\d{0,17})-a(\d{1,9})-r(\d{1,9})\.jsonl")
SHOWN_CHARS = 40  # a stored value is shown this long at most in a message


def shown(value: Any) -> str:
    """A value read from the store as a message shows it: quoted, control characters and
    quotes escaped (``repr``), cut at ``SHOWN_CHARS`` characters."""
    text = str(value)
    cut = text[:SHOWN_CHARS]
    return repr(cut) + ("..." if len(text) > SHOWN_CHARS else "")


def is_campaign_id(value: Any) -> bool:
    """Whether ``value`` is a campaign id as the tool writes it."""
    return isinstance(value, str) and CAMPAIGN_ID.fullmatch(value) is not None


def check_campaign_id(value: Any) -> str:
    """``value`` when it is a campaign id as the tool writes it (safe to join into a path);
    ``StoreError`` (one line) otherwise."""
    if not is_campaign_id(value):
        raise StoreError(f"the store holds a campaign id {shown(value)}, which is not one campaign writes "
                         f"({CAMPAIGN_ID_FORM}); it names no folder campaign will use. The store was altered: "
                         "ask its owner, or name another store with --store URL")
    return value


def job_id_problem(job_id: Any, grammar: Pattern[str], scheduler: str, forms: str) -> Optional[str]:
    """None when ``job_id`` matches ``grammar`` (what the backend stores); else the reason a
    point with it is shown lost: the id (escaped) and that it was not sent to the scheduler."""
    if isinstance(job_id, str) and grammar.fullmatch(job_id):
        return None
    return (f"the store's job id {shown(job_id)} is not a {scheduler} job id as campaign writes it ({forms}); "
            f"not sent to {scheduler}")
