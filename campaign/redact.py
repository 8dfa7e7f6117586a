"""Secrets out of everything campaign records or prints: one small helper.

A store URL's password (``postgresql://user:pw@host/db``, or ``?password=pw``) becomes
``***`` wherever a URL, a command line or a config is written down: the points' stored
config, provenance, submitit's pickles, the campaign's command line, the terminal and
Hydra's ``multirun.yaml``. Jobs get the real URL from ``STORE_URL_ENV`` instead
(``campaign/backends/entry.py``). Stdlib only.
"""

from __future__ import annotations

import re
from typing import Any

SECRET = "***"
STORE_URL_ENV = "CAMPAIGN_STORE_URL"  # the real store URL, for jobs (never on a command line)

# scheme://user:password@host  ->  scheme://user:***@host   (the password may hold ':' but not '@' '/' or
# space); also as Hydra writes a sweep point's override, its ':' escaped: scheme\://user\:password@host
_USERINFO = re.compile(r"(?P<head>\b[A-Za-z][A-Za-z0-9+.\-]*\\?://[^:/@\s\\]*\\?:)(?P<secret>[^@/\s]+)(?P<tail>@)")
# ?password=pw / &pwd=pw / &sslpassword=... in a URL's query
_QUERY = re.compile(r"(?P<head>[?&;](?:[A-Za-z_]*pass(?:word)?|pwd|secret|token)=)(?P<secret>[^&;\s'\"]+)", re.I)


def redact(text: Any) -> str:
    """``text`` with every URL password replaced by ``***`` (idempotent)."""
    out = _USERINFO.sub(lambda m: m["head"] + SECRET + m["tail"], str(text))
    return _QUERY.sub(lambda m: m["head"] + SECRET, out)


def has_secret(text: Any) -> bool:
    """Whether ``redact`` would change ``text``."""
    return redact(text) != str(text)


def redact_obj(value: Any) -> Any:
    """A copy of a plain config (dicts, lists, scalars) with every string redacted."""
    if isinstance(value, dict):
        return {k: redact_obj(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(redact_obj(v) for v in value)
    if isinstance(value, str):
        return redact(value)
    return value
