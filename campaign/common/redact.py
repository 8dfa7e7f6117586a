"""Secrets out of everything campaign records or prints: one small helper.

Three kinds of secret become ``***`` wherever a URL, a command line or a config is
written down (the points' stored config, provenance, submitit's pickles, the
campaign's command line, the terminal, Hydra's ``multirun.yaml``):

- **a URL's password.** A text that is one URL is *parsed*: the password is everything
  between the first ``:`` of the user info and the *last* ``@`` before the host, so any
  character in it (``/``, space, ``#``, ``?``, a raw ``@``) is hidden, percent-encoded
  or not. A URL inside longer text (a command line, an error message, a Hydra override
  written ``scheme\\://user\\:pw@host``) is found by pattern: the password runs over
  anything up to the first ``@`` on its line, and then over the rest of that ``@``'s
  word up to its last ``@``. Query passwords (``?password=``, ``&pwd=``, ``sslpassword``,
  ``secret``, ``token``) likewise.
- **a config value whose key is named like a secret** (``is_secret_key``), in a config
  (``redact_obj``) and in ``key=value`` text (an override ``+container.env.HF_TOKEN=hf_x``,
  an environment entry ``APPTAINERENV_HF_TOKEN=hf_x``). The rule, on the key's last
  component, lower-cased with ``_ - .`` and spaces dropped (``HF_TOKEN`` -> ``hftoken``):
  it ends with ``password``, ``passwd``, ``passphrase``, ``secret``, ``token``,
  ``credential(s)`` or ``apikey``; or it is ``key``, ``pwd`` with a prefix (``db_pwd``;
  a bare ``PWD`` is the shell's working folder), or a key of a secret kind
  (``access_key``, ``secret_key``, ``private_key``, ``auth_key``, ``ssh_key``,
  ``hmac_key``, ``signing_key``, ``encryption_key``, ``client_key``, ``master_key``).
  Not secrets: ``sort_key``, ``cache_key`` (a key that names something), ``max_tokens``
  (a count: the plural is not matched), ``password_file`` and ``token_dim`` (the secret
  word is not last). Under such a key every scalar but booleans and None is masked,
  a nested dict or list entirely.

Not a secret either: Hydra's own hint for a sweep given without ``-m`` (``To use it as a
list, use key=[value1,value2]``, ``quote the value: key=\\'value1,value2\\'``): its
``key=`` words, with exactly Hydra's placeholder values, are left as Hydra wrote them
(``HYDRA_HINTS``), so that the hint reaches the user verbatim.

Redaction is idempotent and never makes a text longer than it needs to; it may hide a
little more than the secret when a line holds a URL and, later, an ``@`` (safe side).
Jobs get the real store URL from ``STORE_URL_ENV`` instead (``campaign/backends/entry.py``),
and container variables through the runtime's environment (``campaign/catalogue/container.py``).
Stdlib only.
"""

from __future__ import annotations

import functools
import re
from typing import Any, Optional

from campaign.common.memo import SectionMemo

SECRET = "***"
STORE_URL_ENV = "CAMPAIGN_STORE_URL"  # the real store URL, for jobs (never on a command line)

_SCHEME = r"[A-Za-z][A-Za-z0-9+.\-]*\\?://"
_USER = r"[^:/@\s\\'\"]*\\?:"  # the user name and the ':' after it (escaped by Hydra: '\:')
# scheme://user:password@host -> scheme://user:***@host. The password: anything up to the
# first '@' of its line, then the rest of that '@'s word up to its last '@' (a raw '@' in it).
_USERINFO = re.compile(rf"(?P<head>\b{_SCHEME}{_USER})(?P<secret>[^@\n]*?(?:@\S*)?)(?P<tail>@)")
_ONE_URL = re.compile(rf"\s*{_SCHEME}")
_USER_RE = re.compile(_USER)
# ?password=pw / &pwd=pw / &sslpassword=... in a URL's query
_QUERY_KEY = r"(?P<head>[?&;](?:[A-Za-z_]*pass(?:word)?|pwd|secret|token)=)"
_QUERY = re.compile(_QUERY_KEY + r"(?P<secret>[^&;\s'\"]+)", re.I)
_QUERY_IN_URL = re.compile(_QUERY_KEY + r"(?P<secret>[^&;]+)", re.I)  # a whole URL: spaces too
# key=value where the key's last component is named like a secret (an override, an env entry),
# at the start of the text, of a word or of a list's item; a quoted word's value runs to its
# closing quote (an escaped one, \', inside it). A value Hydra quotes (key='a b', key="a b",
# or escaped as the shell and Hydra's hint write it: key=\'a b\') runs to its own closing
# quote, so the whole of it is masked.
_KEY_VALUE = re.compile(
    r"(?:(?<=^)|(?<=[\s\[(,]))(?P<q>['\"])?(?P<head>[+~]{0,2}(?:[A-Za-z_][\w\-]*\.)*(?P<name>[A-Za-z_][\w\-]*)=)"
    r"(?P<secret>(?(q)(?:\\.|(?!(?P=q))[^\n])+"
    r"|(?:\\?(?P<v>['\"])(?:(?!\\?(?P=v))[^\n])*(?:\\?(?P=v))?|[^\s'\"]+)))"
)

