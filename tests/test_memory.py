"""Peak memory of the timed window and of the warm-up, right when a hook resets CUDA's
peak counter mid-run (MMEngine's logger does every log interval). CUDA's memory
counters are stood in here by a fake allocator behind the public functions the code
calls; tests/test_gpu.py runs the real thing."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from trainers.instrument import Recorder  # noqa: E402
from trainers.memory import PeakMemory  # noqa: E402

GB = 1e9


class FakeAllocator:
    """CUDA's caching-allocator statistics: bytes held now and the peak since the last reset."""

    def __init__(self):
        self.now = self.peak = 0.0

    def alloc(self, n: float) -> None:
        self.now += n
        self.peak = max(self.peak, self.now)

    def free(self, n: float) -> None:
        self.now -= n

    # the public torch.cuda functions the code (and MMEngine) call
    def max_memory_allocated(self, device=None) -> int:
        return int(self.peak)

    def reset_peak_memory_stats(self, device=None) -> None:
        self.peak = self.now


@pytest.fixture
def fake_cuda(monkeypatch) -> FakeAllocator:
    fake = FakeAllocator()
    for mod in (torch.cuda, torch.cuda.memory):
        monkeypatch.setattr(mod, "max_memory_allocated", fake.max_memory_allocated)
        monkeypatch.setattr(mod, "reset_peak_memory_stats", fake.reset_peak_memory_stats)
    return fake


def mmengine_logger_hook() -> int:
    """What mmengine.device.get_max_cuda_memory does every log interval: read, then reset."""
    mem = torch.cuda.max_memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    return mem


def _run(fake: FakeAllocator, memory: PeakMemory, *, warmup: int = 2, iterations: int = 9) -> Recorder:
    """A run on a CPU Recorder whose memory is a stood-in GPU's: weights 2 GB; warm-up
    spikes to 50 GB (autotuning); each timed iteration peaks at 2 + 14 GB of activations,
    except the last two (1.5 GB); the hook resets the counter every 3 iterations."""
    rec = Recorder(torch.device("cpu"), warmup=warmup, memory=memory)
    fake.alloc(2 * GB)  # the model, before the run
    memory.start()
    for i in range(warmup + iterations):
        rec.begin()
        spike = 48 * GB if i == 0 else (14 * GB if i < warmup + iterations - 2 else 1.5 * GB)
        fake.alloc(spike)
        fake.free(spike)
        if i % 3 == 2:
            mmengine_logger_hook()
        rec.end(0.0, 1)
    rec.finish()
    return rec


def test_window_peak_survives_the_hooks_resets_and_warmup_is_apart(fake_cuda):
    memory = PeakMemory(torch.device("cuda", 0))
    _run(fake_cuda, memory)
    assert memory.window_bytes == 16 * GB  # 2 GB weights + 14 GB activations, though reset 3 times since
    assert memory.warmup_bytes == 50 * GB  # the warm-up's spike, not counted in the window
    assert fake_cuda.max_memory_allocated() == 3.5 * GB  # what a reading at the end alone would say
    assert memory.resets == 3  # the hook's resets (iterations 2, 5, 8), not the PeakMemory's own
    assert memory.extra() == {"peak_memory_source": "cuda_max_memory_allocated", "warmup_peak_memory_bytes": 50 * GB,
                              "peak_memory_resets_seen": 3}


def test_the_wrapper_is_removed_at_the_end(fake_cuda):
    memory = PeakMemory(torch.device("cuda", 0))
    _run(fake_cuda, memory)
    assert torch.cuda.reset_peak_memory_stats == fake_cuda.reset_peak_memory_stats
    assert torch.cuda.memory.reset_peak_memory_stats == fake_cuda.reset_peak_memory_stats


def test_a_reset_that_bypasses_the_function_is_caught_at_compaction(fake_cuda):
    """A reset the wrapper cannot see (a direct call into torch's C++): the counter is
    also read at every compaction of the Recorder (every 256 iterations on CUDA)."""
    memory = PeakMemory(torch.device("cuda", 0))
    rec = Recorder(torch.device("cpu"), warmup=1, memory=memory, resolve_every=2)
    memory.start()
    for i in range(9):
        rec.begin()
        fake_cuda.alloc(10 * GB if i == 3 else GB)
        fake_cuda.free(10 * GB if i == 3 else GB)
        if i == 5:
            fake_cuda.peak = fake_cuda.now  # reset behind everyone's back, after the compaction at 4
        rec.end(0.0, 1)
    rec.finish()
    assert memory.window_bytes == 10 * GB


def test_no_timed_iteration_the_warmup_is_the_whole_run(fake_cuda):
    memory = PeakMemory(torch.device("cuda", 0))
    rec = Recorder(torch.device("cpu"), warmup=3, memory=memory)
    memory.start()
    for _ in range(2):
        rec.begin()
        fake_cuda.alloc(GB)
        rec.end(0.0, 1)
    rec.finish()
    assert memory.window_bytes == memory.warmup_bytes == 2 * GB


def test_cpu_ranks_report_max_rss():
    memory = PeakMemory(torch.device("cpu"))
    rec = Recorder(torch.device("cpu"), warmup=1, memory=memory)
    memory.start()
    for _ in range(3):
        rec.begin()
        rec.end(0.0, 1)
    rec.finish()
    assert 50e6 < memory.warmup_bytes <= memory.window_bytes  # a torch process holds more than 50 MB
    assert memory.extra() == {"peak_memory_source": "max_rss", "warmup_peak_memory_bytes": memory.warmup_bytes}
