"""Pretrained weights a point names by torchvision's name (``trainer.params.weights=
ResNet18_Weights.IMAGENET1K_V1``, ``DEFAULT``), fetched ONCE by the launch, on this host,
before anything is stored or submitted; the jobs (compute nodes are often offline)
load the file from the results folder.

The design, end to end:

- the trainer declares which names it takes and the file each means (``TrainerDef.named_weights``;
  the frozen-backbone trainer's table, torch-free, is trainers/specs/_torchvision_weights.py:
  a static table of torchvision's names and URLs that a test checks against torchvision,
  because this side never imports torch and a container's Python is out of reach here);
- planning (``with_weights_file``, pure) writes the file the job loads into
  ``trainer.params.weights_file``: ``<results_dir>/weights/<the URL's file name>`` for a
  name, the absolute PATH for a file, null for random init; ``weights`` stays as given, so
  the stored config says both what was asked and what was loaded;
- the launch (``fetch_weights``) makes sure each file is there and is what it should be,
  every time (pip checks every wheel's hash, not only a fresh download's): a file already
  in the cache (fetched before, or placed by hand) is used only when its sha256 starts
  with the prefix its torchvision name carries; a user's PATH has its full sha256
  computed; either way the digest goes into ``trainer.params.weights_sha256`` and the job
  checks the bytes it loads against it (trainers/state_file.py). A file that is a link,
  or whose digest differs, is refused in one line naming it. A missing named file is
  downloaded through the one door (campaign_door/write.py: the cache folder made or
  checked, a new file made with O_EXCL|O_NOFOLLOW, its mode set with fchmod, its sha256
  checked, then renamed into place); what cannot be fetched (no network: the usual case
  on a cluster's login node too) is refused in one line naming the file to place and
  where, exit status 2, nothing stored. A missing PATH is refused.
- a dry run fetches nothing and refuses nothing: it notes which files are missing or
  would be refused.
- the trainers whose params hold ``weights_sha256`` take part: frozen_backbone
  (``weights_file``, which a name or a PATH resolves to) and vit (``weights``, a PATH).
"""

from __future__ import annotations

import hashlib
import http.client
import os
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

from campaign.common.errors import ConfigError, one_line
from campaign_door import Refused, check_file, open_folder, sha256_file

CACHE = "weights"  # the cache's folder under results_dir (the shared file system the jobs read)
TIMEOUT_S = 30.0  # a socket that says nothing for this long: the download is given up
CHUNK = 1 << 20


def cache_folder(results_dir: str) -> Path:
    """Where named weights are kept: ``<results_dir>/weights/`` (absolute, as the store keeps results_dir)."""
    return Path(results_dir).expanduser().resolve() / CACHE


def with_weights_file(config: Mapping[str, Any], spec: Any, params: dict[str, Any]) -> dict[str, Any]:
    """``params`` (completed, checked) with ``weights_file``: the file the job loads, from
    ``params.weights`` (module docstring); unchanged for a trainer that names no weights."""
    if spec.named_weights is None or "weights_file" not in params:
        return params
    value = params.get(spec.weights_param)
    named = spec.named_weights(params)  # checked already: its TrainerDef.check refused a bad name
    if named is not None:
        path: Optional[Path] = cache_folder(str(config.get("results_dir") or ".")) / named.file
    else:
        path = Path(str(value)).expanduser().absolute() if value else None
    return {**params, "weights_file": str(path) if path else None}


def _file_of(params: dict, key: str = "weights") -> Optional[str]:
    """The weights file a point's params load (None: none): ``weights_file`` where the
    trainer resolves one, else ``key`` (a PATH) where its params record a digest."""
    if params.get("weights_file"):
        return str(params["weights_file"])
    if "weights_sha256" in params and "weights_file" not in params and params.get(key):
        return str(Path(str(params[key])).expanduser().absolute())
    return None


def _wanted(points: Sequence[Any]) -> dict[Path, tuple[str, Any, list[dict]]]:
    """Each weights file the points load -> (``trainer.params.KEY=VALUE`` that asked for it,
    its NamedWeights or None, the params of the points that load it)."""
    from trainers import registry

    wanted: dict[Path, tuple[str, Any, list[dict]]] = {}
    for p in points:
        params = p.config["trainer"].get("params") or {}
        spec = registry.spec_of(p.config["trainer"])
        file = _file_of(params, spec.weights_param)
        if not file:
            continue
        named = spec.named_weights(params) if spec.named_weights is not None else None
        asked = f"trainer.params.{spec.weights_param}={params.get(spec.weights_param)}"
        wanted.setdefault(Path(file), (asked, named, []))[2].append(params)
    return wanted