# Hydra's hint for a sweep without --multirun (hydra/_internal/config_loader_impl.py): the
# word ``key=`` followed by exactly one of these placeholders is Hydra's example, no secret.
HYDRA_HINTS = ("[value1,value2]", "\\'value1,value2\\'", "'value1,value2'")

_SECRET_ENDINGS = ("password", "passwd", "passphrase", "secret", "token", "credential", "credentials", "apikey")
_SECRET_KEY_KINDS = ("access", "secret", "private", "auth", "ssh", "hmac", "signing", "encryption", "client",
                     "master")


def is_secret_key(name: Any) -> bool:
    """Whether a config key (its last component) is named like a secret (module docstring)."""
    return _is_secret_name(str(name))


# A launch asks about the same few hundred key names for every one of its points (a
# 10,000-point launch: two million times): each answer is worked out once.
@functools.lru_cache(maxsize=4096)
def _is_secret_name(name: str) -> bool:
    compact = re.sub(r"[\s_.\-]", "", str(name).rsplit(".", 1)[-1]).lower()
    if compact.endswith(_SECRET_ENDINGS) or compact == "key":
        return True
    if compact.endswith("pwd") and compact != "pwd":
        return True
    return any(compact.endswith(kind + "key") for kind in _SECRET_KEY_KINDS)


def _one_url(text: str) -> Optional[str]:
    """``text`` redacted when it is one URL and nothing else, else None: parsed, so that
    any character of the password (up to the last '@') is hidden."""
    m = _ONE_URL.match(text)
    if not m or "\n" in text.strip():
        return None
    rest = text[m.end():]
    user = _USER_RE.match(rest)
    at = rest.rfind("@")
    if user and at >= user.end():
        rest = rest[:user.end()] + SECRET + rest[at:]
    return _QUERY_IN_URL.sub(lambda q: q["head"] + SECRET, text[:m.end()] + rest)


def redact(text: Any) -> str:
    """``text`` with every URL password and secret-named ``key=value`` replaced by ``***``
    (idempotent)."""
    text = str(text)
    return _redact_short(text) if len(text) <= _CACHED_LEN else _redact_text(text)


# The points of a launch share most of their config's strings (names, paths, options):
# each distinct short one is redacted once (a pure function of the text); long texts
# (logs, messages) are not kept.
_CACHED_LEN = 512


@functools.lru_cache(maxsize=16384)
def _redact_short(text: str) -> str:
    return _redact_text(text)


def _redact_text(text: str) -> str:
    whole = _one_url(text)
    if whole is not None:
        return whole
    out = _USERINFO.sub(lambda m: m["head"] + SECRET + m["tail"], text)
    out = _QUERY.sub(lambda m: m["head"] + SECRET, out)
    return _KEY_VALUE.sub(_masked_key_value, out)


def _masked_key_value(m: re.Match) -> str:
    """A ``key=value`` word of ``_KEY_VALUE`` with its value masked when its key is named
    like a secret, unless it is Hydra's own hint (``HYDRA_HINTS``)."""
    if not is_secret_key(m["name"]) or _hydra_hint(m):
        return m[0]
    return (m["q"] or "") + m["head"] + SECRET


def _hydra_hint(m: re.Match) -> bool:
    """Whether the ``key=`` word of ``m`` is Hydra's example: the bare key ``key``, then one
    of Hydra's placeholders, then the end of the word."""
    if m["q"] or m["head"] != "key=":
        return False
    rest = m.string[m.start("secret"):]
    return any(rest.startswith(h) and rest[len(h):len(h) + 1] in ("", " ", "\n") for h in HYDRA_HINTS)


