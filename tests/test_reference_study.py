"""The reference study's numbers its own way (issue #23): its eq. 3.3 utilisation beside the
physical one, its partitions as its Table 2 states them, every figure's sentence found in
its full text, and the reference workload's FLOPs table recounted by torch's counter.

The study's text is ../shared/reference/swinv2-ddp-scalability-thesis.txt
(``$CAMPAIGN_REFERENCE_TEXT`` elsewhere), the real H100 traces ../shared/fixtures
(``$CAMPAIGN_FIXTURES``); tests that need them are skipped without them.
"""

from __future__ import annotations

import gzip
import importlib.util
import json
import os
import re
from collections import defaultdict
from pathlib import Path

import polars as pl
import pytest
import yaml

from campaign.harvest.references import load_reference, reference_figures, reference_omissions, reference_partitions
from campaign.harvest.utilisation import utilisation_table
from trainers.specs.swinv2_upernet import (FLOPS_BATCH, FLOPS_MEASURED_WITH, FLOPS_PER_ITERATION, TRAINER,
                                           flops_per_image)

REPO = Path(__file__).resolve().parent.parent
STUDY = Path(os.environ.get("CAMPAIGN_REFERENCE_TEXT")
             or REPO.parent / "shared" / "reference" / "swinv2-ddp-scalability-thesis.txt")
FIXTURES = Path(os.environ.get("CAMPAIGN_FIXTURES") or REPO.parent / "shared" / "fixtures")
SWIN_TRACE = FIXTURES / "h100-swinv2b-upernet-bf16-b8-512-2iters.json.gz"
needs_text = pytest.mark.skipif(not STUDY.is_file(), reason=f"no study text at {STUDY} (set CAMPAIGN_REFERENCE_TEXT)")
needs_trace = pytest.mark.skipif(not SWIN_TRACE.is_file(), reason=f"no trace fixture at {SWIN_TRACE}")


# ------------------------------------------------------------------ eq. 3.3, the study's way


def _hand_totals(path: Path) -> tuple[float, float]:
    """(the profiler's CPU time total, its CUDA time total) straight from the trace JSON,
    written out apart from campaign_trace. CUDA: the sum of every kernel's, memcpy's and
    memset's duration (the profiler adds them up; no union). CPU: the sum of every host
    event's self time (operators, annotations, CUDA runtime and driver calls), which in a
    trace whose events nest (these do) is per host thread the union of its events, summed
    over threads. The traces carry no window mark: the window is the first to the last
    event, so nothing is clipped."""
    with gzip.open(path, "rt") as fh:
        events = [e for e in json.load(fh)["traceEvents"]
                  if e.get("ph") == "X" and e.get("cat") not in ("Trace", "overhead")]

    def union(intervals) -> float:
        total, end = 0.0, None
        for s, t in sorted(intervals):
            if end is None or s > end:
                total, end = total + (t - s), t
            elif t > end:
                total, end = total + (t - end), t
        return total

    threads = defaultdict(list)
    for e in events:
        if e["cat"] in ("cpu_op", "user_annotation", "cuda_runtime", "cuda_driver"):
            threads[(e["pid"], e["tid"])].append((e["ts"], e["ts"] + e["dur"]))
    cpu_us = sum(union(iv) for iv in threads.values())
    device_us = sum(e["dur"] for e in events if e["cat"] in ("kernel", "gpu_memcpy", "gpu_memset"))
    return cpu_us / 1e6, device_us / 1e6


def _point(**profile) -> dict:
    return {"platform": "h100", "trainer": "swinv2_upernet", "experiment": "profile", "variant": "", "gpus": 1,
            "repeat": 0, "time_s": 1.0, "profile_iterations": 2, **profile}


