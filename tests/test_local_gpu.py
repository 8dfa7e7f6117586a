"""platform=local_gpu: this machine's GPUs as nvidia-smi lists them, their datasheet
figures, and a campaign on them. No GPU here: ``nvidia-smi`` is a script the tests write,
printing what the real one prints for ``--query-gpu=index,uuid,name,memory.total
--format=csv,noheader,nounits``; the jobs then run their ranks on CPU and record that
(``emulated_gpus``), as on the local SLURM cluster."""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path

import pytest

from campaign.catalogue import gpus
from conftest import Workspace

H100 = ["0, GPU-aaaa1111-0000, NVIDIA H100 80GB HBM3, 81559", "1, GPU-bbbb2222-0000, NVIDIA H100 80GB HBM3, 81559"]


def fake_smi(folder: Path, lines: list[str], *, rc: int = 0, stderr: str = "", query_has: str = "") -> Path:
    """An nvidia-smi printing ``lines``; with ``query_has``, only for a query naming it (else exit 9)."""
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / "nvidia-smi"
    body = "".join(f"echo {shlex.quote(line)}\n" for line in lines)
    if query_has:
        body = f"case \"$1\" in *{query_has}*) ;; *) echo 'wrong query' >&2; exit 9;; esac\n" + body
    if stderr:
        body += f"echo {shlex.quote(stderr)} >&2\n"
    script.write_text(f"#!/bin/sh\n{body}exit {rc}\n")
    script.chmod(0o755)
    return folder


@pytest.fixture
def smi(tmp_path, monkeypatch):
    """Put a fake nvidia-smi first on PATH (in this process) and forget the cached answer."""
    def use(lines, **kw):
        folder = fake_smi(tmp_path / "bin", lines, **kw)
        monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")
        gpus.local_gpus.cache_clear()
        return gpus.local_gpus()

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    yield use
    gpus.local_gpus.cache_clear()


@pytest.mark.parametrize("name,bandwidth,link,fp32,bf16", [
    ("NVIDIA H100 80GB HBM3", 3350, "NVLINK 4.0", 67.0, 989.4),
    ("NVIDIA H100 PCIe", 2000, "PCIe 5.0 x16", 51.0, 756.0),
    ("NVIDIA H100 NVL", 3900, "NVLINK 4.0 (2-GPU bridge)", 60.0, 835.5),
    ("NVIDIA H200", 4800, "NVLINK 4.0", 67.0, 989.4),
    ("NVIDIA A100-SXM4-80GB", 2039, "NVLINK 3.0", 19.5, 312.0),
    ("NVIDIA A100-SXM4-40GB", 1555, "NVLINK 3.0", 19.5, 312.0),
    ("NVIDIA A100 80GB PCIe", 1935, "PCIe 4.0 x16", 19.5, 312.0),
    ("NVIDIA A100-PCIE-40GB", 1555, "PCIe 4.0 x16", 19.5, 312.0),
    ("Tesla V100-SXM2-32GB", 900, "NVLINK 2.0", 15.7, None),
    ("Tesla V100-PCIE-32GB", 900, "PCIe 3.0 x16", 14.0, None),
])
def test_datasheet_of_known_models(smi, name, bandwidth, link, fp32, bf16):
    found = smi([f"0, GPU-1, {name}, 81559", f"1, GPU-2, {name}, 81559"])
    assert (found.count, found.name, found.memory_gb) == (2, name, 79.6)
    assert found.fact("memory_bandwidth_gbs") == bandwidth and found.fact("interconnect") == link
    peaks = found.fact("peak_tflops")
    assert peaks["fp32"] == fp32 and peaks.get("bf16") == bf16


def test_the_cluster_platforms_state_the_same_peaks():
    """conf/platform/a100*.yaml, h100.yaml and v100.yaml quote the same datasheets as the table."""
    import yaml

    conf = Path(__file__).resolve().parents[1] / "conf" / "platform"
    for plat in ("v100", "a100", "a100_nvlink_40", "a100_nvlink_80", "h100"):
        doc = yaml.safe_load((conf / f"{plat}.yaml").read_text())
        sheet = gpus.LocalGPUs(1, doc["gpu_model"], doc["gpu_memory_gb"])
        assert sheet.fact("peak_tflops") == doc["peak_tflops"], plat
        assert sheet.fact("memory_bandwidth_gbs") == doc["memory_bandwidth_gbs"], plat


