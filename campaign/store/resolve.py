"""Which campaign a command's reference names, unambiguously (issue #41, finding 2).

No reference means the newest campaign launched by you (campaign.store.mine: its points
verify with your key); another user's campaign is read only when named, and said to be
theirs. A reference is matched in one order: an exact id, then an id prefix, then a name
(the latest campaign of that name). A group's shared store lets anyone name a campaign like
another's id prefix, so a reference that more than one campaign answers (a name and an id
prefix, or several of a name), or that lands on another user's campaign, is said on
stderr; a command that writes or signals (``cancel``, ``resume``, ``ingest``) refuses it
in one line naming the candidates, unless the exact id was given. Read commands go on with
the rule's winner and the note.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Any, Optional

from campaign.common.errors import NotFoundError
from campaign.store.mine import current_user, is_mine

__all__ = ["Resolved", "campaign_for_read", "campaign_for_write", "current_user", "resolve"]


@dataclass
class Resolved:
    """A reference's campaign; ``notes`` say what a reader should know; ``doubt`` is why a
    writing command needs the exact id (None: the reference is unambiguous and the user's)."""

    row: dict
    notes: list[str] = field(default_factory=list)
    doubt: Optional[str] = None


def resolve(store: Any, ref: Optional[str]) -> Resolved:
    """``ref``'s campaign by the module's rule (``Store.find_campaign``), with what makes it
    doubtful: other candidates, or another user's campaign."""
    row, note = store.find_campaign(ref)
    out = Resolved(row, [note] if note else [])
    if ref is None:
        return out
    if row["id"] == ref:  # the exact id: nothing else it could mean
        others = _owner_note(store, row)
        out.notes += [others] if others else []
        return out
    candidates = store.candidates(ref)
    if len(candidates) > 1:
        ids = ", ".join(f"{c['id']} ({_how(c, ref)})" for c in candidates[:5]) + (", ..." if len(candidates) > 5 else "")
        out.doubt = f"'{ref}' matches {len(candidates)} campaigns: {ids}"
        if not note or "names" not in note:
            out.notes.append(f"{out.doubt}; showing {row['id']} (an exact id picks one)")
    owner = _owner_note(store, row)
    if owner:
        out.notes.append(owner)
        out.doubt = out.doubt or owner
    return out


def campaign_for_read(store: Any, ref: Optional[str]) -> dict:
    """``ref``'s campaign for a read command: the rule's winner, each note on stderr."""
    from campaign.common.text import printable

    found = resolve(store, ref)
    for note in found.notes:
        print(f"note: {printable(note)}", file=sys.stderr)
    return found.row


def campaign_for_write(store: Any, ref: Optional[str], command: str) -> dict:
    """``ref``'s campaign for ``command``, which writes or signals: ``NotFoundError`` (one
    line, naming the candidates) when the reference is doubtful and not the exact id;
    notes on stderr otherwise."""
    from campaign.common.text import printable

    found = resolve(store, ref)
    if found.doubt:
        raise NotFoundError(f"campaign {command} '{ref}': {found.doubt}; nothing done: give the exact id "
                            f"(campaign {command} {found.row['id']})")
    for note in found.notes:
        print(f"note: {printable(note)}", file=sys.stderr)
    return found.row


def _how(row: dict, ref: str) -> str:
    return "its id" if str(row["id"]).startswith(ref) else "its name"


def _owner_note(store: Any, row: dict) -> Optional[str]:
    """None for a campaign of this user's (campaign.store.mine: its points verify with their
    key); otherwise whose it is, by its stored ``user`` (anyone's to write: said as theirs
    only when it is not the user's own name)."""
    if is_mine(store, row):
        return None
    owner, me = row.get("user"), current_user(store)
    if owner and me and owner != me:
        return f"campaign {row['id']} is {owner}'s, not yours ({me})"
    return (f"campaign {row['id']} is not yours: its points are not signed with your key (another user's, or "
            "launched with another key or before campaign signed points)")
