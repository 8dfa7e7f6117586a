"""The trace reader (campaign_trace) against real H100 traces, hand-made traces with
known answers, and CPU traces torch's profiler writes here.

The real traces are the shared fixtures (``../shared/fixtures`` beside the repository,
``$CAMPAIGN_FIXTURES`` elsewhere; their README says what ran in each). They are read
as they are; the hand counts below are written out independently of the reader.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from campaign_trace import WINDOW_MARK, TraceError, analyse, profile_row, read_trace

REPO = Path(__file__).resolve().parent.parent
FIXTURES = Path(os.environ.get("CAMPAIGN_FIXTURES") or REPO.parent / "shared" / "fixtures")
GPU_TRACES = sorted(FIXTURES.glob("*.json.gz")) if FIXTURES.is_dir() else []
needs_fixtures = pytest.mark.skipif(
    not GPU_TRACES, reason=f"no GPU trace fixtures in {FIXTURES} (clone the shared fixtures beside the repository "
                           f"or set CAMPAIGN_FIXTURES)")


def _hand_count(path: Path) -> dict:
    """Straight from the JSON: device intervals, their union, the kernels, first/last event."""
    with gzip.open(path, "rt") as fh:
        events = json.load(fh)["traceEvents"]
    timed = [e for e in events if e.get("ph") == "X" and e.get("cat") not in ("Trace", "overhead")]
    first = min(e["ts"] for e in timed)
    last = max(e["ts"] + e["dur"] for e in timed)
    device = sorted((e["ts"], e["ts"] + e["dur"]) for e in timed if e["cat"] in ("kernel", "gpu_memcpy", "gpu_memset"))
    busy, cur_start, cur_end = 0.0, None, None
    for start, end in device:
        if cur_end is not None and start <= cur_end:
            cur_end = max(cur_end, end)
            continue
        if cur_end is not None:
            busy += cur_end - cur_start
        cur_start, cur_end = start, end
    busy += cur_end - cur_start
    kernels = [e for e in timed if e["cat"] == "kernel"]
    return {"span_us": last - first, "busy_us": busy, "kernels": len(kernels),
            "sum_us": sum(end - start for start, end in device)}


@needs_fixtures
@pytest.mark.parametrize("path", GPU_TRACES, ids=lambda p: p.name)
def test_gpu_utilisation_of_real_traces_matches_a_hand_count(path):
    fig = read_trace(path)
    hand = _hand_count(path)
    (dev,) = fig.devices
    assert fig.window_source == "first to last event"  # these traces carry no window annotation
    assert fig.span_s == pytest.approx(hand["span_us"] / 1e6, rel=1e-9)
    assert dev.busy_s == pytest.approx(hand["busy_us"] / 1e6, rel=1e-9)
    assert dev.kernels == hand["kernels"]
    assert dev.utilisation == pytest.approx(hand["busy_us"] / hand["span_us"], rel=1e-9)
    assert 0 < dev.utilisation <= 1
    assert dev.busy_s <= hand["sum_us"] / 1e6  # a union never exceeds the sum
    assert dev.name == "NVIDIA H100 80GB HBM3"
    assert dev.comm_s == 0 and dev.exposed_comm_s == 0  # one GPU: no NCCL kernel runs
    row = profile_row(fig, iterations=2)
    assert row["gpu_util"] == dev.utilisation and row["total_s"] == fig.span_s and row["device_s"] == dev.busy_s


@needs_fixtures
def test_what_the_fixtures_say():
    """Figures of the two fixtures that their README explains."""
    mlp = read_trace(FIXTURES / "h100-ddp1-nccl-mlp-4iters-10ms-gaps.json.gz")
    # 4 x 10 ms host sleeps in a ~58 ms window: the GPU idles most of it
    assert mlp.span_s > 0.04 and mlp.devices[0].utilisation < 0.2
    assert (mlp.rank, mlp.world_size, mlp.backend) == (0, 1, "nccl")
    swin = read_trace(FIXTURES / "h100-swinv2b-upernet-bf16-b8-512-2iters.json.gz")
    assert swin.rank is None and 0.4 < swin.devices[0].utilisation < 0.9
    assert swin.devices[0].kernels > 5000
    names = [o["name"] for o in swin.top_operators]
    assert swin.top_operators[0]["device_s"] >= swin.top_operators[-1]["device_s"] > 0
    assert "aten::upsample_bilinear2d_backward" in names  # device time reaches the operator that launched it
    assert swin.top_kernels[0]["total_s"] >= swin.top_kernels[1]["total_s"]


def _x(name, ts, dur, cat="kernel", pid=0, tid=7, **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}


def test_kernels_on_two_streams_and_their_operator_count_once():
    trace = {"traceEvents": [
        _x("aten::mm", 0, 100, cat="cpu_op", pid=1, tid=1, **{"External id": 5}),
        _x("gemm", 10, 50, tid=7, **{"External id": 5}),
        _x("gemm", 40, 50, tid=8, **{"External id": 5}),  # another stream, overlapping: 10..90 busy
        _x("Memcpy HtoD", 95, 5, cat="gpu_memcpy"),
        _x("DistributedDataParallel.forward", 10, 90, cat="gpu_user_annotation"),  # an annotation, not activity
    ]}
    fig = analyse(trace)
    (dev,) = fig.devices
    assert fig.span_s == pytest.approx(100e-6)
    assert dev.busy_s == pytest.approx(85e-6) and dev.utilisation == pytest.approx(0.85)
    assert dev.kernel_s == pytest.approx(80e-6) and dev.memcpy_s == pytest.approx(5e-6) and dev.kernels == 2
    assert fig.top_kernels == [{"name": "gemm", "device": 0, "calls": 2, "total_s": pytest.approx(100e-6)}]
    assert fig.top_operators[0]["name"] == "aten::mm" and fig.top_operators[0]["device_s"] == pytest.approx(100e-6)


def test_the_job_annotation_is_the_window_and_clips_everything():
    trace = {"traceEvents": [
        _x("aten::mm", -50, 300, cat="cpu_op", pid=1, tid=1),  # sticks out both sides
        _x(WINDOW_MARK, 0, 100, cat="user_annotation", pid=1, tid=1),
        _x("ProfilerStep#3", 0, 40, cat="user_annotation", pid=1, tid=1),  # the job's mark wins
        _x("gemm", -20, 40),  # half before the window
        _x("gemm", 90, 30),  # a third inside
        _x("late", 200, 10),  # outside: not counted
    ]}
    fig = analyse(trace)
    assert fig.window_source == f"annotation {WINDOW_MARK}" and fig.span_s == pytest.approx(100e-6)
    (dev,) = fig.devices
    assert dev.busy_s == pytest.approx(30e-6) and dev.kernels == 2
    assert fig.cpu_op_s == pytest.approx(100e-6) and fig.cpu_utilisation == pytest.approx(1.0)


def test_profiler_steps_are_the_window_without_the_job_annotation():
    trace = {"traceEvents": [
        _x("aten::mm", -50, 300, cat="cpu_op", pid=1, tid=1),
        _x("ProfilerStep#3", 0, 40, cat="user_annotation", pid=1, tid=1),
        _x("ProfilerStep#4", 40, 60, cat="user_annotation", pid=1, tid=1),
        _x("gemm", 90, 30),
        {"ph": "X", "cat": "Trace", "name": "PyTorch Profiler (0)", "pid": "Spans", "tid": "x", "ts": -100, "dur": 999},
    ]}
    fig = analyse(trace)
    assert fig.window_source == "2 ProfilerStep annotation(s)" and fig.span_s == pytest.approx(100e-6)
    assert fig.devices[0].busy_s == pytest.approx(10e-6)


def test_nccl_kernels_under_both_names_and_their_exposed_part():
    trace = {"traceEvents": [
        _x("ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)", 0, 100),  # old name
        _x("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)", 300, 100),  # new
        _x("void at::native::conv_kernel<float>()", 50, 300, tid=8),  # compute on another stream
        _x("Memcpy DtoH (Device -> Pinned)", 0, 1000, cat="gpu_memcpy"),  # not compute
        _x("nccl:all_reduce", 0, 1000, cat="user_annotation", pid=1, tid=1),  # host launch: neither
    ]}
    fig = analyse(trace)
    (dev,) = fig.devices
    assert dev.comm_s == pytest.approx(200e-6) and dev.exposed_comm_s == pytest.approx(100e-6)  # 0-50, 350-400
    assert fig.comm == (pytest.approx(200e-6), pytest.approx(100e-6))
    assert dev.utilisation == pytest.approx(1.0)  # the memcpy covers the whole window


def test_gloo_collectives_on_cpu_and_the_part_the_rank_computed_through():
    trace = {"traceEvents": [
        _x("gloo:all_reduce", 100, 200, cat="user_annotation", pid=1, tid=7),
        _x("aten::mm", 0, 150, cat="cpu_op", pid=1, tid=1),
        _x("c10d::allreduce_", 90, 10, cat="cpu_op", pid=1, tid=1),  # a launch: not compute
        _x("DistributedDataParallel.forward", 0, 400, cat="user_annotation", pid=1, tid=1),
    ]}
    fig = analyse(trace)
    assert fig.devices == [] and fig.comm == (pytest.approx(200e-6), pytest.approx(150e-6))
    assert profile_row(fig, iterations=1)["gpu_util"] is None  # no device: NULL, not zero


def test_nested_operators_self_time():
    trace = {"traceEvents": [
        _x("aten::linear", 0, 100, cat="cpu_op", pid=1, tid=1),
        _x("aten::addmm", 10, 60, cat="cpu_op", pid=1, tid=1),
        _x("aten::copy_", 20, 10, cat="cpu_op", pid=1, tid=1),
        _x("aten::add", 0, 30, cat="cpu_op", pid=1, tid=2),  # another thread
    ]}
    fig = analyse(trace)
    ops = {o["name"]: o for o in fig.top_operators}
    assert ops["aten::linear"]["self_s"] == pytest.approx(40e-6) and ops["aten::addmm"]["self_s"] == pytest.approx(50e-6)
    assert ops["aten::linear"]["total_s"] == pytest.approx(100e-6)
    assert fig.cpu_op_s == pytest.approx(130e-6) and fig.host_threads == 2 and fig.operators == 4


def test_cpu_utilisation_is_at_most_one_and_busy_cores_count_the_threads():
    """Three threads each busy for 80 of the window's 100 us, overlapping: 240 thread-us.
    Busy cores = 2.4 (a count, not a utilisation); the host ran some operator during
    0..100, the whole window: utilisation 1.0, never 2.4. The study's eq. 3.3 is T_d / T_t;
    the tool's reading is busy time over the window's wall time (docs/gpu.md)."""
    trace = {"traceEvents": [
        _x(WINDOW_MARK, 0, 100, cat="user_annotation", pid=1, tid=1),
        _x("aten::mm", 0, 80, cat="cpu_op", pid=1, tid=1),
        _x("aten::mm", 10, 80, cat="cpu_op", pid=1, tid=2),
        _x("aten::mm", 20, 80, cat="cpu_op", pid=1, tid=3),
    ]}
    fig = analyse(trace)
    assert fig.cpu_op_s == pytest.approx(240e-6) and fig.cpu_busy_cores == pytest.approx(2.4)
    assert fig.cpu_busy_s == pytest.approx(100e-6) and fig.cpu_utilisation == pytest.approx(1.0)
    row = profile_row(fig, iterations=1)
    assert row["cpu_util"] == pytest.approx(1.0) and row["cpu_s"] / row["total_s"] == pytest.approx(2.4)
    half = analyse({"traceEvents": [_x(WINDOW_MARK, 0, 100, cat="user_annotation", pid=1, tid=1),
                                    _x("aten::mm", 0, 30, cat="cpu_op", pid=1, tid=1),
                                    _x("aten::mm", 20, 30, cat="cpu_op", pid=1, tid=2)]})
    assert half.cpu_utilisation == pytest.approx(0.5) and half.cpu_busy_cores == pytest.approx(0.6)


def test_a_window_without_collectives_has_no_communication_figure():
    trace = {"traceEvents": [_x("aten::mm", 0, 100, cat="cpu_op", pid=1, tid=1), _x("gemm", 0, 50)]}
    fig = analyse(trace)
    assert fig.cpu_collectives == 0 and fig.devices[0].comm_s == 0
    assert fig.comm == (None, None)  # nothing to communicate (one rank): absent, not 0.0


@pytest.mark.parametrize("content, expect", [
    (None, "no such file"),
    (b"hello", "not JSON"),
    (b'{"schemaVersion": 1}', "not a chrome trace (no traceEvents list)"),
    (b"\x1f\x8b\x08\x00broken", "a damaged gzip file"),
    (b'{"traceEvents": []}', "no profiled events"),
])
def test_bad_files_are_one_line_errors_naming_the_file(tmp_path, content, expect):
    path = tmp_path / "t.json"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(TraceError) as err:
        read_trace(path)
    assert str(err.value).startswith(f"{path}: ") and expect in str(err.value) and "\n" not in str(err.value)


def test_the_reader_imports_no_torch():
    code = ("import sys, campaign_trace, campaign.observe.trace_report; "
            "sys.exit(1 if 'torch' in sys.modules or 'polars' in sys.modules else 0)")
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


# ---------------------------------------------------------------- traces torch writes here (CPU)
def test_a_cpu_trace_from_torch_profiler(tmp_path):
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile, record_function

    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 8))
    x = torch.randn(32, 64)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        t0 = time.perf_counter()
        with record_function(WINDOW_MARK):
            for _ in range(3):
                model(x).sum().backward()
            time.sleep(0.05)  # the host idles: no operator runs
        wall = time.perf_counter() - t0
    path = tmp_path / "cpu.json.gz"
    prof.export_chrome_trace(str(path))
    fig = read_trace(path)
    assert fig.window_source == f"annotation {WINDOW_MARK}"
    assert 0.05 <= fig.span_s <= wall  # the annotation's own interval, inside what the host measured
    assert fig.devices == [] and fig.gpu_utilisation is None
    assert 0 < fig.cpu_op_s <= fig.span_s - 0.05 + 1e-3  # one thread: never more than the window less the sleep
    assert fig.operators > 10 and fig.host_threads >= 1
    names = {o["name"] for o in fig.top_operators}
    assert names & {"aten::addmm", "aten::mm", "aten::linear"}
    assert fig.comm == (None, None)  # one rank: no collective, so no communication figure (not 0)
    assert profile_row(fig, iterations=3)["comm_s"] is None and profile_row(fig, iterations=3)["exposed_comm_s"] is None


def test_a_cpu_trace_with_profiler_steps(tmp_path):
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile, schedule

    path = tmp_path / "steps.json"
    model = torch.nn.Linear(32, 32)
    with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=1, warmup=1, active=2, repeat=1),
                 on_trace_ready=lambda p: p.export_chrome_trace(str(path))) as prof:
        for _ in range(5):
            model(torch.randn(8, 32)).sum().backward()
            prof.step()
    fig = read_trace(path)
    assert fig.window_source == "2 ProfilerStep annotation(s)"
    assert fig.span_s > 0 and fig.operators > 0 and fig.cpu_op_s <= fig.span_s


# ---------------------------------------------------------------- campaign trace
def _campaign(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "campaign", "trace", *args], capture_output=True, text=True,
                          timeout=120, cwd=REPO)


@needs_fixtures
def test_campaign_trace_json_on_every_fixture_matches_the_hand_count():
    res = _campaign(*map(str, GPU_TRACES), "--json")
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert [o["file"] for o in out] == [str(p) for p in GPU_TRACES]
    for o, path in zip(out, GPU_TRACES):
        hand = _hand_count(path)
        (dev,) = o["devices"]
        assert dev["utilisation"] == pytest.approx(hand["busy_us"] / hand["span_us"], rel=1e-9) and dev["utilisation"] <= 1
        assert dev["kernels"] == hand["kernels"]


@needs_fixtures
def test_campaign_trace_table():
    path = FIXTURES / "h100-ddp1-nccl-mlp-4iters-10ms-gaps.json.gz"
    res = _campaign(str(path), "--top", "2")
    assert res.returncode == 0, res.stderr
    head, row = res.stdout.splitlines()[0], res.stdout.splitlines()[2]
    assert head.split()[:6] == ["trace", "rank", "device", "window", "span_ms", "gpu_busy_ms"]
    util = read_trace(path).devices[0].utilisation
    assert path.name in row and "NVIDIA H100 80GB HBM3" in row and f"{util:.3f}" in row.split()
    assert f"{path}: top kernels by time" in res.stdout and f"{path}: top operators by device time" in res.stdout


def test_campaign_trace_of_a_file_that_is_not_a_trace(tmp_path):
    bad = tmp_path / "notes.json"
    bad.write_text('{"hello": 1}')
    res = _campaign(str(bad))
    assert res.returncode == 2 and res.stdout == ""
    assert res.stderr == f"error: {bad}: not a chrome trace (no traceEvents list); expected a file written by " \
                         f"torch.profiler's export_chrome_trace\n"


TITLE, CLEAR = "\x1b]0;pwned\x07", "\x1b[2J"


def test_campaign_trace_escapes_the_names_a_crafted_trace_holds(tmp_path):
    """Issue 41: kernel, operator and device names are whoever wrote the file's; on a
    terminal they set the window's title and cleared the screen."""
    trace = {"deviceProperties": [{"id": 0, "name": f"GPU{TITLE}"}], "traceEvents": [
        _x(f"aten::mm{CLEAR}", 0, 100, cat="cpu_op", pid=1, tid=1, **{"External id": 5}),
        _x(f"gemm{TITLE}", 10, 50, tid=7, **{"External id": 5}),
    ]}
    path = tmp_path / f"evil{CLEAR}.json.gz"
    with gzip.open(path, "wt") as fh:
        json.dump(trace, fh)
    res = _campaign(str(path))
    assert res.returncode == 0, res.stderr
    assert "\x1b" not in res.stdout + res.stderr
    assert "GPU\\x1b]0;pwned\\x07" in res.stdout and "gemm\\x1b]0;pwned\\x07" in res.stdout
    assert "aten::mm\\x1b[2J" in res.stdout and "evil\\x1b[2J.json.gz: top kernels by time" in res.stdout
    res = _campaign(str(path), "--json")  # data: valid JSON, the escape written by json itself
    assert res.returncode == 0 and "\x1b" not in res.stdout, res.stderr
    (fig,) = json.loads(res.stdout)
    assert fig["top_kernels"][0]["name"] == f"gemm{TITLE}" and fig["devices"][0]["name"] == f"GPU{TITLE}"


