"""A scheduler's knowledge lives in its backend (campaign/backends, STYLE.md 14): adding
one is a module implementing ``campaign.backends.base.Backend`` and one registry line.

Shown here with a fake scheduler registered from the test: a dry run shows its jobs and
its preflight refusal, a launch submits through it and ``status``'s states, the ETA and
the estimate ask it, a Hydra app's jobs go through it; and no module outside
campaign/backends names an executor."""

from __future__ import annotations

import ast
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Sequence

import pytest
from omegaconf import OmegaConf

from campaign.backends import BACKENDS, EXECUTORS, Backend, Observed, Submitted, get_backend
from campaign.common.errors import ConfigError
from conftest import point_config

ROOT = Path(__file__).resolve().parents[1]


class FakeBackend(Backend):
    """A scheduler that runs nothing: what it is asked is recorded on the class's ``log``
    (the test gives it a fresh list). The dry run's groups, count and script are the
    protocol's defaults (one job per point)."""

    name = "fake"
    queue_wait = False
    silent_stop_lead_s = 10.0
    log: list = []
    asleep = True  # its preflight refuses

    def rank_device(self, platform: Any) -> str:
        return "cpu"

    def takes_turns(self, platform: Any) -> bool:
        return True

    def preflight(self, plans: Sequence[Any]) -> None:
        self.log.append(("preflight", [p.idx for p in plans]))
        if self.asleep:
            raise ConfigError("the fake scheduler is asleep; wake it")

    def submit(self, items, folder, python):
        self.log.append(("submit", [spec.point_id for _, spec in items]))
        return [Submitted(spec.point_id, f"F{spec.point_id}", job_folder=str(folder)) for _, spec in items]

    def observe(self, points):
        self.log.append(("observe", [p["job_id"] for p in points]))
        return {p["id"]: Observed("pending", "in the fake queue") for p in points if p.get("job_id")}

    def cancel(self, points):
        return [p["id"] for p in points]

    def submit_callables(self, calls, folder, resources, name):
        self.log.append(("callables", len(calls), name))
        return [(None, RuntimeError("the fake scheduler runs nothing")) for _ in calls]


@pytest.fixture
def fake(monkeypatch) -> list:
    """The fake backend registered (one line, as campaign/backends/__init__.py's own) and its log."""
    monkeypatch.setitem(BACKENDS, "fake", f"{__name__}:FakeBackend")
    monkeypatch.setattr(FakeBackend, "log", [])
    return FakeBackend.log


def _plans(tmp_path: Path, *, dry_run: str = "false") -> list:
    """Two planned points on the fake scheduler (the config schema names only the built-in
    executors, so the points are planned for ``local`` and then handed to ``fake``)."""
    from campaign.launch.plan import PointPlan, plan_point

    out = []
    for i, gpus in enumerate((1, 2)):
        config = point_config(f"gpus={gpus}", f"results_dir={tmp_path / 'results'}",
                              f"store.url=sqlite:///{tmp_path / 'results' / 'campaign.db'}", f"dry_run={dry_run}")
        plan = plan_point(config, i, [f"gpus={gpus}"])
        plan.config["platform"]["executor"] = "fake"
        out.append(PointPlan(plan.idx, plan.overrides, plan.config, plan.resources, plan.repeat, plan.batch_per_gpu,
                             plan.iterations))
    return out


def test_a_registered_fake_backend_is_a_backend(fake):
    backend = get_backend("fake")
    assert isinstance(backend, Backend) and backend.name == "fake"
    assert "fake" not in EXECUTORS  # the schema's names (campaign.catalogue.config.Executor) are the built-in ones


def test_a_dry_run_shows_the_fake_schedulers_jobs_and_its_refusal(fake, tmp_path, capsys):
    from campaign.launch.run import launch_campaign

    plans = _plans(tmp_path, dry_run="scripts")
    launch_campaign(plans, None, sweep_overrides=["gpus=1,2"], multirun=True, wait=False)
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0] == "dry run: 2 point(s) in 2 fake job(s); nothing is submitted or stored"
    assert "note: would be refused here: the fake scheduler is asleep; wake it" in lines
    assert "== F1: fake jobs of points 0 (one job per point) ==" in lines
    assert "== F2: fake jobs of points 1 (one job per point) ==" in lines
    assert "# 2 process(es), one per rank, each running:" in lines
    assert fake == [("preflight", [0, 1])]
    assert not (tmp_path / "results").exists()  # a dry run makes nothing