@needs_trace
def test_study_utilisation_of_the_real_swinv2_trace_matches_a_hand_count():
    from campaign_trace import profile_row, read_trace

    cpu_s, device_s = _hand_totals(SWIN_TRACE)
    row = profile_row(read_trace(SWIN_TRACE), iterations=2)
    totals = row["top_ops"]
    assert totals["cpu_time_total_s"] == pytest.approx(cpu_s, rel=1e-9)
    assert totals["device_time_total_s"] == pytest.approx(device_s, rel=1e-9)
    u = utilisation_table(pl.DataFrame([_point(
        gpu_util=row["gpu_util"], cpu_util=row["cpu_util"], profile_total_s=row["total_s"],
        profile_cpu_s=row["cpu_s"], profile_device_s=row["device_s"], profile_cpu_total_s=totals["cpu_time_total_s"],
        profile_device_total_s=totals["device_time_total_s"])])).row(0, named=True)
    # eq. 3.3 as the study computed it: T_d / T_t, both the profiler's totals, T_t = CPU + CUDA time
    assert u["gpu_util_study"] == pytest.approx(device_s / (cpu_s + device_s), rel=1e-9)
    assert u["cpu_util_study"] == pytest.approx(cpu_s / (cpu_s + device_s), rel=1e-9)
    assert u["gpu_util_study"] + u["cpu_util_study"] == pytest.approx(1.0)
    # the totals beside it, and the physical union apart (its own column, never eq. 3.3's term)
    assert u["cpu_time_total_s"] == pytest.approx(cpu_s, rel=1e-9)
    assert u["device_time_total_s"] == pytest.approx(device_s, rel=1e-9) and u["device_busy_s"] == row["device_s"]
    # SwinV2-B on an H100, bf16: the GPU busy 67 % of the window, 43 % the study's way
    assert u["gpu_util"] == pytest.approx(0.6716, abs=1e-4) and u["gpu_util_study"] == pytest.approx(0.4339, abs=1e-4)
    assert u["note"] == ""


def test_study_utilisation_shares_one_denominator_as_section_5_3_reads():
    """More CPU time at the same device time lowers the study's GPU utilisation and raises
    its CPU one (its Figures 4-5, section 5.3); the physical columns are what the rows say."""
    rows = [_point(gpus=g, gpu_util=0.5, cpu_util=0.9, profile_total_s=1.0, profile_cpu_total_s=cpu,
                   profile_device_total_s=0.5, profile_device_s=0.45) for g, cpu in ((1, 0.5), (2, 1.0), (4, 1.5))]
    u = utilisation_table(pl.DataFrame(rows)).sort("gpus")
    assert u["gpu_util_study"].to_list() == pytest.approx([0.5, 1 / 3, 0.25], rel=1e-9)
    assert u["cpu_util_study"].to_list() == pytest.approx([0.5, 2 / 3, 0.75], rel=1e-9)
    assert u["gpu_util"].to_list() == [0.5, 0.5, 0.5]
    for g, c in zip(u["gpu_util_study"], u["cpu_util_study"]):
        assert 0 <= g <= 1 and 0 <= c <= 1 and g + c == pytest.approx(1.0)
    # medians over repeats keep the sum: median(1 - x) = 1 - median(x)
    reps = [_point(repeat=r, profile_total_s=1.0, profile_cpu_total_s=cpu, profile_device_total_s=0.4)
            for r, cpu in enumerate((0.1, 0.6, 0.3, 2.0))]
    (m,) = utilisation_table(pl.DataFrame(reps)).iter_rows(named=True)
    assert m["repeats"] == 4 and m["gpu_util_study"] + m["cpu_util_study"] == pytest.approx(1.0)


def test_study_utilisation_is_absent_without_device_time_or_totals():
    from campaign.harvest.utilisation import NO_TOTALS

    cpu_rank = _point(profile_total_s=1.0, profile_cpu_total_s=0.8, profile_device_total_s=None, cpu_util=0.8)
    u = utilisation_table(pl.DataFrame([cpu_rank], schema_overrides={"profile_device_total_s": pl.Float64})
                          ).row(0, named=True)
    assert u["gpu_util_study"] is None and u["cpu_util_study"] is None and u["cpu_util"] == 0.8
    assert u["note"] == "no device time (CPU ranks)"
    none = utilisation_table(pl.DataFrame([{k: v for k, v in _point().items() if k != "profile_iterations"}]))
    assert none["gpu_util_study"].to_list() == [None] and none["cpu_util_study"].to_list() == [None]
    # a store written before the totals were: the union and thread-seconds stay, eq. 3.3 is not made from them
    old = _point(gpu_util=0.6, cpu_util=0.7, profile_total_s=1.0, profile_cpu_s=0.9, profile_device_s=0.6)
    (o,) = utilisation_table(pl.DataFrame([old])).iter_rows(named=True)
    assert o["gpu_util_study"] is None and o["device_busy_s"] == 0.6 and o["note"] == NO_TOTALS


