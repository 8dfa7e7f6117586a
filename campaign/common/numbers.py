"""Every number campaign takes from outside, checked once, the same way, before it is used.

A number comes from a config key (``seed=...``, ``repeats=...``), a CLI option
(``--gpus``, ``--interval``) or a filter (``--where gpus=...``). Python holds integers of
any size, but the store (BIGINT), torch's seed and SLURM do not: a value beyond 64 bits
is accepted here and fails later with ``OverflowError`` (or stores a wrong value). A
size (points, repeats, iterations) builds that many things, so ``repeats=10**12`` is
refused against its cap before anything is built. An interval or timeout must be a
positive, finite number of seconds. Each check raises ``ConfigError`` (one line, exit 2)
naming the value and the range it must be in.
"""

from __future__ import annotations

import math
from typing import Any

from campaign.common.errors import ConfigError

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1  # what the store's BIGINT, torch and SLURM hold


def _shown(value: Any) -> str:
    # a 10,000-digit integer is cut for the message (the line stays one short line); one
    # beyond Python's own str() digit limit is never converted
    if isinstance(value, int) and value.bit_length() > 256:
        return f"<an integer of about {int(value.bit_length() * 0.30103):,} digits>"
    text = str(value)
    unit = "digits" if text.lstrip("+-").replace("_", "").isdigit() else "characters"
    return text if len(text) <= 24 else f"{text[:10]}...{text[-4:]} ({len(text)} {unit})"


def int64(value: Any, what: str) -> int:
    """``value`` as an int within 64 bits (signed); ``ConfigError`` naming ``what`` otherwise."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{what} must be an integer, got {_shown(value)!r}")
    if not INT64_MIN <= value <= INT64_MAX:
        raise ConfigError(f"{what}={_shown(value)} is beyond a 64-bit integer ({INT64_MIN} to {INT64_MAX})")
    return value


def parse_int64(text: str, what: str) -> int:
    """The integer ``text`` spells, within 64 bits; ``ConfigError`` otherwise (no digit-count
    limit is reached: a text longer than any 64-bit integer is refused before ``int``)."""
    text = str(text).strip()
    digits = text.lstrip("+-").replace("_", "")  # int() takes 1_000; a word is not a large number
    if digits.isdigit() and len(digits.lstrip("0")) > 19:  # 2**63 has 19 digits: no need to convert it
        raise ConfigError(f"{what}={_shown(text)} is beyond a 64-bit integer ({INT64_MIN} to {INT64_MAX})")
    try:
        value = int(text)
    except ValueError:
        raise ConfigError(f"{what} takes an integer, got {_shown(text)!r}") from None
    return int64(value, what)


def within_cap(value: Any, what: str, cap: Any, cap_key: str) -> int:
    """``value`` as a positive int of at most ``cap`` (the config key ``cap_key`` sets it)."""
    value = int64(value, what)
    if value < 1:
        raise ConfigError(f"{what} must be >= 1, got {value}")
    if value > cap:
        raise ConfigError(f"{what}={_shown(value)} is over the cap of {cap:,} ({cap_key}); "
                          f"give fewer, or raise {cap_key} if you mean it")
    return value


def positive_seconds(value: Any, what: str) -> float:
    """``value`` as a positive, finite number of seconds; ``ConfigError`` otherwise."""
    try:
        seconds = float(value)
    except (TypeError, ValueError, OverflowError):
        raise ConfigError(f"{what} takes a number of seconds, got {_shown(value)!r}") from None
    if not math.isfinite(seconds) or seconds <= 0:
        raise ConfigError(f"{what} must be a positive number of seconds, got {_shown(value)}")
    return seconds