def test_a_launch_submits_through_the_fake_and_status_asks_it(fake, tmp_path, capsys, monkeypatch):
    from campaign.launch.preflight import preflight
    from campaign.launch.run import launch_campaign
    from campaign.observe.state import effective_points
    from campaign.store import open_store

    plans = _plans(tmp_path)
    with pytest.raises(ConfigError, match="the fake scheduler is asleep"):  # a launch refuses what its check refuses
        preflight(plans)
    monkeypatch.setattr(FakeBackend, "asleep", False)
    result = launch_campaign(plans, None, sweep_overrides=["gpus=1,2"], multirun=True, wait=False)
    assert [s.job_id for s in result.submitted] == [f"F{s.point_id}" for s in result.submitted]
    assert fake[-1][0] == "submit" and len(fake[-1][1]) == 2
    capsys.readouterr()
    with open_store(result.store_url, readonly=True) as store:
        campaign = store.resolve_campaign(result.campaign_id)
        points, warnings = effective_points(store, campaign)
    assert not warnings
    assert [(p["executor"], p["state"], p["reason"]) for p in points] == [("fake", "pending", "in the fake queue")] * 2
    assert fake[-1] == ("observe", [f"F{s.point_id}" for s in result.submitted])


def test_status_eta_estimate_and_plan_ask_the_backend(fake):
    from campaign.observe.estimate import serial
    from campaign.launch.placement import cpu_ranks
    from campaign.observe.progress import PointETA, campaign_eta
    from campaign.observe.state import derive

    platform = {"name": "f", "executor": "fake", "exclusive": False}
    assert serial({"platform": platform})  # takes_turns
    assert cpu_ranks(platform)  # rank_device
    eta = campaign_eta([{"id": 1, "state": "pending", "executor": "fake", "config": {"platform": platform}}],
                       {1: PointETA(remaining_s=5.0)}, now=0.0, is_final=lambda s: False)
    assert not eta.queue  # queue_wait: False
    # a failed job that ran to its limit less the fake's silent lead (10 s) timed out
    p = {"id": 1, "state": "failed", "executor": "fake", "reason": "killed", "started_at": 0.0, "ended_at": 60.0 - 14,
         "config": {"platform": {"time_limit_min": 1}}}
    assert derive(p, None, now=100.0)["state"] == "timeout"
    assert derive(dict(p, ended_at=60.0 - 16), None, now=100.0)["state"] == "failed"


def test_a_hydra_apps_jobs_go_through_the_named_backend(fake, tmp_path):
    from hydra.core.utils import JobStatus

    from campaign.launch.generic import launch_app

    config = OmegaConf.create({"hydra": {"sweep": {"dir": str(tmp_path / "sweep")}, "job": {"name": "app"}}, "x": 1})
    loader = SimpleNamespace(load_sweep_config=lambda cfg, overrides: cfg)
    launcher = SimpleNamespace(executor="fake", config=config, hydra_context=SimpleNamespace(config_loader=loader),
                               task_function=print, folder=None, nodes=1, tasks_per_node=1, gpus_per_node=0,
                               cpus_per_task=1, timeout_min=5, partition=None, constraint=None, account=None,
                               qos=None, mem_gb=None, extra_sbatch=())
    returns = launch_app(launcher, [["x=1"], ["x=2"]], 0, wait=False)
    assert fake == [("callables", 2, "app")]
    assert [r.status for r in returns] == [JobStatus.FAILED] * 2
    assert str(returns[0]._return_value) == "job not submitted: the fake scheduler runs nothing"
    with pytest.raises(ConfigError, match="unknown hydra.launcher.executor 'pbs'; available: fake, local, slurm"):
        launch_app(SimpleNamespace(**dict(launcher.__dict__, executor="pbs")), [["x=1"]], 0, wait=False)


# ------------------------------------------------------------------ executor names stay in the backends

# campaign/catalogue/config.py's enum of executor names is the config schema (what platform.executor
# may say), and the Hydra launcher plugin's dataclass default is its schema: both may name
# them. Everything else asks the backend.
SCHEMAS = ("campaign/catalogue/config.py", "hydra_plugins/campaign_launcher/campaign_launcher.py")


def test_no_module_outside_the_backends_names_an_executor():
    offenders = []
    for path in sorted([*ROOT.glob("campaign/**/*.py"), *ROOT.glob("hydra_plugins/**/*.py")]):
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith("campaign/backends/") or rel in SCHEMAS:
            continue
        for node in ast.walk(ast.parse(path.read_text(), rel)):
            if isinstance(node, ast.Constant) and node.value in EXECUTORS:
                offenders.append(f"{rel}:{node.lineno}: {node.value!r}")
    assert not offenders, "executor names outside campaign/backends: " + "; ".join(offenders)


def test_the_grep_finds_the_names_it_looks_for():
    """The test above would see a comparison with an executor's name (it is not blind)."""
    tree = ast.parse('if platform["executor"] == "local":\n    pass\n')
    assert [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and n.value in EXECUTORS] == ["local"]
