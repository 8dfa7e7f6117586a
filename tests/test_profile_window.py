"""The profiler window never costs a run its timing rows: whatever stage of the
profiler fails, the iterations run, the timing rows are already stored, and the
failure is a warning on the point that ``campaign status`` and ``harvest`` show.
Its figures come from the trace it exports (campaign_trace), never from torch's
profiler objects."""

from __future__ import annotations

import csv
import io
import json

import pytest

from conftest import Workspace

torch = pytest.importorskip("torch")

from campaign_trace import read_trace  # noqa: E402
from trainers.loop import INJECT_ENV, STAGES, profile_window  # noqa: E402

PROFILED = ["gpus=2", "experiment=profile", "experiment.base_iterations=6", "experiment.warmup_iterations=1",
            "experiment.profile_iterations=2", "trainer.params.width=4", "trainer.params.depth=2", "dataset.image_size=8"]


class _Tiny:
    """A trainer as trainers.registry describes one, counting its steps."""

    images_per_step = 4

    def __init__(self):
        self.model = torch.nn.Linear(16, 4)
        self.steps = 0

    def step(self, rec):
        self.steps += 1
        rec.mark("data")
        loss = self.model(torch.randn(4, 16)).sum()
        rec.mark("forward")
        loss.backward()
        rec.mark("backward")
        return loss


def test_the_window_row_comes_from_its_exported_trace(tmp_path, monkeypatch):
    monkeypatch.delenv(INJECT_ENV, raising=False)
    trainer, path = _Tiny(), tmp_path / "job_0_trace.json.gz"
    row, warning = profile_window(trainer, torch.device("cpu"), 3, trace_path=path)
    assert warning is None and trainer.steps == 3 and path.read_bytes()[:2] == b"\x1f\x8b"  # gzipped
    fig = read_trace(path)
    assert row["iterations"] == 3 and row["total_s"] == fig.span_s and row["cpu_util"] == fig.cpu_utilisation
    assert row["gpu_util"] is None and row["device_s"] is None  # CPU: no device, NULL not zero
    assert 0 < row["total_s"] <= row["top_ops"]["wall_s"]  # the annotation lies inside the host's own reading
    assert row["top_ops"]["trace_file"] == str(path) and "warning" not in row["top_ops"]
    assert row["top_ops"]["operators"] == fig.top_operators


@pytest.mark.parametrize("stage", STAGES)
def test_a_failing_profiler_is_a_warning_and_the_iterations_still_run(tmp_path, monkeypatch, stage):
    monkeypatch.setenv(INJECT_ENV, stage)
    trainer, path = _Tiny(), tmp_path / "t.json.gz"
    row, warning = profile_window(trainer, torch.device("cpu"), 2, trace_path=path)
    assert trainer.steps == 2  # every rank makes the same steps (and collectives) whatever fails
    assert warning == f"profiler {stage} failed: InjectedProfilerError: injected profiler failure at {stage} " \
                      f"({INJECT_ENV}={stage})"
    assert row["iterations"] == 2 and row["total_s"] > 0 and row["gpu_util"] is None and row["cpu_util"] is None
    assert row["top_ops"]["warning"] == warning
    # the trace is kept (and named) when it was written before the failure
    assert row["top_ops"]["trace_file"] == (str(path) if stage == "read" else None)
    assert path.exists() == (stage == "read")


@pytest.mark.slow
def test_a_campaign_whose_profiler_fails_keeps_its_timing_rows_and_says_so(tmp_path):
    ws = Workspace(tmp_path)
    ws.env[INJECT_ENV] = "start"
    res = ws.launch(*PROFILED, timeout=600)
    assert res.returncode == 0 and "1 completed" in res.stdout, res.stdout + res.stderr
    assert ws.query("select rank, iterations from rank_timing order by rank") == [(0, 6), (1, 6)]
    assert ws.query("select count(*) from iteration where not warmup")[0][0] == 12
    assert ws.query("select rank, iterations, gpu_util, cpu_util from profile order by rank") == [
        (0, 2, None, None), (1, 2, None, None)]
    expected = ("warning: ranks 0,1: profiler start failed: InjectedProfilerError: injected profiler failure at start "
                f"({INJECT_ENV}=start) (timing rows kept, no profile figures)")
    assert ws.query("select state, reason from point") == [("completed", expected)]
    status = ws.campaign("status", "--json")
    (point,) = json.loads(status.stdout)["points"]
    assert point["state"] == "completed" and point["reason"] == expected
    assert expected in ws.campaign("status").stdout
    util = ws.campaign("harvest", "--table", "utilisation", "--to", "csv")
    (row,) = list(csv.DictReader(io.StringIO(util.stdout)))
    assert row["note"].startswith("no profile figures: profiler start failed: InjectedProfilerError")
    assert row["trace_files"] == "" and row["gpu_util"] == "" and row["profiled_iterations"] == "2"
    scaling = ws.campaign("harvest", "--to", "csv")
    assert scaling.returncode == 0 and "profile" in scaling.stdout  # the point's timing is harvested