# ------------------------------------------------------------------ every figure's sentence


def _plain(text: str) -> str:
    """The study's text (or a quote) with its math markup written out and no whitespace:
    ``$1.4 \\times$`` reads 1.4x, ``A100\\_NVLINK`` reads A100_NVLINK."""
    text = text.replace("\\times", "x").replace("\\_", "_").replace("$", "").replace("~", " ")
    text = re.sub(r"\\mathrm\{([^}]*)\}", r"\1", text)
    return re.sub(r"\s+", "", text)


@needs_text
def test_every_reference_sentence_is_in_the_study_and_names_its_section():
    study = _plain(STUDY.read_text())
    ref = load_reference()
    cited = [(f["id"], f["source"]) for f in ref["figures"]]
    cited += [(f"omitted {v['value']}", v) for o in reference_omissions() for v in o["values"]]
    cited += [(p["partition"], p["text"]) for p in reference_partitions()]
    cited += [("partitions", ref["partitions"]["source"]), ("schedule", ref["schedule"]["source"]),
              ("workload", ref["workload"]["source"]), ("dataset", ref["workload"]["dataset_source"])]
    for name, src in cited:
        assert src.get("quote") and _plain(src["quote"]) in study, name
        assert re.match(r"(abstract|section \d\.\d|Figure \d|section \d\.\d, Table \d)", src["where"]), name
    assert not [s for s in reference_figures()["source"] if "not known" in s]


def test_the_figures_the_study_reads_as_time_reductions_say_so():
    src = {f["id"]: f["source"] for f in load_reference()["figures"]}
    assert "reduction in single GPU training time" in src["nvlink_40_vs_pcie_1"]["quote"]
    (pcie,) = [f for f in load_reference()["figures"] if f["id"] == "a100_pcie_vs_v100"]
    assert pcie["average"] == {"over": "gpus", "gpus": [1, 2, 4]}  # "all experiment configurations" of a PCIe node


# ------------------------------------------------------------------ Table 2 and the catalogue


def _platform(name: str) -> dict:
    return yaml.safe_load((REPO / "conf" / "platform" / f"{name}.yaml").read_text())


def test_the_catalogue_states_the_study_partitions_as_table_2_does():
    rows = {r["partition"]: r for r in reference_partitions()}
    assert set(rows) == {"V100", "A100", "A100_NVLINK"}
    for row in rows.values():
        kept = {**row, **(row.get("catalogue") or {})}  # a figure the catalogue keeps otherwise, with its reason
        assert ("catalogue" in row) == ("memory_bandwidth_gbs" in (row.get("catalogue") or {}))
        for i, name in enumerate(row["platforms"]):
            p = _platform(name)
            assert p["gpus_per_node"] == row["gpus_per_node"], name
            assert p["gpu_memory_gb"] == row["gpu_memory_gb"][i], name
            assert p["memory_bandwidth_gbs"] == kept["memory_bandwidth_gbs"][i], name
            assert p["interconnect"].startswith(row["interconnect"]), name
            assert p["interconnect_bandwidth_gbs"] == row["interconnect_bandwidth_gbs"], name
            assert row["cpu"] in p["cpu"], name
            assert p["node_memory_gb"] == row["node_memory_gb"], name
            assert p["max_nodes"] >= 1 and p["cpus_per_node"] % p["gpus_per_node"] == 0, name
    # the cores behind the named CPUs: 2x Gold 6126 (12 each), 1x EPYC 7742 on the A100
    # nodes (section 4.1: "single socket"), 2x EPYC 7742 on the NVLINK nodes ("dual-socket")
    assert [_platform(n)["cpus_per_node"] for n in ("v100", "a100", "a100_nvlink_40", "a100_nvlink_80")] == [
        24, 64, 128, 128]
    assert "1,935" in rows["A100"]["inconsistent"] and "Gen 4.0" in rows["V100"]["inconsistent"]


