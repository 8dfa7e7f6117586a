"""Hydra's own launcher contract, run against ``hydra/launcher=campaign`` as
hydra-submitit-launcher runs it against its launchers: Hydra's test apps (not a
campaign), each point a real submitit job on this machine, waited for
(``hydra.launcher.wait=true``) so that every ``JobReturn`` carries the point's result."""

from __future__ import annotations

from hydra.core.plugins import Plugins
from hydra.plugins.launcher import Launcher
from hydra.plugins.sweeper import Sweeper
from hydra.test_utils.launcher_common_tests import IntegrationTestSuite, LauncherTestSuite
import pytest
from pytest import mark

WAIT = ["hydra.launcher.wait=true", "hydra.launcher.timeout_min=5"]


def test_discovery():
    """Hydra's plugin scan finds both plugins (from the editable install the tests use)."""
    assert "CampaignLauncher" in [x.__name__ for x in Plugins.instance().discover(Launcher)]
    assert "CampaignSweeper" in [x.__name__ for x in Plugins.instance().discover(Sweeper)]


@mark.parametrize("launcher_name, overrides", [("campaign", WAIT)])
class TestCampaignLauncher(LauncherTestSuite):
    pass


@mark.parametrize(
    "task_launcher_cfg, extra_flags",
    [({}, ["-m", "hydra/hydra_logging=disabled", "hydra/job_logging=disabled", "hydra/launcher=campaign", *WAIT])],
)
@pytest.mark.slow
class TestCampaignLauncherIntegration(IntegrationTestSuite):
    pass


# ------------------------------------------------------------------ beyond Hydra's suites


def _sweep(hydra_sweep_runner, tmp_path, overrides, task_function=None):
    return hydra_sweep_runner(calling_file=None, calling_module="hydra.test_utils.a_module",
                              task_function=task_function, config_path="configs", config_name="compose.yaml",
                              overrides=overrides, temp_dir=tmp_path)


@mark.usefixtures("hydra_restore_singletons")
def test_waits_by_default_under_hydras_basic_sweeper(hydra_sweep_runner, tmp_path):
    """Unset, ``wait`` is true where the sweeper reads every result (Hydra's basic one)."""
    with _sweep(hydra_sweep_runner, tmp_path, ["hydra/launcher=campaign", "+a=0,1"]) as sweep:
        assert [r.status.name for r in sweep.returns[0]] == ["COMPLETED", "COMPLETED"]
        assert [r.return_value for r in sweep.returns[0]] == [100, 100]
        assert [r.cfg.a for r in sweep.returns[0]] == [0, 1]


def _fails_at_a_1():
    """A task function the job unpickles by value (a test module is not importable there)."""

    def task(cfg):
        if cfg.a == 1:
            raise ValueError("point a=1 fails")
        return cfg.a

    return task


@mark.usefixtures("hydra_restore_singletons")
def test_a_failed_point_comes_back_failed_with_its_exception(hydra_sweep_runner, tmp_path):
    """Hydra's basic sweeper reads each return: the FAILED one raises the task's own exception."""
    with pytest.raises(ValueError, match="point a=1 fails"):
        with _sweep(hydra_sweep_runner, tmp_path, ["hydra/launcher=campaign", "+a=0,1"], _fails_at_a_1()):
            pass


@mark.usefixtures("hydra_restore_singletons")
def test_campaign_sweeper_raises_one_line_for_failed_points(hydra_sweep_runner, tmp_path):
    from campaign.common.errors import LaunchIncomplete

    with pytest.raises(LaunchIncomplete, match=r"^1 of 2 job\(s\) failed \(\+a=1\)"):
        with _sweep(hydra_sweep_runner, tmp_path, ["hydra/launcher=campaign", "hydra/sweeper=campaign",
                                                    "hydra.launcher.wait=true", "+a=0,1"], _fails_at_a_1()):
            pass


@mark.usefixtures("hydra_restore_singletons")
def test_no_wait_returns_honest_unknown_returns_and_the_jobs_still_run(hydra_sweep_runner, tmp_path):
    """``wait=false`` (campaign's sweeper reads no result): one UNKNOWN return per submitted
    point, never COMPLETED; the jobs run on and write their outputs."""
    import time

    out = tmp_path / "sweep"
    with _sweep(hydra_sweep_runner, out, ["hydra/launcher=campaign", "hydra/sweeper=campaign",
                                          "hydra.launcher.wait=false", "+a=0,1"]) as sweep:
        returns = sweep.returns[0]
        assert [r.status.name for r in returns] == ["UNKNOWN", "UNKNOWN"]
        assert [r.overrides for r in returns] == [["+a=0"], ["+a=1"]]
        assert [r.cfg.a for r in returns] == [0, 1]
        deadline = time.time() + 120
        while time.time() < deadline and len(list(out.glob("*/.hydra/overrides.yaml"))) < 2:
            time.sleep(0.5)
        assert len(list(out.glob("*/.hydra/overrides.yaml"))) == 2


@mark.usefixtures("hydra_restore_singletons")
def test_no_wait_under_a_sweeper_that_reads_results_is_refused(hydra_sweep_runner, tmp_path):
    from campaign.common.errors import ConfigError

    with pytest.raises(ConfigError, match="hydra.launcher.wait=false returns before the points end"):
        with _sweep(hydra_sweep_runner, tmp_path, ["hydra/launcher=campaign", "hydra.launcher.wait=false", "+a=0,1"]):
            pass


def test_any_app_finds_the_launcher_with_the_editable_install(tmp_path):
    """A plain app in a folder of its own (not this checkout) picks hydra/launcher=campaign:
    the editable install shows hydra_plugins to Hydra's plugin scan (pyproject lists it)."""
    import subprocess
    import sys

    app = tmp_path / "app.py"
    app.write_text("import hydra\nfrom hydra.core.hydra_config import HydraConfig\n\n"
                   "@hydra.main(version_base=None, config_path=None)\n"
                   "def main(cfg):\n    print('launcher', HydraConfig.get().launcher._target_)\n\n"
                   "if __name__ == '__main__':\n    main()\n")
    res = subprocess.run([sys.executable, str(app), "hydra/launcher=campaign", "hydra/sweeper=campaign"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert "launcher hydra_plugins.campaign_launcher.campaign_launcher.CampaignLauncher" in res.stdout


@mark.usefixtures("hydra_restore_singletons")
def test_campaign_registers_again_after_hydras_singletons_are_put_back():
    """Hydra's fixtures (and a user's app) put Hydra's singletons back to a state from
    before campaign registered its schema: register() looks, not remembers (issue #27:
    a shuffled order failed every point composed after that)."""
    from hydra.core.config_store import ConfigStore
    from hydra.core.singleton import Singleton

    from campaign.catalogue.config import register

    register()
    state = Singleton.get_state()
    del state["instances"][ConfigStore].repo["campaign_schema.yaml"]  # as before campaign registered
    Singleton.set_state(state)
    register()
    assert "campaign_schema.yaml" in ConfigStore.instance().list("")
