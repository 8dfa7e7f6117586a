"""A real two-image campaign on the local SLURM (issue #23): one sweep over the v100 and
a100 partitions, ``container=singularity``, ``container.images`` giving each platform its
own image file, submitted and run end to end.

No container runtime can be installed here, so a stand-in ``singularity`` on PATH logs its
argv (and the partition its job ran on) and runs the ``python ...`` after the image, as
``singularity exec`` would inside it (test_container_job's stand-in, for this runtime).
Each image has the record singularity/build.sh writes beside it: its real sha256 and the
torch build. What is tested is campaign's side: each point's job asked for its own
image, each attempt stored its own image's digest, and status --json and harvest name
each point's image, all in one campaign.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import sys
from pathlib import Path

import pytest

from conftest import EMULATED_GPUS, TINY, campaign_id_from
from test_container_job import FAKE_RUNTIME

CU130 = "sm_75 sm_80 sm_86 sm_90 sm_100 sm_120"
CU126 = "sm_50 sm_60 sm_70 sm_75 sm_80 sm_86 sm_90"
# the stand-in, also noting which partition ran it (the record of where each image ran)
FAKE_SINGULARITY = FAKE_RUNTIME.replace("apptainer version 1.3.4-fake", "singularity-ce version 4.1.5-fake").replace(
    "printf '%s\\n' \"$@\"", "printf '%s\\n' \"partition=$SLURM_JOB_PARTITION\" \"$@\"")


def image_with_record(folder: Path, name: str, cuda: str, arch: str) -> tuple[Path, str]:
    """An image file and the ``<image>.sha256`` record build.sh writes: its real digest
    (distinct per image) and the torch build inside."""
    img = folder / name
    img.write_bytes(b"SIF fake " + name.encode())
    digest = hashlib.sha256(img.read_bytes()).hexdigest()
    (folder / (name + ".sha256")).write_text(
        f"{digest}  {name}\n# torch_version 2.14.1\n# cuda_version {cuda}\n# cuda_arch_list {arch}\n")
    return img, digest


def test_status_reads_each_points_planned_image():
    from campaign.common.bounded import Unreadable
    from campaign.observe.status import point_image

    def p(container):
        return {"config": {"container": container}}

    assert point_image(p({"runtime": "singularity", "image": "/i/cu126.sif"})) == "/i/cu126.sif"
    assert point_image(p({"runtime": "none", "image": "/i/cu126.sif"})) is None  # ran on the host
    assert point_image(p({"runtime": "apptainer", "image": None})) is None
    assert point_image({"config": Unreadable("too deep")}) is None and point_image({}) is None


@pytest.mark.slurm
@pytest.mark.slow
def test_a_two_image_sweep_runs_each_platform_in_its_own_image(ws, tmp_path):
    from test_slurm import _cluster_up

    why = _cluster_up()
    if why:
        pytest.skip(why)
    ws.env["SLURM_CONF"] = os.environ.get("SLURM_CONF", "/tmp/campaign-slurm/etc/slurm.conf")
    bin_dir, logs, images = tmp_path / "bin", tmp_path / "runtime-log", tmp_path / "images"
    for d in (bin_dir, logs, images):
        d.mkdir()
    fake = bin_dir / "singularity"
    fake.write_text(FAKE_SINGULARITY.format(log=logs, python=sys.executable))
    fake.chmod(0o755)
    ws.env["PATH"] = f"{bin_dir}{os.pathsep}{ws.env['PATH']}"
    cu126, d126 = image_with_record(images, "campaign-cu126.sif", "12.6", CU126)
    cu130, d130 = image_with_record(images, "campaign-cu130.sif", "13.0", CU130)
    own = {"v100": (str(cu126), d126), "a100": (str(cu130), d130)}

    res = ws.launch("-m", "platform=v100,a100", "gpus=1", "trainer=synthetic", *TINY, "experiment=smoke",
                    "platform.cpus_per_task=1", EMULATED_GPUS, "container=singularity", f"container.image={cu130}",
                    f"+container.images.v100={cu126}", f"+container.images.a100={cu130}", timeout=240)
    assert res.returncode == 0, res.stdout + res.stderr
    cid = campaign_id_from(res.stdout)
    try:
        done = ws.campaign("status", cid, "--wait", "--interval", "1", "--timeout", "420", timeout=480)
        assert done.returncode == 0, done.stdout + done.stderr
    finally:
        ws.campaign("cancel", cid, timeout=60)

    # one campaign, its two points in two job arrays (one per image), both completed
    assert ws.query("select id from campaign") == [(cid,)]
    points = ws.query("select p.id, p.platform, p.job_id, a.state, a.provenance from point p join attempt a "
                      "on a.point_id = p.id order by p.idx")
    assert [(plat, state) for _, plat, _, state, _ in points] == [("v100", "completed"), ("a100", "completed")]
    assert points[0][2].split("_")[0] != points[1][2].split("_")[0]  # never one array across two images

    # each job asked the runtime for its own image, on its own partition
    argvs = [p.read_text().splitlines() for p in sorted(logs.glob("argv-*.txt"))]
    asked = sorted((argv[0].removeprefix("partition="), argv[argv.index("--bind") + 2]) for argv in argvs
                   if argv[1] == "exec")
    assert asked == [("a100", str(cu130)), ("v100", str(cu126))], argvs

    # each attempt's provenance: its own image, its digest from that image's record
    for _, plat, _, _, prov in points:
        c = json.loads(prov)["container"]
        assert (c["image"], c["image_sha256"], c["image_sha256_source"]) == (*own[plat], "sidecar"), plat
        assert "4.1.5-fake" in c["runtime_version"]

    # status --json and harvest name each point's image
    st = ws.campaign("status", cid, "--json")
    assert st.returncode == 0, st.stderr
    shown = {p["platform"]: p["values"]["image"] for p in json.loads(st.stdout)["points"]}
    assert shown == {plat: path for plat, (path, _) in own.items()}, st.stdout
    table = ws.campaign("status", cid).stdout.splitlines()
    assert table[1].split()[:4] == ["#", "platform", "gpus", "image"], table
    assert [row.split()[1:4] for row in table[3:5]] == [[plat, "1", path] for plat, (path, _) in own.items()], table
    hv = ws.campaign("harvest", "--to", "csv")
    assert hv.returncode == 0, hv.stderr
    rows = {r["platform"]: (r["image"], r["image_path"]) for r in csv.DictReader(io.StringIO(hv.stdout))}
    assert rows == {plat: (digest[:12], path) for plat, (path, digest) in own.items()}
    for plat, (path, digest) in own.items():  # and filter on it: the other platform's image ran nothing here
        only = ws.campaign("harvest", "--where", f"image={digest[:8]}", "--to", "csv")
        assert [r["platform"] for r in csv.DictReader(io.StringIO(only.stdout))] == [plat], only.stderr
