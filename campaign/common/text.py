"""Text from the store, the jobs and the user, made safe to print on a terminal.

Campaign names, reasons (a job's exception message), paths and override values come
from whoever could write them; a terminal would obey an escape sequence in them
(move the cursor, retitle the window, hide the rest of a line). Every command prints
such text through ``printable``: control characters and the invisible bidirectional
overrides become visible escapes (``\\x1b``, ``\\n``, ``\\u202e``). ``shown`` is the
same for a message that may also name a secret (a store URL, an override): redacted
first (campaign.common.redact), then escaped. Files written to disk keep the data as it is;
what goes to standard output or standard error goes through one of the two.
"""

from __future__ import annotations

import re
from typing import Any

from campaign.common.redact import redact

# C0 and C1 controls, DEL, and the Unicode format characters that reorder or hide text.
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2066-\u2069\ufeff]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(m: re.Match) -> str:
    ch = m.group()
    if ch in _NAMED:
        return _NAMED[ch]
    return f"\\x{ord(ch):02x}" if ord(ch) < 0x100 else f"\\u{ord(ch):04x}"


def printable(value: Any) -> Any:
    """``value`` as text with every control character escaped; None and numbers as they are."""
    if value is None or isinstance(value, (int, float)):
        return value
    return _UNSAFE.sub(_escape, str(value))


def shown(value: Any) -> str:
    """``value`` as one printable line with its secrets redacted: every message to the terminal."""
    return printable(redact(value))
