"""A plan you can keep: ``campaign launch ... --dry-run --save-plan FILE`` writes the dry
run's plan (campaign/launch/launchplan.py) as signed JSON; ``campaign submit FILE`` submits
exactly it, or refuses in one line saying why.

The file (0600, through campaign/common/outfile.py's ``write_output``: written whole then
renamed into place, never through a link nor over a store; JSON, never pickle) holds:

- ``plan``: the launch the dry run stands for (``as_launch``: its ``dry_run`` dropped);
- ``code_version``: campaign's version (campaign/version.py) that made it;
- ``catalogue_sha256``: a digest of the configs and catalogue the points were composed from:
  sha256 over every file of the ``conf/`` tree (``campaign_conf``) and of campaign/catalogue,
  each as its path relative to its tree and the sha256 of its bytes, in path order
  (``__pycache__`` left out);
- ``cluster``: what each scheduler said of the resources the points use
  (``Backend.cluster_facts``; SLURM: each partition's nodes, GPUs and cores a node);
- ``folder``: where it was made (a submission runs there, as the launch would have);
- ``key_id`` and ``signature``: HMAC-SHA256 with the user's signing key
  (campaign/common/signing.py) over the canonical JSON of everything else.

``campaign submit`` (campaign/launch/submitplan.py) refuses (``ConfigError``, exit 2, nothing stored) a file that is not
JSON or not a plan, one not signed by this user's key (saved under another key, or edited
since), one made by another code version or from other configs, and one the cluster can no
longer hold (the backend asked again as a launch asks it: ``preflight``,
``placement_refusals``). The campaign it stores records ``# from plan sha256:<digest>``
after its command line; ``campaign status`` and ``campaign report`` name it
(campaign/common/plan_origin.py).
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import hmac
import json
import os
import sys
import time
from pathlib import Path
from typing import Any, Iterator, Mapping, Optional

from campaign.common.errors import CampaignError, ConfigError
from campaign.common.outfile import write_output
from campaign.common.plan_origin import short
from campaign.common.signing import canonical
from campaign.launch.launchplan import LaunchPlan, as_launch

FORMAT = "campaign-launch-plan"
FORMAT_VERSION = 1
MAX_BYTES = 512 * 1024 * 1024  # a plan of 100,000 points is far less; a bigger file is refused unread
_SAVE_TO: contextvars.ContextVar[Optional[Path]] = contextvars.ContextVar("save_plan_to", default=None)


@contextlib.contextmanager
def saving_to(path: Optional[Path]) -> Iterator[None]:
    """A dry run inside saves its plan to ``path`` (``--save-plan FILE``; None: not saved)."""
    token = _SAVE_TO.set(path)
    try:
        yield
    finally:
        _SAVE_TO.reset(token)


def save_requested(plan: LaunchPlan) -> None:
    """Save ``plan`` where ``--save-plan`` asked (nothing otherwise) and say so, with the digest."""
    path = _SAVE_TO.get()
    if path is None:
        return
    digest = save_plan(plan, path)
    print(f"note: plan saved to {path} ({short(digest)}): submit it with campaign submit {path}",
          file=sys.stderr if plan.dry == "json" else sys.stdout, flush=True)


def catalogue_digest() -> str:
    """The digest of the configs and catalogue (module docstring), ``sha256:<hex>``."""
    import campaign.catalogue as catalogue
    import campaign_conf

    h = hashlib.sha256()
    for tree, root in (("conf", Path(list(campaign_conf.__path__)[0])), ("catalogue", Path(catalogue.__file__).parent)):
        for path in sorted(p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
            h.update(f"{tree}/{path.relative_to(root).as_posix()}\0".encode())
            h.update(hashlib.sha256(path.read_bytes()).digest())
    return "sha256:" + h.hexdigest()


def cluster_facts(plan: LaunchPlan) -> dict[str, Any]:
    """Executor -> what its scheduler says now of the resources the points use."""
    from campaign.backends import by_executor

    return {backend.name: backend.cluster_facts(mine) for backend, mine in by_executor(plan.points)}


def key_id(key: bytes) -> str:
    """Which key signed a plan (not the key: a digest of it), so that a plan saved under
    another key is told from one edited since."""
    return hashlib.sha256(b"campaign plan key\0" + key).hexdigest()[:16]


def save_plan(plan: LaunchPlan, path: Path) -> str:
    """Write the launch ``plan`` stands for to ``path`` (module docstring); returns its digest."""
    from campaign.common.signing import signing_key
    from campaign.version import version

    key = signing_key(create=True)
    if key is None:  # create=True makes one or raises; never sign with nothing
        raise ConfigError("no signing key to sign the plan with; launch again")
    body = {"format": FORMAT, "format_version": FORMAT_VERSION, "code_version": version(),
            "catalogue_sha256": catalogue_digest(), "cluster": cluster_facts(plan), "folder": os.getcwd(),
            "made_at": time.time(), "key_id": key_id(key), "plan": as_launch(plan).to_json()}
    data = canonical(body)
    doc = {**body, "signature": hmac.new(key, data, hashlib.sha256).hexdigest()}
    # the one door for files in folders others may write (campaign/common/outfile.py): never
    # through a link, never over a store; 0600 (it holds the points' configs as they are)
    write_output(path, (json.dumps(doc, sort_keys=True, indent=1, ensure_ascii=True) + "\n").encode(),
                 flag="--save-plan", mode=0o600, hint="; give --save-plan a file in a folder of yours")
    return "sha256:" + hashlib.sha256(data).hexdigest()


def read_plan(path: Path) -> tuple[LaunchPlan, dict[str, Any], str]:
    """(the plan, its file's fields, its digest), or ``ConfigError`` in one line naming why
    it is refused: not JSON, not a plan, not signed by you or edited since, made by another
    code version or from other configs and catalogue."""
    from campaign.common.signing import signing_key
    from campaign.version import version

    where = f"plan {path}"
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"{where} cannot be read ({exc.strerror})") from None
    if len(raw) > MAX_BYTES:
        raise ConfigError(f"{where} is larger than {MAX_BYTES // 2**20} MiB: not a plan campaign saved")
    try:
        doc = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise ConfigError(f"{where} is not valid JSON ({exc}); save one with campaign launch -m ... --dry-run "
                          f"--save-plan {path}") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise ConfigError(f"{where} is not a campaign plan; save one with campaign launch -m ... --dry-run "
                          f"--save-plan {path}")
    if doc.get("format_version") != FORMAT_VERSION:
        raise ConfigError(f"{where} has format version {doc.get('format_version')!r}; this campaign reads "
                          f"{FORMAT_VERSION}: save the plan again")
    body = {k: v for k, v in doc.items() if k != "signature"}
    key = signing_key()
    if key is None or doc.get("key_id") != key_id(key):
        raise ConfigError(f"{where} is not signed by you (it was saved under another signing key); review it and "
                          f"save it again yourself: campaign launch -m ... --dry-run --save-plan {path}")
    expected = hmac.new(key, canonical(body), hashlib.sha256).hexdigest()
    if not isinstance(doc.get("signature"), str) or not hmac.compare_digest(expected, doc["signature"]):
        raise ConfigError(f"{where} was changed since it was saved (its signature does not verify); "
                          f"save it again: campaign launch -m ... --dry-run --save-plan {path}")
    if doc.get("code_version") != version():
        raise ConfigError(f"{where} was made by campaign {doc.get('code_version')}, this is campaign {version()}; "
                          f"save the plan again with this version")
    now = catalogue_digest()
    if doc.get("catalogue_sha256") != now:
        raise ConfigError(f"{where} was made from other configs or catalogue ({short(str(doc.get('catalogue_sha256')))}"
                          f" then, {short(now)} now); save the plan again")
    try:
        plan = LaunchPlan.from_json(doc.get("plan"))
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    if not plan.points:
        raise ConfigError(f"{where} holds no point")
    return plan, doc, "sha256:" + hashlib.sha256(canonical(body)).hexdigest()


def check_cluster(plan: LaunchPlan, recorded: Mapping[str, Any], where: str) -> list[str]:
    """Refuse (``ConfigError``) a plan the cluster can no longer hold, asked as a launch asks
    it (each backend's ``preflight`` and ``placement_refusals``); the notes say where its
    answers differ from those the plan recorded but still hold every point."""
    from campaign.backends import by_executor
    from campaign.launch.plan import point_where

    notes = []
    for backend, mine in by_executor(plan.points):
        try:
            backend.preflight(mine)
        except CampaignError as exc:
            raise ConfigError(f"{where}: the cluster can no longer hold it: {exc}") from None
        bad = backend.placement_refusals(mine)
        if bad:
            i = min(bad)
            more = f" (and {len(bad) - 1} more point(s))" if len(bad) > 1 else ""
            raise ConfigError(f"{where}: the cluster can no longer hold it: point {point_where(mine[i].overrides)}: "
                              f"{bad[i]}{more}; save the plan again")
        now = backend.cluster_facts(mine)
        if now != (recorded or {}).get(backend.name, {}):
            notes.append(f"{backend.name}'s answers changed since the plan was made "
                         f"({json.dumps((recorded or {}).get(backend.name))} then, {json.dumps(now)} now); "
                         f"it still holds every point")
    return notes
