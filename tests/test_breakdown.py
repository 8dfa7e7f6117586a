"""Where the time goes: phases, all-reduce time and bytes, MFU, known-answer delays.

Three real 2-rank campaigns on the local executor (gloo): ``plain`` (the C++ comm hook, a
profiler window), ``delayed`` (known delays, timed by the Python comm hook) and one with
``experiment.time_comm=false``; plus small in-process checks of the pieces
(docs/breakdown.md says what every row and key means).
"""

from __future__ import annotations

import csv
import io
import json
import time
from pathlib import Path

import pytest

from conftest import Workspace

torch = pytest.importorskip("torch")

from campaign_trace.intervals import uncovered  # noqa: E402
from trainers.comm import bus_factor  # noqa: E402
from trainers.flops import mfu_extra  # noqa: E402
from trainers.instrument import Recorder  # noqa: E402
from trainers.stats import union_length  # noqa: E402

# 3 conv blocks of 64/128/256 channels: ~370K parameters, more than DDP's 1 MiB first
# bucket, so the all-reduce runs in 2 buckets; on 8x8 images it computes little.
MODEL = ["trainer.params.width=64", "trainer.params.depth=3", "dataset.image_size=8"]
TINY_MODEL = ["trainer.params.width=4", "trainer.params.depth=2", "dataset.image_size=8"]
DATA_DELAY, COMM_DELAY = 0.06, 0.15  # seconds; apart by more than the tolerance below
SLACK = 0.06  # scheduling noise on a loaded 2-core machine
PHASES_SQL = "select phase, total_s, mean_s, median_s, p95_s, count from breakdown where rank = ?"


