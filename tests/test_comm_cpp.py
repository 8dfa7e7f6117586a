"""trainers.comm_cpp: the C++ DDP comm hook builds against the installed torch (its C++
hook interface is torch's internal API: a torch that moves it fails here, loudly),
reduces exactly as DDP's builtin all-reduce, and gives the Recorder the same spans the
Python hook does, on the same clock, in the iteration that launched them."""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def hook_module():
    from trainers import comm_cpp

    try:
        return comm_cpp.load_module()  # built once per torch (scripts/setup.sh builds it ahead)
    except comm_cpp.HookUnavailable as exc:
        pytest.fail(f"the C++ comm hook does not build against this torch: {exc}")


def test_its_clock_is_perf_counters(hook_module):
    # The Recorder's CPU marks are perf_counter readings; the hook's spans must be on that clock.
    for _ in range(100):
        a = time.perf_counter()
        b = hook_module.now()
        c = time.perf_counter()
        assert a <= b <= c


def test_a_built_module_is_found_and_its_key_follows_the_source(hook_module, tmp_path, monkeypatch):
    from trainers import comm_cpp

    assert comm_cpp.find() is not None
    k = comm_cpp.key()
    src = tmp_path / "timed_allreduce.cpp"
    src.write_text(comm_cpp.SOURCE.read_text() + "\n// changed\n")
    monkeypatch.setattr(comm_cpp, "SOURCE", src)
    assert comm_cpp.key() != k  # an edited source is built anew, never the stale module loaded
    assert comm_cpp.find() is None


def test_without_a_writable_folder_it_says_so_in_one_line(monkeypatch, tmp_path):
    from trainers import comm_cpp

    blocked = tmp_path / "a-file"
    blocked.write_text("")  # a folder cannot be made under a file, root or not
    monkeypatch.setattr(comm_cpp, "roots", lambda: [blocked / "ext"])
    monkeypatch.setattr(comm_cpp, "_loaded", {})
    with pytest.raises(comm_cpp.HookUnavailable) as exc:
        comm_cpp.load_module()
    assert "\n" not in str(exc.value) and "no writable folder" in str(exc.value)
    with pytest.raises(comm_cpp.HookUnavailable, match="not built"):
        comm_cpp.load_module(allow_build=False)


def test_a_failed_build_is_not_paid_for_again_by_every_job(monkeypatch, tmp_path):
    from trainers import comm_cpp

    src = tmp_path / "broken.cpp"
    src.write_text("this is not C++\n")
    monkeypatch.setattr(comm_cpp, "SOURCE", src)
    monkeypatch.setattr(comm_cpp, "roots", lambda: [tmp_path / "ext"])
    monkeypatch.setattr(comm_cpp, "_loaded", {})
    with pytest.raises(comm_cpp.HookUnavailable, match=r"building the C\+\+ comm hook failed") as first:
        comm_cpp.load_module()
    assert "\n" not in str(first.value)

    def no_second_build(**_kw):
        raise AssertionError("built again")

    monkeypatch.setattr(comm_cpp, "build", no_second_build)
    with pytest.raises(comm_cpp.HookUnavailable, match=r"--build tries again"):
        comm_cpp.load_module()  # the marker answers at once


MODES = ("plain", "delay", "refused")  # run in this order: "refused" takes rank 1's C++ hook away


def _scenario(rank: int, mode: str) -> dict:
    """One scenario on this rank's process group: a DDP model with the hook ``comm.attach``
    gives it, beside one with DDP's builtin all-reduce, each run 4 iterations, then 2 in a
    profiler window's own Recorder; what rank 0 reports of it."""
    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP

    from trainers import comm, comm_cpp
    from trainers.instrument import Recorder

    if mode == "refused" and rank == 1:  # one rank cannot load it: every rank takes the Python hook
        def refuse(**_kw):  # not even a HookUnavailable: whatever a rank meets, the ranks still agree
            raise PermissionError(13, "Permission denied", "/shared/ext")
        comm_cpp.load_module = refuse

    def net():
        torch.manual_seed(0)
        return torch.nn.Sequential(*[torch.nn.Linear(256, 256) for _ in range(6)])

    builtin = DDP(net(), bucket_cap_mb=0.3)
    model = DDP(net(), bucket_cap_mb=0.3)
    rec = Recorder(torch.device("cpu"), warmup=1)
    delay = 0.02 if mode == "delay" else 0.0
    timer, source, extra = comm.attach(type("T", (), {"model": model})(), rec, inject_delay_s=delay)
    x = torch.randn(4, 256) * (rank + 1)  # the ranks' gradients differ: the mean is not either's
    bounds = []
    for step in range(4):  # DDP rebuilds its buckets after the first iteration
        builtin(x).square().sum().backward()
        rec.begin()
        t0 = time.perf_counter()
        model(x).square().sum().backward()
        rec.mark("backward")
        rec.end()
        bounds.append((t0, time.perf_counter()))
    # the profiler window's own Recorder takes over, then hands back
    window = Recorder(torch.device("cpu"), warmup=0)
    timer.recorder = window
    for _ in range(2):
        builtin(x).square().sum().backward()  # (gradients accumulate: the same count on both)
        window.begin()
        model(x).square().sum().backward()
        window.end()
    window.finish()
    timer.recorder = rec
    rec.finish()
    diff = max((a.grad - b.grad).abs().max().item() for a, b in zip(model.parameters(), builtin.parameters()))
    scale = max(b.grad.abs().max().item() for b in builtin.parameters())
    spans = [[list(s) for s in sp] for sp in rec._spans]
    inside = all(b0 <= s[0] <= s[1] <= b1 for (b0, b1), sp in zip(bounds, spans) for s in sp)
    return {"source": source, "extra": extra, "kind": getattr(timer, "kind", "python"), "rel_diff": diff / scale,
            "rows": rec.allreduce_rows(timed_only=False), "window_rows": window.allreduce_rows(),
            "inside": inside, "param_bytes": sum(p.numel() * p.element_size() for p in builtin.parameters())}


