"""One door for files in shared folders (issue 48, docs/security.md): proved on the code.

No module under campaign/, campaign_datasets/ or trainers/ but the door (campaign_door/)
opens a file for writing with ``open(..., "w"/"wb"/"a"/"x")``, ``Path.write_text`` /
``write_bytes`` or ``gzip.open(..., "wb")``, or unpickles (``pickle.load``/``loads``,
``torch.load``), except where ``ALLOWED`` below says why that file is not in a shared
folder, or is written or read as the door would. A new call anywhere else fails this
test, naming its file and line."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("campaign", "campaign_datasets", "trainers")
UNPICKLE = {("pickle", "load"), ("pickle", "loads"), ("torch", "load"), ("cPickle", "load"), ("dill", "load")}

# (file, what it does) -> why it is not a door to a shared folder. Each entry is one call site's kind.
ALLOWED = {
    # the job's own private checkpoint folder (<job folder>/checkpoints, made 0700 by the job's own launch,
    # refused when it is another's: campaign/common/untrusted.py); weights_only=True all the same
    ("trainers/checkpoint.py", "torch.load"): "the job's own checkpoint, in its private job folder",
    # the rendezvous port file of a multi-process local job, in its private job folder (0700)
    ("trainers/dist.py", "open-for-writing"): "the job's own port file, in its private job folder",
    # the C++ comm hook's build markers, in this user's own cache (~/.cache/campaign/ext or $CAMPAIGN_EXT_DIR)
    ("trainers/comm_cpp.py", "open-for-writing"): "the user's own build cache, not a shared folder",
    # MMEngine's local checkpoint hook (trainers/mmseg/compat.py, item 5): the job's own checkpoints
    ("trainers/mmseg/compat.py", "torch.load"): "MMEngine's resume of the job's own checkpoint (private folder)",
    # the one trainers/ module that loads pretrained weights: the bytes the door read and checked
    ("trainers/state_file.py", "torch.load"): "loads the bytes campaign_door.read_checked returned, not a path",
}


def _mode(call: ast.Call, position: int) -> str | None:
    if len(call.args) > position and isinstance(call.args[position], ast.Constant):
        return str(call.args[position].value)
    for kw in call.keywords:
        if kw.arg == "mode" and isinstance(kw.value, ast.Constant):
            return str(kw.value.value)
    return None


def _writes(mode: str | None) -> bool:
    return mode is not None and any(c in mode for c in "wax+")


def _offences(path: Path) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        if isinstance(f, ast.Name) and f.id == "open" and _writes(_mode(node, 1)):
            found.append((node.lineno, "open-for-writing"))
        elif isinstance(f, ast.Attribute):
            owner = f.value.id if isinstance(f.value, ast.Name) else None
            if f.attr in ("write_text", "write_bytes"):
                found.append((node.lineno, "open-for-writing"))
            elif f.attr == "open" and owner in ("gzip", "bz2", "lzma", "io", "codecs") and _writes(_mode(node, 1)):
                found.append((node.lineno, "open-for-writing"))
            elif f.attr == "open" and owner is None and _writes(_mode(node, 0)):  # Path(...).open("w")
                found.append((node.lineno, "open-for-writing"))
            elif (owner, f.attr) in UNPICKLE:
                found.append((node.lineno, f"{owner}.{f.attr}"))
            elif f.attr == "Unpickler" and owner == "pickle":
                found.append((node.lineno, "pickle.load"))
    return found


def test_no_module_but_the_door_writes_or_unpickles_a_file_in_a_shared_folder():
    offenders, used = [], set()
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            for line, what in _offences(path):
                if (rel, what) in ALLOWED:
                    used.add((rel, what))
                else:
                    offenders.append(f"{rel}:{line}: {what}")
    assert not offenders, "write or unpickle through campaign_door instead: " + "; ".join(offenders)
    assert used == set(ALLOWED), f"allow-list entries no longer needed: {sorted(set(ALLOWED) - used)}"


def test_the_scan_sees_what_it_forbids(tmp_path):
    src = tmp_path / "bad.py"
    src.write_text("import pickle, torch, gzip\nfrom pathlib import Path\n"
                   "open(p, 'wb')\nopen(p, mode='a')\nPath(p).write_text('x')\ngzip.open(p, 'wb')\n"
                   "pickle.load(f)\npickle.loads(b)\ntorch.load(p)\nPath(p).open('w')\n"
                   "open(p)\nopen(p, 'rb')\ngzip.open(p, 'rb')\n")
    assert [what for _, what in _offences(src)] == ["open-for-writing"] * 4 + ["pickle.load", "pickle.loads",
                                                                              "torch.load", "open-for-writing"]