def synthetic_flops(*, batch: int, channels: int, size: int, width: int, depth: int, classes: int) -> int:
    """Model FLOPs of one forward+backward of trainers.synthetic's net, by hand: 2 per
    multiply-add; backward = weight grads + input grads (none for the first layer)."""
    total, c = 0, channels
    for i in range(depth):
        out = width * 2**i
        macs = batch * out * size * size * c * 9
        total += macs * (2 + 2 + (2 if i > 0 else 0))
        c, size = out, (size // 2 if i < depth - 1 else size)
    return total + batch * c * classes * 6


def _run(tmp_path_factory, name: str, *overrides: str) -> Workspace:
    ws = Workspace(tmp_path_factory.mktemp(name))
    res = ws.launch("gpus=2", "experiment.warmup_iterations=1", *overrides, timeout=600)
    assert res.returncode == 0 and "1 completed" in res.stdout, res.stdout + res.stderr
    return ws


@pytest.fixture(scope="module")
def plain(tmp_path_factory) -> Workspace:
    return _run(tmp_path_factory, "plain", "experiment.base_iterations=16", "experiment.profile_iterations=2", *MODEL)


@pytest.fixture(scope="module")
def delayed(tmp_path_factory) -> Workspace:
    """Known delays, with experiment.comm_hook=python: the delays are found where they were put
    by trainers.comm's AllReduceTimer (what CUDA uses), and its figures are checked beside
    them (test_the_python_hook_when_asked_times_the_same_buckets); the C++ hook's injected delay
    is tests/test_comm_cpp.py's, ``plain`` runs the C++ hook in a campaign."""
    return _run(tmp_path_factory, "delayed", "experiment.base_iterations=12", "experiment.comm_hook=python",
                *TINY_MODEL, f"+trainer.params.inject_data_delay_s={DATA_DELAY}",
                f"+trainer.params.inject_comm_delay_s={COMM_DELAY}")


def _extra(ws: Workspace, rank: int) -> dict:
    return json.loads(ws.query("select extra from rank_timing where rank = ?", rank)[0][0])


def _phases(ws: Workspace, rank: int) -> dict[str, dict]:
    cols = ("phase", "total_s", "mean_s", "median_s", "p95_s", "count")
    return {r[0]: dict(zip(cols, r)) for r in ws.query(PHASES_SQL, rank)}


# ---------------------------------------------------------------- through campaign
@pytest.mark.slow
@pytest.mark.parametrize("rank", [0, 1])
def test_phases_sum_to_the_iteration_time(plain, rank):
    rows = plain.query("select data_s, forward_s, backward_s, step_s, iter_s from iteration "
                       "where rank = ? and not warmup", rank)
    assert len(rows) == 8
    parts = sum(sum(r[:4]) for r in rows)
    iters = sum(r[4] for r in rows)
    assert 0.97 * iters <= parts <= iters * 1.0001  # only the end() call is outside the phases
    (wall,) = plain.query("select wall_s from rank_timing where rank = ?", rank)[0]
    assert 0.8 * wall <= iters <= wall  # between iterations: the loop's own few microseconds
    ph = _phases(plain, rank)
    assert {"data", "forward", "backward", "step", "comm", "comm_exposed", "backward_compute", "iteration"} <= set(ph)
    for p in ("data", "forward", "backward", "step", "iteration"):
        assert ph[p]["count"] == 8
        assert ph[p]["mean_s"] == pytest.approx(ph[p]["total_s"] / 8)
        assert ph[p]["median_s"] <= ph[p]["p95_s"] * 1.0001
    assert ph["iteration"]["total_s"] == pytest.approx(iters)
    assert ph["backward_compute"]["total_s"] + ph["comm_exposed"]["total_s"] == pytest.approx(ph["backward"]["total_s"], rel=0.02)


@pytest.mark.slow
@pytest.mark.parametrize("rank", [0, 1])
def test_allreduce_time_and_bytes_match_the_trainable_parameters(plain, rank):
    params, comm_s, flops = plain.query("select trainable_params, comm_s, flops_per_iter from rank_timing where rank = ?", rank)[0]
    x = _extra(plain, rank)
    assert x["comm_source"] == "allreduce_timer"
    assert x["comm_hook"] == "cpp" and "comm_hook_fallback" not in x  # on CPU, the C++ hook (trainers.comm_cpp)
    assert x["allreduce_bytes_per_iter"] == params * 4 == x["grad_bytes_per_sync"]  # fp32 gradients, every one once
    assert x["allreduce_buckets_per_iter"] >= 2  # DDP: a 1 MiB first bucket, then 25 MiB ones
    # epoch = dataset.length (10,000) / (8 images x 2 ranks) iterations
    assert x["iterations_per_epoch"] == pytest.approx(10_000 / 16)
    assert x["allreduce_bytes_per_epoch"] == pytest.approx(params * 4 * 625)
    assert x["sync_bytes_per_epoch"] == pytest.approx(params * 4 * 625)
    assert comm_s > 0 and x["allreduce_s"] > 0 and 0 <= x["exposed_comm_s"] <= x["allreduce_span_s"] * 1.0001
    assert x["allreduce_s"] <= x["allreduce_span_s"] * 1.0001
    assert x["allreduce_busbw_gbs"] == pytest.approx(params * 4 * 8 / x["allreduce_s"] / 1e9 * bus_factor(2))
    assert x["interconnect_bandwidth_gbs"] is None and x["allreduce_busbw_fraction"] is None  # local states none
    per_iter = plain.query("select comm_s from iteration where rank = ? and not warmup", rank)
    assert all(c > 0 for (c,) in per_iter)
    assert sum(c for (c,) in per_iter) == pytest.approx(comm_s)


@pytest.mark.slow
@pytest.mark.parametrize("rank", [0, 1])
def test_mfu_is_against_the_local_platforms_stated_peak(plain, rank):
    (config,) = plain.query("select config from point")[0]
    peak = json.loads(config)["platform"]["peak_tflops"]["fp32"]
    flops, iters, wall, memory = plain.query(
        "select flops_per_iter, iterations, wall_s, peak_memory_bytes from rank_timing where rank = ?", rank)[0]
    assert flops == synthetic_flops(batch=8, channels=3, size=8, width=64, depth=3, classes=10)
    x = _extra(plain, rank)
    assert x["precision"] == x["math"] == "fp32" and x["flops_source"] == "flop_counter" and x["peak_tflops"] == peak
    assert x["math_flags"] == {"device": "cpu", "autocast": None}
    linear = 8 * 256 * 10 * 6  # the classifier: batch x 256 channels x 10 classes, forward + both grads
    assert x["flops_by_kind"] == {"matmul": linear, "conv": flops - linear}
    assert x["achieved_tflops"] == pytest.approx(flops * iters / wall / 1e12)
    assert x["mfu"] == pytest.approx(x["achieved_tflops"] / peak)
    assert x["peak_memory_source"] == "max_rss" and memory > 50e6  # a torch process holds more than 50 MB


@pytest.mark.slow
def test_profile_window_has_comm_and_exposed_comm(plain):
    rows = plain.query("select rank, comm_s, exposed_comm_s, total_s from profile order by rank")
    assert [r[0] for r in rows] == [0, 1]
    for _, comm_s, exposed, total in rows:
        assert 0 < comm_s and 0 <= exposed <= comm_s * 1.0001


@pytest.mark.slow
def test_profile_rows_are_the_trace_readers_figures_of_the_traces_beside_the_logs(plain):
    from campaign_trace import read_trace

    (folder, job), = plain.query("select job_folder, job_id from point")
    rows = plain.query("select rank, total_s, cpu_s, cpu_util, comm_s, exposed_comm_s, top_ops from profile order by rank")
    for rank, total, cpu, cpu_util, comm_s, exposed, top in rows:
        path = Path(folder) / f"{job}_{rank}_trace.json.gz"
        assert json.loads(top)["trace_file"] == str(path) and (Path(folder) / f"{job}_{rank}_log.err").exists()
        fig = read_trace(path)
        assert (fig.rank, fig.window_source) == (rank, "annotation campaign:profile_window")
        assert (total, cpu, cpu_util) == (fig.span_s, fig.cpu_op_s, fig.cpu_utilisation)
        assert (comm_s, exposed) == fig.comm
    out = plain.campaign("harvest", "--table", "utilisation", "--to", "csv")
    (row,) = list(csv.DictReader(io.StringIO(out.stdout)))
    assert row["trace_files"] == " ".join(str(Path(folder) / f"{job}_{r}_trace.json.gz") for r in (0, 1))


@pytest.mark.slow
def test_a_timing_run_does_not_checkpoint(plain):
    """experiment.checkpoint is off unless asked (tests/test_checkpoint.py runs jobs that are)."""
    (cid,), = plain.query("select distinct campaign_id from point")
    assert (plain.results / "jobs" / cid).is_dir() and not (plain.results / "jobs" / cid / "checkpoints").exists()
    extras = [json.loads(e) for (e,) in plain.query("select extra from rank_timing")]
    assert len(extras) == 2 and not any("checkpoint" in x for x in extras)


@pytest.mark.slow
@pytest.mark.parametrize("rank", [0, 1])
def test_injected_delays_are_found_where_they_were_put(delayed, rank):
    ph = _phases(delayed, rank)
    # data wait: the data delay, not the comm one
    assert DATA_DELAY <= ph["data"]["median_s"] < DATA_DELAY + SLACK
    # the all-reduce: the comm delay, exposed (the last bucket), inside the backward phase
    assert COMM_DELAY <= ph["comm"]["median_s"] < COMM_DELAY + SLACK
    assert COMM_DELAY <= ph["comm_exposed"]["median_s"] < COMM_DELAY + SLACK
    assert COMM_DELAY <= ph["backward"]["median_s"] < COMM_DELAY + SLACK
    assert ph["backward_compute"]["median_s"] < DATA_DELAY
    # and neither elsewhere
    assert ph["forward"]["median_s"] < DATA_DELAY and ph["step"]["median_s"] < DATA_DELAY
    x = _extra(delayed, rank)
    assert x["inject_data_delay_s"] == DATA_DELAY and x["inject_comm_delay_s"] == COMM_DELAY
    data_wait, = delayed.query("select data_wait_s from rank_timing where rank = ?", rank)[0]
    assert data_wait == pytest.approx(ph["data"]["total_s"])


# ---------------------------------------------------------------- the pieces, in-process
def test_union_and_exposed_intervals():
    assert union_length([(0, 2), (1, 3), (5, 6)]) == 4
    assert union_length([]) == 0
    busy, exposed = uncovered([(0, 4), (3, 6)], [(1, 2), (5, 10)])
    assert busy == 6 and exposed == 4  # 0-1, 2-5 uncovered


def test_recorder_resolves_allreduce_spans_and_breakdown():
    rec = Recorder(torch.device("cpu"), warmup=1)
    for _ in range(3):
        rec.begin()
        rec.mark("data")
        rec.mark("forward")
        a = rec.comm_span(400)
        time.sleep(0.002)
        b = rec.comm_span(600)
        a[1] = rec.stamp()
        time.sleep(0.003)
        b[1] = rec.stamp()
        rec.mark("backward")
        rec.mark("step")
        rec.end(1.0, images=4)
    rec.finish()
    ar = rec.allreduce_rows()
    assert [a["iter"] for a in ar] == [1, 2] and all(a["bytes"] == 1000 and a["buckets"] == 2 for a in ar)
    for a in ar:
        assert a["exposed_s"] >= 0.003 and a["busy_s"] >= 0.005 and a["busy_s"] <= a["span_s"] * 1.0001
    rows = rec.rows()
    assert all(r["comm_s"] == pytest.approx(a["busy_s"]) for r, a in zip(rows[1:], ar))
    names = [r["phase"] for r in rec.breakdown_rows(rows)]
    assert names == ["data", "forward", "backward", "step", "comm", "comm_exposed", "backward_compute", "iteration"]


def test_flops_counted_in_warmup_iteration_zero_only():
    lin = torch.nn.Linear(16, 8, bias=False)
    x = torch.randn(4, 16)
    rec = Recorder(torch.device("cpu"), warmup=1, count_flops=True)
    for _ in range(2):
        rec.begin()
        lin(x).sum().backward()
        rec.end()
    rec.finish()
    assert rec.flops_per_iter == 4 * 4 * 16 * 8  # forward 2BIO + weight grad 2BIO (input needs none)
    none = Recorder(torch.device("cpu"), warmup=0, count_flops=True)  # would be inside the timed window
    none.begin(); lin(x).sum().backward(); none.end(); none.finish()  # noqa: E702
    assert none.flops_per_iter is None


A100 = {"fp32": 19.5, "tf32": 156.0, "bf16": 312.0, "fp16": 312.0}
V100 = {"fp32": 14.0, "fp16": 112.0}
FP32_GPU = {"device": "cuda", "autocast": None, "matmul_tf32": False, "cudnn_tf32": True}


def test_mfu_math_and_missing_peak():
    cfg = {"platform": {"peak_tflops": {"fp32": 2.0, "bf16": 8.0}}, "trainer": {"precision": "bf16"}}
    bf16 = {"device": "cuda", "autocast": "bf16"}
    x = mfu_extra(cfg, flops_per_iter=1e12, flops_source="trainer", iterations=4, wall_s=1.0, math=bf16)
    assert x["precision"] == "bf16" and x["math"] == "bf16" and x["achieved_tflops"] == 4.0 and x["mfu"] == 0.5
    x = mfu_extra({"platform": {}, "trainer": {}}, flops_per_iter=1e12, flops_source="trainer", iterations=4,
                  wall_s=1.0, math={"device": "cpu", "autocast": None})
    assert x["precision"] == "fp32" and x["mfu"] is None and "no peak_tflops for fp32" in x["flops_note"]
    # one process driving 2 GPUs (nn.DataParallel): its FLOPs are shared by both devices
    x = mfu_extra(cfg, flops_per_iter=1e12, flops_source="flop_counter", iterations=4, wall_s=1.0, devices=2, math=bf16)
    assert x["achieved_tflops"] == 2.0 and x["mfu"] == 0.25 and x["devices_per_rank"] == 2


@pytest.mark.parametrize("math, peaks, kinds, mode, peak", [
    ({"device": "cuda", "autocast": "bf16"}, A100, {"matmul": 3, "conv": 1}, "bf16", 312.0),
    ({"device": "cuda", "autocast": "fp16"}, V100, None, "fp16", 112.0),
    (FP32_GPU, A100, {"matmul": 5, "conv": 0}, "fp32", 19.5),  # torch's defaults: cuBLAS fp32, cuDNN TF32
    (FP32_GPU, A100, {"matmul": 0, "conv": 5}, "tf32", 156.0),
    (FP32_GPU, A100, {"matmul": 1, "conv": 1}, "fp32 matmul + tf32 conv", 2 / (1 / 19.5 + 1 / 156.0)),
    (dict(FP32_GPU, matmul_tf32=True), A100, {"matmul": 1, "conv": 1}, "tf32", 156.0),
    (dict(FP32_GPU, matmul_tf32=True), V100, {"matmul": 1, "conv": 1}, "fp32", 14.0),  # no TF32 units
    (dict(FP32_GPU, matmul_tf32=True), A100, None, "tf32", 156.0),  # a trainer's own count: taken as matmuls
    ({"device": "cpu", "autocast": None}, {"fp32": 1.0}, {"matmul": 1, "conv": 1}, "fp32", 1.0),
    ({"device": "cpu", "autocast": "bf16"}, {"fp32": 1.0}, None, "bf16", None),  # no bf16 peak stated
])
def test_the_peak_is_the_math_in_use(math, peaks, kinds, mode, peak):
    from trainers.flops import peak_for

    got_mode, got_peak = peak_for(math, peaks, kinds)
    assert got_mode == mode and got_peak == (pytest.approx(peak) if peak else None)


def test_math_mode_reads_the_switches_as_they_are():
    from trainers.flops import math_mode

    saved = torch.get_float32_matmul_precision(), torch.backends.cudnn.allow_tf32
    fp32 = type("T", (), {})()  # a trainer without a precision attribute computes in fp32
    try:
        torch.set_float32_matmul_precision("highest")
        torch.backends.cudnn.allow_tf32 = False
        assert math_mode(fp32, torch.device("cpu")) == {"device": "cpu", "autocast": None}
        m = math_mode(fp32, torch.device("cuda", 0))
        assert m == {"device": "cuda", "autocast": None, "float32_matmul_precision": "highest", "matmul_tf32": False,
                     "cudnn_tf32": False}
        torch.set_float32_matmul_precision("high")
        torch.backends.cudnn.allow_tf32 = True
        m = math_mode(fp32, torch.device("cuda", 0))
        assert m["matmul_tf32"] is True and m["cudnn_tf32"] is True
    finally:
        torch.set_float32_matmul_precision(saved[0])
        torch.backends.cudnn.allow_tf32 = saved[1]
    bf16 = type("T", (), {"precision": "bf16"})()
    assert math_mode(bf16, torch.device("cuda", 0))["autocast"] == "bf16"


def test_counted_flops_are_split_into_matmuls_and_convolutions():
    conv, lin = torch.nn.Conv2d(3, 8, 3, bias=False), torch.nn.Linear(8 * 6 * 6, 4, bias=False)
    rec = Recorder(torch.device("cpu"), warmup=1, count_flops=True)
    rec.begin()
    x = torch.randn(2, 3, 8, 8, requires_grad=True)
    lin(conv(x).flatten(1)).sum().backward()
    rec.end()
    rec.finish()
    conv_macs, lin_macs = 2 * 8 * 6 * 6 * 3 * 9, 2 * 288 * 4
    # forward, weight grad and input grad (x requires grad): 3 x 2 FLOPs per multiply-add each
    assert rec.flops_kinds == {"conv": 6 * conv_macs, "matmul": 6 * lin_macs}
    assert rec.flops_per_iter == 6 * (conv_macs + lin_macs)


def test_flops_of_a_single_process_engine_count_every_replica():
    """The counter sees only its own thread: while it counts, the hand-built module runs
    its replicas (two CPU "devices" here) one after another, so all of them are counted."""
    from trainers.flops import IterationFlops, counting
    from trainers.parallel import HandDataParallel

    net = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
    x = torch.randn(32, 64)

    def count(model) -> int:
        c = IterationFlops()
        c.start()
        assert counting()
        model(x).sum().backward()
        return c.stop()

    plain = count(net)
    hand = HandDataParallel(net, ["cpu", "cpu"])
    try:
        assert count(hand) == plain and not counting()
        out = hand(x)  # not counting: the replicas in their threads again, same result
        assert torch.allclose(out, net(x))
    finally:
        hand.close()


class _FakeClock:
    """Stands in for the GPU (none here): stamps are event-like objects with CUDA
    events' ``query()`` and ``elapsed_time()`` (ms), on a clock that moves 1 ms a stamp
    and a device that completes work ``lag`` stamps behind the host."""

    def __init__(self, lag: int):
        self.now, self.lag = 0.0, lag

    def stamp(self):
        self.now += 0.001
        return _FakeEvent(self.now, self)


class _FakeEvent:
    def __init__(self, t: float, clock: _FakeClock):
        self.t, self.clock = t, clock

    def query(self) -> bool:
        return self.t <= self.clock.now - self.clock.lag * 0.001 + 1e-12

    def elapsed_time(self, other: "_FakeEvent") -> float:
        assert self.query() and other.query(), "elapsed_time of an event that has not completed"
        return (other.t - self.t) * 1000.0


def _record(resolve_every: int, iterations: int = 11, lag: int = 20) -> Recorder:
    clock = _FakeClock(lag)
    rec = Recorder(torch.device("cpu"), warmup=1, resolve_every=resolve_every)
    rec.stamp = rec._mark = clock.stamp  # marks and the hook's stamps alike
    rec._host_loss = False  # losses kept as tensors, as on a device
    for i in range(iterations):
        rec.begin()
        rec.mark("data")
        rec.mark("forward")
        a, b = rec.comm_span(400), rec.comm_span(600)
        a[1] = rec.stamp()
        if i != 5:  # iteration 5's second bucket never reports its completion
            b[1] = rec.stamp()
        rec.mark("backward")
        rec.mark("step")
        rec.end(torch.tensor(float(i) / 4), images=4)
    clock.lag = 0  # finish() synchronizes: everything has completed
    rec.finish()
    return rec


def test_compaction_resolves_completed_iterations_as_the_end_would():
    plain, compacted = _record(0), _record(2)
    # compacted in chunks, never past what the device had completed (the lag: ~2 iterations)
    assert 4 <= compacted._compacted <= 8
    assert all(isinstance(st, float) for marks in compacted._marks[:compacted._compacted] for _, st in marks)
    assert all(isinstance(st, _FakeEvent) for marks in compacted._marks[compacted._compacted:] for _, st in marks)
    # losses stacked, not one tensor each: iterations 0 and 1 share one chunk
    assert isinstance(compacted._loss[0], tuple) and compacted._loss[0][0] is compacted._loss[1][0]
    for a, b in zip(plain.rows(), compacted.rows()):
        assert a == pytest.approx(b)
    for a, b in zip(plain.allreduce_rows(), compacted.allreduce_rows()):
        assert a == pytest.approx(b)
    assert [r["buckets"] for r in compacted.allreduce_rows()] == [2, 2, 2, 2, 1, 2, 2, 2, 2, 2]
    for a, b in zip(plain.breakdown_rows(), compacted.breakdown_rows()):
        assert {k: v for k, v in a.items() if k != "phase"} == pytest.approx({k: v for k, v in b.items() if k != "phase"})
        assert a["phase"] == b["phase"]
    assert [r["loss"] for r in compacted.rows()] == [i / 4 for i in range(11)]


@pytest.mark.slow
def test_harvest_hardware_table_shows_the_jobs_figures(plain):
    out = plain.campaign("harvest", "--table", "hardware", "--to", "csv")
    assert out.returncode == 0, out.stdout + out.stderr
    (row,) = list(csv.DictReader(io.StringIO(out.stdout)))
    xs = [_extra(plain, r) for r in (0, 1)]
    (params,) = plain.query("select max(trainable_params) from rank_timing")[0]
    assert row["gpus"] == "2" and row["precision"] == row["math"] == "fp32" and int(row["trainable_params"]) == params
    assert float(row["mfu"]) == pytest.approx(sum(x["mfu"] for x in xs) / 2)  # local states an fp32 peak
    assert float(row["peak_tflops"]) == xs[0]["peak_tflops"] > 0
    assert float(row["allreduce_mb_per_iter"]) == pytest.approx(params * 4 / 1e6)
    assert float(row["busbw_gbs"]) == pytest.approx(sum(x["allreduce_busbw_gbs"] for x in xs) / 2)
    assert row["busbw_fraction"] == "" and row["interconnect_gbs"] == ""  # local states no interconnect
    assert float(row["exposed_comm_ms"]) == pytest.approx(sum(x["exposed_comm_s"] for x in xs) / 2 / 8 * 1e3)
    assert float(row["sync_gb_per_epoch"]) == pytest.approx(params * 4 * 625 / 1e9)
    assert float(row["peak_memory_gb"]) > 0 and "max RSS" in row["note"]
    warm = max(x["warmup_peak_memory_bytes"] for x in xs)
    assert float(row["warmup_peak_memory_gb"]) == pytest.approx(warm / 1e9) and 0 < warm <= float(row["peak_memory_gb"]) * 1e9


@pytest.mark.slow
def test_the_python_hook_when_asked_times_the_same_buckets(delayed):
    # experiment.comm_hook=python: trainers.comm's AllReduceTimer (what CUDA uses), the same
    # figures as the C++ hook's: every gradient once an iteration, each bucket a span
    ws = delayed
    for rank in (0, 1):
        (params,) = ws.query("select trainable_params from rank_timing where rank = ?", rank)[0]
        x = _extra(ws, rank)
        assert x["comm_source"] == "allreduce_timer" and x["comm_hook"] == "python"
        assert x["allreduce_bytes_per_iter"] == params * 4 and x["allreduce_buckets_per_iter"] >= 1
        assert 0 < x["allreduce_s"] <= x["allreduce_span_s"] * 1.0001


def test_a_comm_hook_that_is_not_one_is_refused_before_anything_runs(tmp_path):
    out = Workspace(tmp_path).launch("experiment.comm_hook=fortran", "--cfg", "job")  # forked: tests/forkserver.py
    assert out.returncode != 0 and "comm_hook" in out.stderr and "Traceback" not in out.stderr


@pytest.mark.slow
def test_time_comm_false_runs_ddps_own_allreduce_untimed(tmp_path_factory):
    # experiment.time_comm=false: no comm hook at all (docs/breakdown.md), so no
    # all-reduce figures; the phases still tile the iteration, communication inside backward
    ws = _run(tmp_path_factory, "untimed", "experiment.base_iterations=6", "experiment.time_comm=false", *TINY_MODEL)
    for rank in (0, 1):
        extra = _extra(ws, rank)
        assert extra["comm_source"] == "off"
        assert not any(k.startswith("allreduce_") for k in extra), extra
        phases = _phases(ws, rank)
        assert "comm_exposed" not in phases and "backward_compute" not in phases
        iters, parts = phases["iteration"]["total_s"], sum(phases[p]["total_s"] for p in ("data", "forward", "backward", "step"))
        assert 0.97 * iters <= parts <= iters * 1.0001  # only the end() call is outside the phases
        assert "comm" not in phases or phases["comm"]["total_s"] == 0  # nothing timed it