# ------------------------------------------------------------------ the profiler's totals (eq. 3.3's terms)


def _hand_totals(path: Path) -> tuple[float, float]:
    """(CPU time total, CUDA time total) in us, from the JSON: every device event's duration
    summed; per host thread the union of its host events (operators, annotations, runtime
    and driver calls), which is the sum of their self times where events nest (these do)."""
    with gzip.open(path, "rt") as fh:
        events = [e for e in json.load(fh)["traceEvents"] if e.get("ph") == "X"]
    threads: dict = {}
    for e in events:
        if e.get("cat") in ("cpu_op", "user_annotation", "cuda_runtime", "cuda_driver"):
            threads.setdefault((e["pid"], e["tid"]), []).append((e["ts"], e["ts"] + e["dur"]))
    cpu = 0.0
    for intervals in threads.values():
        end = None
        for s, t in sorted(intervals):
            if end is None or s > end:
                cpu, end = cpu + (t - s), t
            elif t > end:
                cpu, end = cpu + (t - end), t
    return cpu, sum(e["dur"] for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"))


@needs_fixtures
@pytest.mark.parametrize("path", GPU_TRACES, ids=lambda p: p.name)
def test_the_profiler_totals_of_real_traces_match_a_hand_count(path):
    fig = read_trace(path)
    cpu_us, cuda_us = _hand_totals(path)
    assert fig.cpu_time_total_s == pytest.approx(cpu_us / 1e6, rel=1e-9)
    assert fig.device_time_total_s == pytest.approx(cuda_us / 1e6, rel=1e-9)
    assert fig.device_time_total_s >= fig.devices[0].busy_s  # a sum is never below the union
    totals = profile_row(fig, iterations=2)["top_ops"]
    assert totals == {"cpu_time_total_s": fig.cpu_time_total_s, "device_time_total_s": fig.device_time_total_s}


def test_the_profiler_totals_are_sums_nested_as_the_profiler_nests():
    """Self CPU time total: per thread, each event's time less its children's (an event is a
    child of the innermost open one containing it whole), summed; Self CUDA time total: the
    device events' durations summed (two streams at once count twice); all clipped to the window."""
    trace = {"traceEvents": [
        _x(WINDOW_MARK, 0, 1000, cat="user_annotation", pid=1, tid=1),  # the window: not work in it
        _x("aten::mm", 100, 200, cat="cpu_op", pid=1, tid=1),  # 100..300
        _x("cudaLaunchKernel", 150, 20, cat="cuda_runtime", pid=1, tid=1),  # a child: no time of its own to add
        _x("aten::add", 250, 100, cat="cpu_op", pid=1, tid=1),  # 250..350: sticks out of mm, so not its child
        _x("Optimizer.step", 900, 300, cat="user_annotation", pid=1, tid=1),  # 900..1200: 100 in the window
        _x("autograd::engine", 400, 50, cat="cpu_op", pid=1, tid=2),  # another thread: 50 more
        _x("gemm", 100, 300, tid=7),  # 300
        _x("gemm", 200, 300, tid=8),  # another stream, overlapping: 300 more (a sum)
        _x("Memcpy HtoD", 950, 100, cat="gpu_memcpy"),  # 50 in the window
        _x("DDP.forward", 100, 500, cat="gpu_user_annotation"),  # not activity
    ]}
    fig = analyse(trace)
    # thread 1: mm 200 (its child, the launch, inside it); add 100 counted whole (the profiler pops mm
    # for it: 250 + 100 > 300); step 100 after clipping; thread 2: 50
    assert fig.cpu_time_total_s == pytest.approx((200 + 100 + 100 + 50) * 1e-6, rel=1e-9)
    assert fig.device_time_total_s == pytest.approx((300 + 300 + 50) * 1e-6, rel=1e-9)
    assert fig.devices[0].busy_s == pytest.approx((400 + 50) * 1e-6, rel=1e-9)  # the union stays apart
    no_device = analyse({"traceEvents": [_x("aten::mm", 0, 10, cat="cpu_op", pid=1, tid=1)]})
    assert profile_row(no_device, iterations=1)["top_ops"] == {"cpu_time_total_s": pytest.approx(10e-6),
                                                               "device_time_total_s": None}
