"""Per-user signatures of what a resubmission trusts: a stored point is data, never code.

A store (a group's PostgreSQL, an SQLite file on a shared filesystem) may be written by
others. ``campaign resume``, automatic retries and waves rebuild each job from the point's
stored config and the campaign's ``results_dir``: whoever can write the store could make
the user run anything (``dataset.root``, ``platform.extra_sbatch``, ``container.*``,
``trainer.module``, the job folder). So a launch signs each point it registers with a key
only the user holds, and a resubmission refuses a point whose signature does not match
before anything of it is planned, imported or submitted.

The key: ``signing.key`` (32 random bytes) in the user's private config folder
(``$CAMPAIGN_CONFIG_DIR``, else ``$XDG_CONFIG_HOME/campaign``, else ``~/.config/campaign``),
made 0600 in a 0700 folder by the first launch; a key file that is a link, not the
user's, or readable by others is refused with the fix. The signature: HMAC-SHA256 over a
canonical JSON (``payload``) of the campaign id and results folder and the point's
stored columns a resubmission uses, exactly as stored (redacted). Stdlib only.
"""

from __future__ import annotations

import errno
import hmac
import json
import os
import secrets
import stat
from pathlib import Path
from typing import Any, Mapping, Optional

from campaign.common.errors import ConfigError
from campaign.common.jsontext import scalar

CONFIG_DIR_ENV = "CAMPAIGN_CONFIG_DIR"
KEY_FILE = "signing.key"
KEY_BYTES = 32
SIGNED_VERSION = 1  # of the payload below: a new one never verifies an old signature by accident
# The point's columns a resubmission reads (besides its config and overrides): which point
# it is, where it runs, and its schedule, checked against the plan made again.
SIGNED_COLUMNS = ("idx", "repeat", "platform", "executor", "batch_per_gpu", "iterations")


def config_dir() -> Path:
    """The user's private config folder (module docstring)."""
    if os.environ.get(CONFIG_DIR_ENV):
        return Path(os.environ[CONFIG_DIR_ENV]).expanduser()
    xdg = os.environ.get("XDG_CONFIG_HOME")
    base = Path(xdg) if xdg and os.path.isabs(xdg) else Path.home() / ".config"  # XDG: a relative one is ignored
    return base / "campaign"


def key_path() -> Path:
    return config_dir() / KEY_FILE


def signing_key(*, create: bool = False) -> Optional[bytes]:
    """The user's signing key; with ``create`` (a launch), made when there is none yet.
    None when there is none (and not ``create``). ``ConfigError`` for a key file that
    is a link, not a regular file, not the user's, readable by others, or damaged."""
    path = key_path()
    key = _read_key(path)
    if key is not None or not create:
        return key
    _make_key(path)
    key = _read_key(path)
    if key is None:  # removed meanwhile by someone else: refuse rather than sign with nothing
        raise ConfigError(f"signing key {path} vanished as it was made; launch again")
    return key


