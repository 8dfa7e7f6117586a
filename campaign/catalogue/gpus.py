"""The NVIDIA GPUs of this machine, for ``platform=local_gpu``: what ``nvidia-smi`` lists
(honouring ``CUDA_VISIBLE_DEVICES``), and the datasheet figures of known models.

Host side: asks ``nvidia-smi``, never imports torch. The figures are NVIDIA's datasheet
peaks (dense, no sparsity) of the model's form factor, as the cluster platforms in
conf/platform/ state them; a model not in the table gets none (harvest then says the
platform states no peak instead of inventing an MFU).
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from typing import Any, Optional


def cpu_count() -> int:
    """Cores this process may use (honours affinity masks and cgroups' cpusets)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


# (pattern on nvidia-smi's name, memory bandwidth GB/s, GPU-GPU link, its GB/s, peak TFLOP/s)
# Patterns are tried in order: the specific form factors before the generic name.
_SXM_A100 = {"fp64": 9.7, "fp32": 19.5, "tf32": 156.0, "fp16": 312.0, "bf16": 312.0}
_SXM_H100 = {"fp64": 34.0, "fp32": 67.0, "tf32": 494.7, "fp16": 989.4, "bf16": 989.4, "fp8": 1978.9}
_NVL_H100 = {"fp64": 30.0, "fp32": 60.0, "tf32": 417.5, "fp16": 835.5, "bf16": 835.5, "fp8": 1670.5}
DATASHEETS: list[tuple[str, float, str, float, dict[str, float]]] = [
    (r"\bH200 NVL", 4800, "NVLINK 4.0 (2-4 GPU bridge)", 900, _NVL_H100),
    (r"\bH200", 4800, "NVLINK 4.0", 900, _SXM_H100),
    (r"\bH100 NVL", 3900, "NVLINK 4.0 (2-GPU bridge)", 600, _NVL_H100),
    (r"\bH100 PCIe", 2000, "PCIe 5.0 x16", 128,
     {"fp64": 26.0, "fp32": 51.0, "tf32": 378.0, "fp16": 756.0, "bf16": 756.0, "fp8": 1513.0}),
    (r"\bH100", 3350, "NVLINK 4.0", 900, _SXM_H100),
    (r"A100.*SXM4?-80GB", 2039, "NVLINK 3.0", 600, _SXM_A100),
    (r"A100.*SXM", 1555, "NVLINK 3.0", 600, _SXM_A100),
    (r"A100.*80GB.*PCIe", 1935, "PCIe 4.0 x16", 64, _SXM_A100),
    (r"A100", 1555, "PCIe 4.0 x16", 64, _SXM_A100),
    # NVIDIA RTX A6000 datasheet (nvidia.com/en-us/design-visualization/rtx-a6000/, the DataParallel
    # study's [8]): 48 GB GDDR6 at 768 GB/s, NVLink bridge 112.5 GB/s between two cards; 38.7 TFLOP/s
    # FP32, Tensor 154.8 TFLOP/s FP16/BF16 and 77.4 TF32 (sparsity left out: the dense half). FP64 1/32 of FP32.
    (r"RTX A6000|\bA6000", 768, "NVLink bridge (2 GPUs)", 112.5,
     {"fp64": 1.2, "fp32": 38.7, "tf32": 77.4, "fp16": 154.8, "bf16": 154.8}),
    # NVIDIA T4 datasheet (nvidia.com/en-us/data-center/tesla-t4/; the ViT study's Vaughan nodes): 16 GB
    # GDDR6 at 320 GB/s, PCIe 3.0 x16; 8.1 TFLOP/s FP32, 65 TFLOP/s FP16 (mixed precision), no BF16/TF32.
    (r"\bT4\b", 320, "PCIe 3.0 x16", 32, {"fp64": 0.25, "fp32": 8.1, "fp16": 65.0}),
    (r"V100.*SXM", 900, "NVLINK 2.0", 300, {"fp64": 7.8, "fp32": 15.7, "fp16": 125.0}),
    (r"V100", 900, "PCIe 3.0 x16", 32, {"fp64": 7.0, "fp32": 14.0, "fp16": 112.0}),
]
NONE_VISIBLE = "none visible"
_QUERY = "index,uuid,name,memory.total"  # then compute_cap, where the driver knows it


@dataclass(frozen=True)
class LocalGPUs:
    count: int
    name: str  # the first visible GPU's (a machine of mixed models is timed as the first)
    memory_gb: float
    why_none: Optional[str] = None  # count == 0: what nvidia-smi said, or that it is missing
    compute_capability: Optional[float] = None  # the first visible GPU's (nvidia-smi's compute_cap); None: unknown

    def datasheet(self) -> Optional[tuple[str, float, str, float, dict[str, float]]]:
        return next((row for row in DATASHEETS if re.search(row[0], self.name, re.I)), None)

    def fact(self, key: str) -> Any:
        """One ``platform`` field of this machine (the ``${local_gpu:KEY}`` resolver)."""
        sheet = self.datasheet()
        if key == "count":
            return self.count
        if key == "name":
            return self.name
        if key == "memory_gb":
            return self.memory_gb
        if key == "compute_capability":
            return self.compute_capability
        if key == "memory_bandwidth_gbs":
            return float(sheet[1]) if sheet else 0.0
        if key == "interconnect":
            return sheet[2] if sheet and self.count > 1 else ""
        if key == "interconnect_bandwidth_gbs":
            return float(sheet[3]) if sheet and self.count > 1 else 0.0
        if key == "peak_tflops":
            return dict(sheet[4]) if sheet else {}
        if key == "cpus_per_gpu":
            return max(1, cpu_count() // max(1, self.count))
        raise KeyError(f"${{local_gpu:{key}}}: unknown key; known: count, name, memory_gb, memory_bandwidth_gbs, "
                       f"interconnect, interconnect_bandwidth_gbs, peak_tflops, cpus_per_gpu, compute_capability")


def _visible(rows: list[tuple[str, ...]], env: Optional[str]) -> list[tuple[str, ...]]:
    """The rows CUDA_VISIBLE_DEVICES leaves visible (indices or UUID prefixes, as CUDA reads it:
    up to the first entry it cannot match)."""
    if env is None:
        return rows
    out = []
    for item in (s.strip() for s in env.split(",")):
        match = [r for r in rows if (item.isdigit() and r[0] == item) or (item and r[1].startswith(item))]
        if len(match) != 1 or match[0] in out:
            break
        out.append(match[0])
    return out


@functools.lru_cache(maxsize=1)
def local_gpus() -> LocalGPUs:
    """The GPUs a local job would see (cached: one ``nvidia-smi`` call per process)."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return LocalGPUs(0, NONE_VISIBLE, 0.0, "nvidia-smi is not installed")
    try:
        done = subprocess.run([smi, f"--query-gpu={_QUERY},compute_cap", "--format=csv,noheader,nounits"],
                              capture_output=True, text=True, timeout=30)
        if done.returncode != 0 and "compute_cap" in (done.stderr + done.stdout):
            # a driver older than R510 has no compute_cap field: ask without it
            done = subprocess.run([smi, f"--query-gpu={_QUERY}", "--format=csv,noheader,nounits"],
                                  capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return LocalGPUs(0, NONE_VISIBLE, 0.0, f"nvidia-smi failed: {exc}")
    if done.returncode != 0:
        msg = (done.stderr or done.stdout).strip().splitlines()
        return LocalGPUs(0, NONE_VISIBLE, 0.0, f"nvidia-smi: {msg[0] if msg else f'exit {done.returncode}'}")
    rows = [tuple(c.strip() for c in line.split(",")) for line in done.stdout.splitlines() if line.strip()]
    rows = [r for r in rows if len(r) in (4, 5)]
    rows = _visible(rows, os.environ.get("CUDA_VISIBLE_DEVICES"))
    if not rows:
        return LocalGPUs(0, NONE_VISIBLE, 0.0, "nvidia-smi lists no GPU" + (
            " that CUDA_VISIBLE_DEVICES leaves visible" if "CUDA_VISIBLE_DEVICES" in os.environ else ""))
    try:
        memory_gb = round(float(rows[0][3]) / 1024, 1)
    except ValueError:
        memory_gb = 0.0
    return LocalGPUs(len(rows), rows[0][2], memory_gb, compute_capability=_capability(rows[0]))


def _capability(row: tuple[str, ...]) -> Optional[float]:
    """nvidia-smi's ``compute_cap`` (``8.0``) of a row; None when absent or ``[N/A]``."""
    try:
        return float(row[4]) if len(row) > 4 else None
    except ValueError:
        return None


def local_gpu_fact(key: str) -> Any:
    return local_gpus().fact(key)