# ------------------------------------------------------------------ the reference workload's FLOPs


def _config(variant="base", crop=512, classes=150, **params) -> dict:
    return {"trainer": {"name": "swinv2_upernet", "params": {"variant": variant, **params}, "precision": "bf16"},
            "dataset": {"image_size": crop, "num_classes": classes, "channels": 3},
            "platform": {"name": "a100", "device": "cuda", "peak_tflops": {"bf16": 312.0}}}


def test_the_reference_workload_declares_its_flops():
    assert TRAINER.flops_per_image is flops_per_image
    assert FLOPS_MEASURED_WITH == "python -m trainers.mmseg.flops --table"  # the command _count runs
    # SwinV2-B + UPerNet, 8 x 512x512: 14.1 TFLOP per iteration (issue #23; an H100 run's own count)
    assert round(flops_per_image(_config()) * FLOPS_BATCH / 1e12, 1) == 14.1
    assert flops_per_image(_config()) * FLOPS_BATCH == FLOPS_PER_ITERATION[("base", 512)]
    # FLOPs grow with the network and the crop
    per = FLOPS_PER_ITERATION
    assert per[("tiny", 512)] < per[("small", 512)] < per[("base", 512)] < per[("large", 512)]
    assert all(per[(v, 512)] < per[(v, 640)] for v in ("tiny", "small", "base", "large"))
    # what the table was not measured for is unknown, never a guess
    for cfg in (_config(crop=32), _config(variant="micro", crop=512), _config(window_size=12),
                _config(aux_head=False), _config(head_channels=256)):
        assert flops_per_image(cfg) is None
    assert flops_per_image(_config(head_channels=512)) == flops_per_image(_config())  # the default, spelt out


def test_the_reference_estimate_uses_the_declared_flops():
    from campaign.observe.estimate import ASSUMED_MFU, declared_rate

    seconds, source = declared_rate(_config(), 1, 8)
    assert seconds == pytest.approx(FLOPS_PER_ITERATION[("base", 512)] / (312e12 * ASSUMED_MFU))
    assert "FLOPs" in source or "flops" in source


def _count(*runs: tuple[str, ...]) -> list[int]:
    """``python -m trainers.mmseg.flops ARGS`` for each of ``runs``: the table's own command
    (its ``main``), all in one child process (importing mmseg sets process-wide state this
    suite checks every test leaves alone; one import of it serves every count)."""
    import subprocess
    import sys

    code = ("import sys; from trainers.mmseg.flops import main\n"
            f"for argv in {[list(r) for r in runs]!r}:\n    assert main(argv) == 0\n    sys.stdout.flush()")
    res = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    counts = [int(line) for line in res.stdout.splitlines() if line.strip().isdigit()]  # beside MMEngine's log lines
    assert len(counts) == len(runs), res.stdout
    return counts


@pytest.mark.slow
def test_the_flops_table_is_what_torchs_counter_counts():
    """Recounts the table's micro entry on the CPU (a real forward and backward) and a
    class count other than the table's on meta tensors: a wrong table entry or a wrong
    class correction fails here."""
    if importlib.util.find_spec("mmseg") is None:
        pytest.skip("mmseg is not installed (bash scripts/setup.sh train)")
    micro, ten = _count(("--variant", "micro", "--crop", "64", "--device", "cpu"),
                        ("--variant", "micro", "--crop", "64", "--classes", "10"))
    assert micro == FLOPS_PER_ITERATION[("micro", 64)]
    assert ten == flops_per_image(_config(variant="micro", crop=64, classes=10)) * FLOPS_BATCH
