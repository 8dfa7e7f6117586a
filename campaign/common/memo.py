"""Work done once per distinct section of a config, not once per point.

The points of a sweep share almost all of their config: the points of one group choice
(platform=a100 trainer=vit) differ only in the few values the sweep varies (gpus=2,
seed=3). A pure function of a section (redacting it, checking its numbers) is worth
working out once per distinct section. ``fingerprint`` is the key: ``marshal``'s bytes
of the section, made in C, which decode to exactly one value, so two sections with the
same bytes are equal in every key, value and type (``1``, ``1.0`` and ``True`` differ).
A section ``marshal`` refuses (an enum, an object) has no fingerprint: the caller does
the work itself.
"""

from __future__ import annotations

import marshal
from typing import Any, Callable, Optional

LIMIT = 4096  # sections kept per memo; a memo past it starts again (a launch has a few hundred)


def fingerprint(value: Any) -> Optional[bytes]:
    """``value``'s key in a memo, or None when ``marshal`` refuses it."""
    try:
        return marshal.dumps(value)
    except ValueError:
        return None


class SectionMemo:
    """Answers of one pure function of a plain section, by the section's fingerprint. A
    value answer comes back as a fresh copy (``copied``), so that a caller may change
    it."""

    def __init__(self, fn: Callable[[Any], Any], copied: bool = True):
        self.fn = fn
        self.copied = copied
        self._answers: dict[bytes, Any] = {}

    def __call__(self, value: Any) -> Any:
        key = fingerprint(value)
        if key is None:
            return self.fn(value)
        got = self._answers.get(key)
        if got is None:
            answer = self.fn(value)
            if self.copied:
                got = fingerprint(answer)
                if got is None:  # an answer marshal cannot copy: not kept
                    return answer
            else:
                got = (answer,)
            if len(self._answers) >= LIMIT:
                self._answers.clear()
            self._answers[key] = got
        return marshal.loads(got) if self.copied else got[0]