def _read_key(path: Path) -> Optional[bytes]:
    """The key in ``path``, opened without following a link or blocking on a FIFO, and
    checked as a secret of this user's before a byte of it is used."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise ConfigError(f"signing key {path} is a symbolic link; campaign uses a regular file of yours only: "
                              f"replace the link with the file itself, or remove it (the next launch makes a new "
                              f"key, and campaigns launched with the old one can no longer be resumed)") from None
        raise ConfigError(f"signing key {path} cannot be read ({exc.strerror}); fix its permissions: "
                          f"chmod 600 {path}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ConfigError(f"signing key {path} is not a regular file; remove it (the next launch makes a new key)")
        if st.st_uid != os.geteuid():
            raise ConfigError(f"signing key {path} belongs to uid {st.st_uid}, not to you (uid {os.geteuid()}); "
                              f"remove it (the next launch makes a key of yours) or set {CONFIG_DIR_ENV} to a "
                              "folder of your own")
        if st.st_mode & 0o077:
            raise ConfigError(f"signing key {path} is readable or writable by others (mode "
                              f"{stat.S_IMODE(st.st_mode):04o}); make it yours alone: chmod 600 {path}")
        data = os.read(fd, KEY_BYTES + 1)
    finally:
        os.close(fd)
    if len(data) != KEY_BYTES:
        raise ConfigError(f"signing key {path} holds {len(data)} bytes, not {KEY_BYTES}: damaged; remove it (the "
                          "next launch makes a new key, and campaigns launched with this one can no longer be resumed)")
    return data


def _make_key(path: Path) -> None:
    """A new key at ``path``, written whole to a private temporary file and linked into
    place (two launches at once: the first link wins, the other reads it)."""
    folder = path.parent
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"cannot make the folder of your signing key {folder} ({exc.strerror}); set "
                          f"{CONFIG_DIR_ENV} to a private folder of yours") from None
    tmp = folder / f".{KEY_FILE}.{os.getpid()}.{secrets.token_hex(4)}"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0), 0o600)
        try:
            os.fchmod(fd, 0o600)  # whatever the umask
            os.write(fd, secrets.token_bytes(KEY_BYTES))
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.link(tmp, path)
        except FileExistsError:
            pass  # another launch made it first: that one is the key
    except OSError as exc:
        raise ConfigError(f"cannot write your signing key {path} ({exc.strerror}); set {CONFIG_DIR_ENV} to a "
                          "private folder of yours") from None
    finally:
        try:
            os.unlink(tmp)
        except OSError:
            pass


def canonical(doc: Mapping[str, Any]) -> bytes:
    """The canonical JSON a signature is made over: sorted keys, no spaces, ASCII."""
    return json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


def payload(campaign_id: str, results_dir: Optional[str], row: Mapping[str, Any], texts: Any = None) -> bytes:
    """What a signature covers, as canonical JSON: the campaign, its results folder, and
    the point's stored config, overrides and ``SIGNED_COLUMNS``, as they are stored.
    ``texts`` (a ``campaign.common.jsontext.Texts``, Store.register): the same bytes, made
    from the config's shared sections' texts."""
    doc = {
        "v": SIGNED_VERSION,
        "campaign": campaign_id,
        "results_dir": results_dir,
        "config": row.get("config"),
        "overrides": row.get("overrides"),
        **{c: row.get(c) for c in SIGNED_COLUMNS},
    }
    doc["repeat"] = int(doc["repeat"] or 0)  # the column's default when a row leaves it out
    return canonical(doc) if texts is None else texts.canonical(doc).encode()


def sign(key: bytes, campaign_id: str, results_dir: Optional[str], row: Mapping[str, Any], texts: Any = None) -> str:
    """The point's signature (64 hex digits); ``texts``: as ``payload``'s."""
    return hmac.digest(key, payload(campaign_id, results_dir, row, texts), "sha256").hex()


def verify(key: bytes, campaign_id: str, results_dir: Optional[str], row: Mapping[str, Any]) -> bool:
    """Whether ``row['signature']`` is the signature of ``row`` with ``key``."""
    stored = row.get("signature")
    if not isinstance(stored, str):
        return False
    try:
        expected = sign(key, campaign_id, results_dir, row)
    except (TypeError, ValueError):  # a stored value no launch could have signed
        return False
    return hmac.compare_digest(expected, stored)


# ------------------------------------------------------------------ job ids
# A point's job id is signed apart from its config: resume re-signs a config, every
# submission (launch, resume, a retry, a wave) records a new job. ``campaign cancel``
# signals a job only when this signature verifies: a crafted campaign (another user's, or a
# row written by hand) naming someone's job id has none of this user's.
JOB_SIGNED_VERSION = 1


def job_payload(campaign_id: str, point_id: Any, executor: Any, job_id: Any, job_folder: Any) -> bytes:
    """What a job signature covers, as canonical JSON: the campaign, the point (its row id),
    the executor that would signal the job, its id and its folder, as they are stored.
    Written here key by key (a launch signs each of its points' jobs): byte for byte
    ``canonical`` of ``{"v": JOB_SIGNED_VERSION, "kind": "job", "campaign": ..., "point":
    ..., "executor": ..., "job_id": ..., "job_folder": ...}``, sorted."""
    return (f'{{"campaign":{scalar(campaign_id)},"executor":{scalar(executor)},"job_folder":{scalar(job_folder)},'
            f'"job_id":{scalar(job_id)},"kind":"job","point":{scalar(point_id)},"v":{JOB_SIGNED_VERSION}}}').encode()


def sign_job(key: bytes, campaign_id: str, point_id: int, executor: str, job_id: str,
             job_folder: Optional[str]) -> str:
    """The signature of a point's recorded job (64 hex digits)."""
    return hmac.digest(key, job_payload(campaign_id, point_id, executor, job_id, job_folder), "sha256").hex()


def verify_job(key: bytes, campaign_id: str, row: Mapping[str, Any]) -> bool:
    """Whether ``row['job_signature']`` signs the point row's ``id``, ``executor``,
    ``job_id`` and ``job_folder`` within ``campaign_id`` with ``key``."""
    stored = row.get("job_signature")
    if not isinstance(stored, str):
        return False
    try:
        expected = sign_job(key, campaign_id, row.get("id"), row.get("executor"), row.get("job_id"),
                            row.get("job_folder"))
    except (TypeError, ValueError):
        return False
    return hmac.compare_digest(expected, stored)