# user:password@host as SQLAlchemy reads it: the password ends at its first '@'
_AS_SQLALCHEMY_READS = re.compile(rf"\s*{_SCHEME}[^:/]*:[^@]*@(?P<host>[^/:?]*)")


def ambiguous_password(url: str) -> Optional[str]:
    """Why ``url`` must not be opened, or None: a raw '@' in its password makes SQLAlchemy
    read the rest of the password as the host name, which the driver would then look up
    (and print in its error). One line, the URL redacted, with the fix."""
    m = _AS_SQLALCHEMY_READS.match(str(url))
    if m and "@" in m["host"]:
        return (f"store URL {redact(url)} has '@' in its password, which would be read as part of the host; "
                "percent-encode it as %40 (and '/' as %2F, ' ' as %20)")
    return None


# A store URL SQLAlchemy cannot parse (``postgresql//u:pw@h/db``, its "://" mistyped): its
# scheme-like head ``word:`` if any, then the password from the next ':' to the last '@'.
_LOOSE_USERINFO = re.compile(r"(?P<head>\s*(?:[A-Za-z][A-Za-z0-9+.\-]*:(?=/))?[^:\n]*:)(?P<secret>.*)(?P<tail>@[^@\n]*)\Z",
                             re.S)


def redact_url(url: Any) -> str:
    """A store URL as messages show it: ``redact``'s, or, for a URL written without its
    ``://`` (which ``redact`` does not take for a URL), everything between the ``:`` after
    the user name and the last ``@`` as ``***`` (``postgresql//u:***@h/db``). Only for a
    text that is a store URL: ``img:tag@sha256:...`` elsewhere is no password."""
    text = redact(url)
    if _ONE_URL.match(text) or "\n" in text.strip():
        return text
    return _LOOSE_USERINFO.sub(lambda m: m["head"] + SECRET + m["tail"], text, count=1)


def has_secret(text: Any) -> bool:
    """Whether ``redact`` would change ``text``."""
    return redact(text) != str(text)


def _mask(value: Any) -> Any:
    """A secret-named key's value: every scalar but booleans and None as ``***``."""
    if isinstance(value, dict):
        return {k: _mask(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_mask(v) for v in value)
    if value is None or isinstance(value, bool) or value == "":
        return value
    return SECRET


def redact_obj(value: Any) -> Any:
    """A copy of a plain config (dicts, lists, scalars): every string redacted, and the
    value of every key named like a secret (``is_secret_key``) masked. Each distinct
    section of a config (its ``platform``, ``trainer``...) is redacted once
    (campaign/common/memo.py): a launch redacts each of its points' configs, which share
    almost all of them."""
    return _redact_top(value, _redact_section)


def redact_shared(value: Any) -> Any:
    """``redact_obj`` of a config whose answer is read, never changed: its sections are the
    memo's own objects, shared with every other config that has them (a launch's points
    store and pickle theirs; copying each section back out was a tenth of the launch's
    redaction). Its top level is a new dict."""
    return _redact_top(value, _redact_kept)


def redact_like(value: dict, like: dict, like_redacted: dict) -> dict:
    """``redact_shared(value)`` of a config that holds many of ``like``'s very objects (a
    launch's points served from one plan, campaign/launch/planmemo.py): a top-level value
    that *is* ``like``'s takes ``like_redacted``'s answer for it (a config's values are
    never changed once redacted: the memo's own contract), any other is redacted."""
    return {k: like_redacted[k] if k in like and like[k] is v and k in like_redacted else
            _redact_entry(k, v, _redact_kept) for k, v in value.items()}


def _redact_top(value: Any, section: Any) -> Any:
    """A config redacted, each of its sections (dicts, lists) through the memo ``section``."""
    if isinstance(value, dict):
        return {k: _redact_entry(k, v, section) for k, v in value.items()}
    return _redact_obj(value)


def _redact_entry(key: Any, value: Any, section: Any) -> Any:
    """One top-level value of a config redacted (``_redact_top``): masked under a secret's
    name, a section through the memo ``section``, anything else as ``_redact_obj``."""
    if is_secret_key(key):
        return _mask(value)
    return section(value) if isinstance(value, (dict, list)) else _redact_obj(value)


def _redact_obj(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _mask(v) if is_secret_key(k) else _redact_obj(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_redact_obj(v) for v in value)
    if isinstance(value, str):
        return redact(value)
    return value


_redact_section = SectionMemo(_redact_obj)
_redact_kept = SectionMemo(_redact_obj, copied=False)
