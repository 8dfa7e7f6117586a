"""What a study preset (conf/study/, ``study=NAME``) asks of a launch beyond its grid:
its dataset read from files, a stand-in written where its reduced twin names one.

- ``study.reads_files``: the study measured its data loaders (the reference study's
  section 5.3 blames them for its CPU time), so a point without ``dataset.root`` is
  refused (a dry run notes it), naming the two ways out: the real dataset's folder or a
  stand-in written by ``campaign datagen``;
- ``study.standin`` (the reduced twin): where ``dataset.root`` holds no dataset yet, the
  launch writes a stand-in of that size there (campaign_datasets/standin.py), after the
  preflight has checked the store and the results folder (nothing is written before) and
  before the dataset check of that root, which waits for it; a dry run only says it would.
  A stand-in already there is reused only when ``check_standin`` passes (its folders and
  files this user's, no link): one that others could have written is refused in one line.
"""

from __future__ import annotations

import os
import sys
from typing import Sequence

from campaign.common.errors import ConfigError
from campaign.launch.plan import PointPlan


def _missing_root(p: PointPlan) -> str:
    from campaign_datasets.standin import SIZES

    name = p.config["dataset"].get("name")
    study = p.config["study"]["name"]
    if name not in SIZES:  # synthetic (or a dataset campaign datagen cannot write): no files to read
        own = _study_dataset(study)
        instead = (f"drop dataset={name} and name the study's {own} folder (dataset.root=/path/to/{own}), or write "
                   f"a stand-in of it there first (campaign datagen {own} --out DIR --size full)"
                   if own in SIZES else "name a dataset's folder (dataset=NAME dataset.root=/path/to/it)")
        return f"study={study} reads its dataset from files, as the study did; dataset={name} has none: {instead}"
    return (f"study={study} reads {name} from files, as the study did (dataset.root is not set); "
            f"name its folder (dataset.root=/path/to/{name}) or write a stand-in there first "
            f"(campaign datagen {name} --out DIR --size full)")


Pending = tuple[str, str, str, str]  # a stand-in to write: (dataset, root, size, what it is in words)


def _study_dataset(study: str) -> str | None:
    """The dataset a study preset picks (``override /dataset: NAME`` in conf/study/<study>.yaml or a preset it includes)."""
    from campaign.launch.unread import _preset

    body, parents = _preset(study)
    for entry in body.get("defaults") or ():
        if isinstance(entry, dict) and "override /dataset" in entry:
            return str(entry["override /dataset"])
    return next((d for d in map(_study_dataset, parents) if d), None)


def study_datasets(points: Sequence[PointPlan], *, dry_run: bool
                   ) -> tuple[list[str], list[str], list[str], list[Pending]]:
    """Apply the study presets' dataset rules (module docstring) to ``points``; returns what a
    dry run says: (what a launch would refuse, what it would write, the starts of the
    dataset check's notes these make moot: its own on the same missing or written root),
    and the stand-ins a launch writes (``write_standins``, after the preflight)."""
    from campaign_datasets.standin import has_files

    notes: list[str] = []
    writes: list[str] = []
    moot: list[str] = []
    pending: list[Pending] = []
    done: set[tuple[str, str, str]] = set()
    for p in points:
        study, data = p.config.get("study") or {}, p.config["dataset"]
        if not study.get("reads_files") and not study.get("standin"):
            continue
        root = data.get("root")
        if not root:
            if dry_run:
                notes.append(_missing_root(p))
                moot.append(f"dataset.root is required for dataset={data.get('name')}")
                continue
            raise ConfigError(_missing_root(p))
        size = study.get("standin")
        if not size:
            continue
        data["root"] = root = os.path.abspath(str(root))  # the jobs read it from their own folders
        key = (str(data["name"]), root, str(size))
        if key in done:
            continue
        done.add(key)
        if has_files(key[0], root):
            problem = reused(key[0], root)
            if problem and not dry_run:
                raise ConfigError(problem)
            notes.extend([problem] if problem else [])
            continue
        moot.append(f"dataset.root={root}")
        what = f"a {size} stand-in of {key[0]} (campaign datagen {key[0]} --out {root} --size {size})"
        if dry_run:
            writes.append(f"would write {what} before submitting: study={study['name']} reads it")
        else:
            pending.append((key[0], root, str(size), what))
    return list(dict.fromkeys(notes)), writes, moot, pending


def reused(name: str, root: str) -> str | None:
    """Why the stand-in already at ``root`` is not reused (None: it is, or it is not a stand-in)."""
    from campaign_datasets import DatasetError, resolve_root
    from campaign_datasets.standin import check_standin, is_standin
    from campaign_door import Refused

    try:
        folder = resolve_root({"name": name, "root": root})
        if is_standin(folder) or os.path.lexists(os.path.join(folder, "STANDIN.txt")):
            check_standin(folder, root)
    except (DatasetError, Refused, OSError) as exc:
        return (f"dataset.root={root}: the stand-in there is not reused ({exc}): someone else could have written "
                f"it; remove it (rm -r {root}) to have the launch write a new one, or choose another dataset.root")
    return None


def write_standins(points: Sequence[PointPlan], pending: Sequence[Pending]) -> None:
    """Write the ``pending`` stand-ins (after the preflight), then check their roots as the
    preflight checks every other dataset."""
    from omegaconf import OmegaConf

    from campaign.catalogue.datasets import check_dataset

    for name, root, size, what in pending:
        write(name, root, size, what)
    roots = {root for _, root, _, _ in pending}
    seen: set = set()
    for p in points:
        data = p.config["dataset"]
        key = (repr(sorted(data.items(), key=str)), bool(p.config["experiment"].get("validation")))
        if data.get("root") in roots and key not in seen:
            seen.add(key)
            check_dataset(OmegaConf.create(data), key[1])


def write(name: str, root: str, size: str, what: str) -> None:
    """Write the stand-in through the door, one line on stderr before and after (a full one
    takes minutes)."""
    from campaign_datasets.standin import StandinError, write_standin
    from campaign_door import Refused

    print(f"writing {what} ...", file=sys.stderr, flush=True)
    try:
        folder = write_standin(name, root, size)
    except (StandinError, Refused, OSError) as exc:
        raise ConfigError(f"dataset.root={root}: the stand-in could not be written ({exc}); "
                          f"choose another dataset.root") from None
    print(f"wrote {folder}", file=sys.stderr, flush=True)