def _rank(rank: int, port: int, out: str, world: int) -> None:
    import torch
    import torch.distributed as dist

    sys.path.insert(0, str(ROOT))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    results = {mode: _scenario(rank, mode) for mode in MODES}
    if rank == 0:
        Path(out).write_text(json.dumps(results))
    dist.destroy_process_group()


@pytest.fixture(scope="module")
def ranks(hook_module, tmp_path_factory) -> dict:
    """Every scenario (``MODES``) in one set of three spawned ranks, each rank a new interpreter
    importing torch: rank 0's report of each, read by the tests below. Three ranks: x / 3 and
    x * (1 / 3) differ in the last bit for about a third of floats (the plain scenario's check)."""
    import torch.multiprocessing as mp

    out = tmp_path_factory.mktemp("comm-cpp") / "ranks.json"
    with pytest.MonkeyPatch.context() as mp_env:
        mp_env.setenv("GLOO_SOCKET_IFNAME", os.environ.get("GLOO_SOCKET_IFNAME", "lo"))
        mp.spawn(_rank, args=(_free_port(), str(out), 3), nprocs=3)
    return json.loads(out.read_text())


@pytest.mark.slow
def test_the_cpp_hook_reduces_as_ddp_does_and_times_every_bucket(ranks):
    # equality says the hook scales as DDP's builtin does (by 1/world, then SUM) on three ranks
    res = ranks["plain"]
    assert res["source"] == "allreduce_timer" and res["kind"] == "cpp" and res["extra"] == {"comm_hook": "cpp"}
    assert res["rel_diff"] == 0.0  # the mean over the ranks, bit for bit as DDP's builtin all-reduce leaves it
    rows = res["rows"]
    assert [r["iter"] for r in rows] == [0, 1, 2, 3]  # every iteration, each its own spans
    assert all(r["bytes"] == res["param_bytes"] for r in rows)  # every gradient, once an iteration
    assert all(r["buckets"] >= 3 for r in rows[1:])  # several buckets once DDP has rebuilt them, each timed
    assert res["inside"]  # each span inside the backward of the iteration that launched it
    for r in rows:
        assert 0 < r["busy_s"] <= r["span_s"] + 1e-9 and 0 <= r["exposed_s"] <= r["span_s"] + 1e-9
    # the profiler window's Recorder got its own two iterations' spans, the main one none of them
    assert [r["iter"] for r in res["window_rows"]] == [0, 1]
    assert all(r["bytes"] == res["param_bytes"] for r in res["window_rows"])


@pytest.mark.slow
def test_an_injected_delay_is_exposed_comm_on_the_last_bucket(ranks):
    res = ranks["delay"]
    assert res["kind"] == "cpp"
    assert all(r["exposed_s"] >= 0.02 for r in res["rows"])


@pytest.mark.slow
def test_a_rank_that_cannot_load_it_makes_every_rank_use_the_python_hook(ranks):
    res = ranks["refused"]  # rank 1 refuses; rank 0's result is written
    assert res["kind"] == "python" and res["extra"]["comm_hook"] == "python"
    assert res["extra"]["comm_hook_fallback"] == "another rank could not load the C++ comm hook"
    assert res["rel_diff"] < 1e-6 and all(r["bytes"] == res["param_bytes"] for r in res["rows"])


def test_its_command_prints_where_the_built_module_is(hook_module):
    import subprocess

    out = subprocess.run([sys.executable, "-m", "trainers.comm_cpp"], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip().endswith(".so")