def test_unknown_model_one_gpu_and_no_link(smi):
    found = smi(["0, GPU-1, NVIDIA GeForce RTX 4090, 24564"])
    assert found.count == 1 and found.fact("peak_tflops") == {} and found.fact("memory_bandwidth_gbs") == 0.0
    assert found.fact("interconnect") == "" and found.fact("interconnect_bandwidth_gbs") == 0.0


@pytest.mark.parametrize("visible,expected", [
    ("1", ["GPU-bbbb2222-0000"]), ("GPU-bbbb,0", ["GPU-bbbb2222-0000", "GPU-aaaa1111-0000"]),
    ("0,7,1", ["GPU-aaaa1111-0000"]),  # CUDA stops at the first entry it cannot match
    ("", []),
])
def test_cuda_visible_devices_is_honoured(smi, monkeypatch, visible, expected):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    found = smi(H100)
    assert found.count == len(expected)
    if not expected:
        assert found.why_none == "nvidia-smi lists no GPU that CUDA_VISIBLE_DEVICES leaves visible"


def test_nvidia_smi_failing_says_why(smi):
    found = smi([], rc=9, stderr="NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.")
    assert found.count == 0
    assert found.why_none == "nvidia-smi: NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."


# ---------------------------------------------------------------------------- through campaign


def _ws(tmp_path: Path, lines: list[str]) -> Workspace:
    ws = Workspace(tmp_path)
    folder = fake_smi(tmp_path / "bin", lines)
    ws.env["PATH"] = f"{folder}{os.pathsep}{ws.env['PATH']}"
    ws.env.pop("CUDA_VISIBLE_DEVICES", None)
    return ws


def test_refused_at_launch_when_no_gpu_is_visible(tmp_path):
    ws = _ws(tmp_path, [])
    res = ws.launch("-m", "platform=local_gpu", "gpus=1")
    assert res.returncode == 2 and res.stdout == ""
    assert res.stderr.strip().splitlines() == [
        "error: point platform=local_gpu gpus=1: local_gpu: no NVIDIA GPU visible on this machine "
        "(nvidia-smi lists no GPU); platform=local runs CPU ranks"]
    assert not ws.db.exists()


def test_points_beyond_the_machine_are_left_out(tmp_path):
    ws = _ws(tmp_path, H100)
    res = ws.launch("-m", "platform=local_gpu", "gpus=1,2,4", "dry_run=true")
    assert res.returncode == 0, res.stderr
    assert "local_gpu has 2 GPUs per node; gpus=4 does not fit" in res.stdout + res.stderr
    assert "dry run: 2 point(s) in 2 local job(s)" in res.stdout
    json_run = ws.launch("-m", "platform=local_gpu", "gpus=1,2,4", "--json")
    resources = [json.loads(line)["resources"] for line in json_run.stdout.splitlines()]
    assert [(r["nodes"], r["gpus_per_node"], r["tasks_per_node"]) for r in resources] == [(1, 1, 1), (1, 2, 2)]


@pytest.mark.slow
def test_a_campaign_on_local_gpus_runs_and_records_the_machine(tmp_path):
    ws = _ws(tmp_path, H100)
    res = ws.launch("-m", "platform=local_gpu", "gpus=1,2", "experiment=smoke", "experiment.base_iterations=4",
                    "trainer.params.width=4", "dataset.image_size=8")
    assert res.returncode == 0, res.stderr
    assert ws.campaign("status", "--wait", "--interval", "0.5").returncode == 0
    rows = ws.query("select p.gpus, r.rank, a.provenance, r.extra from rank_timing r join attempt a "
                    "on a.id = r.attempt_id join point p on p.id = a.point_id order by p.gpus, r.rank")
    assert [(g, r) for g, r, _, _ in rows] == [(1, 0), (2, 0), (2, 1)]
    for _, _, prov, extra in rows:
        prov, extra = json.loads(prov), json.loads(extra)
        assert prov["config"]["platform"]["gpu_model"] == "NVIDIA H100 80GB HBM3"
        assert prov["emulated_gpus"] is True  # no CUDA here: CPU ranks, said so
        assert extra["peak_tflops"] == 67.0  # fp32 against the H100's datasheet