def fetch_weights(points: Sequence[Any], *, dry_run: bool = False) -> tuple[list[str], list[str]]:
    """Make sure every weights file the points load is there and is what it should be
    (module docstring): fetch each named one missing from the cache, once; check every
    one's sha256 and record it in the points' ``trainer.params.weights_sha256``. Returns
    (what a dry run lacks: would be refused here, what a dry run notes: files the launch
    would download); a launch returns ([], []) or raises ``ConfigError`` (one line)."""
    lacks: list[str] = []
    notes: list[str] = []
    for path, (asked, named, loaders) in _wanted(points).items():
        if os.path.lexists(path):
            try:  # every use: the name's prefix for torchvision's files, the full digest for a PATH
                digest = check_file(path, named.sha256_prefix) if named is not None else sha256_file(path)
            except Refused as exc:
                if not dry_run:
                    raise ConfigError(f"{asked}: {exc}") from None
                lacks.append(f"{asked}: {exc}")
                continue
            for params in loaders:
                params["weights_sha256"] = digest
            continue
        if named is None:
            msg = f"{asked}: no such file {path}; {_instead(asked)}"
            if not dry_run:
                raise ConfigError(msg)
            lacks.append(msg)
        elif dry_run:
            notes.append(f"{asked}: {named.file} is not in {path.parent}/ yet; the launch "
                         f"downloads it from {named.url} (once, for every job), or place it there by hand")
        else:
            download(named.url, path, asked=asked, sha256_prefix=named.sha256_prefix)
            digest = check_file(path, named.sha256_prefix)  # as the jobs will: the file now in place
            for params in loaders:
                params["weights_sha256"] = digest
    return lacks, notes


def refusal(asked: str, url: str, path: Path, why: str) -> str:
    """The one line a launch that cannot fetch ``url`` into ``path`` says."""
    asked = asked if "=" in asked else f"trainer.params.weights={asked}"  # a bare value: torchvision's key
    key = asked.partition("=")[0]
    return (f"{asked}: could not download {url} ({why}); place {path.name} in "
            f"{path.parent}/ (or give {key}=PATH)")


def _instead(asked: str) -> str:
    """What to give instead of a missing file, for the params key ``asked`` sets."""
    if asked.startswith("trainer.params.pretrained="):
        from trainers.specs._swinv2_weights import WEIGHTS

        return f"give a checkpoint file that exists, a named one ({', '.join(WEIGHTS)}), or null (random init)"
    return ("give a state-dict file that exists, a torchvision weights name (DEFAULT, or e.g. "
            "ResNet18_Weights.IMAGENET1K_V1), or null")


def _why(exc: BaseException) -> str:
    if isinstance(exc, urllib.error.HTTPError):
        return f"HTTP {exc.code} {exc.reason}"
    if isinstance(exc, urllib.error.URLError):
        return one_line(exc.reason)
    return one_line(exc) or type(exc).__name__


def download(url: str, path: Path, *, asked: str, sha256_prefix: Optional[str] = None,
             timeout: float = TIMEOUT_S) -> Path:
    """Fetch ``url`` into ``path`` through the one door: the cache folder made or checked
    (this user's, writable by nobody else unless sticky), a new file made in it by
    descriptor (O_EXCL|O_NOFOLLOW), its mode set with fchmod, its sha256 checked against
    ``sha256_prefix`` (torchvision's file names carry one), then renamed into place, so a
    reader never sees half a file, two launches at once both end with a whole one, and a
    ``.part`` swapped for a link changes nothing but the link. ``ConfigError``
    (``refusal``) when it cannot."""
    print(f"downloading {url} -> {path} (once: the jobs load it from there)")  # stderr: the refusal alone

    def fetch(out: Any) -> None:
        digest = hashlib.sha256()
        with urllib.request.urlopen(url, timeout=timeout) as answer:
            while chunk := answer.read(CHUNK):
                out.write(chunk)
                digest.update(chunk)
        got = digest.hexdigest()
        if sha256_prefix and not got.startswith(sha256_prefix):
            raise ConfigError(refusal(asked, url, path, f"its sha256 {got[:len(sha256_prefix)]} is not the "
                                                        f"{sha256_prefix} its name says"))

    try:  # under results_dir, which the preflight checked
        with open_folder(path.parent) as cache:
            cache.write(path.name, fetch, mode=0o644)
    except Refused as exc:
        raise ConfigError(refusal(asked, url, path, str(exc))) from None
    except (OSError, http.client.HTTPException, ValueError) as exc:  # URLError, timeouts, a bad answer
        raise ConfigError(refusal(asked, url, path, _why(exc))) from None
    return path
