"""A containerised campaign runs its jobs through the runtime's exact command line.

No container runtime can be installed here, so a stand-in ``apptainer`` on PATH logs
its argv and runs the ``python ...`` that follows the image, as ``apptainer exec``
would inside the image. What is tested is campaign's side: the command, the binds,
and the provenance stored with the attempt.
"""

from __future__ import annotations

import csv
import io
import json
import os
import sys
from pathlib import Path

import pytest

from conftest import TINY

FAKE_RUNTIME = """#!/usr/bin/env bash
if [[ $1 == --version ]]; then echo "apptainer version 1.3.4-fake"; exit 0; fi
printf '%s\\n' "$@" > "{log}/argv-$$.txt"
[[ $1 == exec ]] || exit 64
shift
while [[ $1 == --* ]]; do
  case $1 in --nv) shift ;; *) shift 2 ;; esac
done
shift  # the image
[[ $1 == python ]] || exit 65
shift
exec {python} "$@"
"""


@pytest.mark.slow
def test_job_runs_through_the_runtime_and_records_the_image(ws, tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    logs = tmp_path / "runtime-log"
    logs.mkdir()
    fake = bin_dir / "apptainer"
    fake.write_text(FAKE_RUNTIME.format(log=logs, python=sys.executable))
    fake.chmod(0o755)
    image = tmp_path / "images dir" / "campaign.sif"
    image.parent.mkdir()
    image.write_bytes(b"not really an image")
    ws.env["PATH"] = f"{bin_dir}{os.pathsep}{ws.env['PATH']}"
    res = ws.launch("-m", "gpus=1,2", "container=apptainer", f"container.image={image}", *TINY)
    assert res.returncode == 0, res.stderr
    wait = ws.campaign("status", "--wait", "--interval", "0.5")
    assert wait.returncode == 0, wait.stdout + wait.stderr
    # one image for every point: status says nothing per point about it (no column)
    st = ws.campaign("status", "--json")
    assert [p["values"] for p in json.loads(st.stdout)["points"]] == [{}, {}], st.stdout
    argvs = [p.read_text().splitlines() for p in sorted(logs.glob("argv-*.txt"))]
    assert len(argvs) == 3  # one per rank: 1 + 2
    for argv in argvs:
        assert argv[0] == "exec" and "--nv" not in argv  # CPU platform: no GPU flag
        bind = argv[argv.index("--bind") + 1]
        assert str(ws.results.resolve()) in bind.split(",")
        i = argv.index(str(image))
        assert argv[i + 1 :i + 5] == ["python", "-u", "-m", "submitit.core._submit"]
    prov = json.loads(ws.query("select provenance from attempt limit 1")[0][0])
    import hashlib

    assert prov["container"]["image_sha256"] == hashlib.sha256(image.read_bytes()).hexdigest()
    assert "1.3.4-fake" in prov["container"]["runtime_version"]
    # harvest reads the image back: filter on a sha256 prefix (or the path), labelled by 12 digits
    sha = prov["container"]["image_sha256"]
    for value in (sha[:8], str(image)):
        res = ws.campaign("harvest", "--where", f"image={value}", "--to", "csv")
        assert res.returncode == 0, res.stderr
        rows = list(csv.DictReader(io.StringIO(res.stdout)))
        assert [(r["gpus"], r["image"], r["image_path"]) for r in rows] == [(n, sha[:12], str(image)) for n in "12"]
    other = "0" * 8 if not sha.startswith("0") else "1" * 8
    assert ws.campaign("harvest", "--where", f"image={other}").returncode == 1  # no point ran in that image
