"""A launch as one plan (campaign/launch/launchplan.py), kept and sent exactly
(campaign/launch/savedplan.py): ``campaign launch ... --dry-run --save-plan FILE``, then
``campaign submit FILE``, which refuses in one line (exit 2, nothing stored) a plan edited
since, saved under another key, made by another code version or from other configs, or
that the cluster can no longer hold."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any, Sequence

import pytest

from campaign.backends import BACKENDS, Backend, Submitted
from campaign.common.errors import ConfigError
from conftest import TINY, campaign_id_from, point_config


@pytest.fixture(autouse=True)
def umask_kept():
    """``campaign submit`` makes what it writes private (umask 077), as a launch does: the
    tests that call it in-process put the process's umask back."""
    old = os.umask(0o022)
    os.umask(old)
    yield
    os.umask(old)


class GoneBackend(Backend):
    """A scheduler whose answers the test sets: ``facts`` (what it says of the partitions),
    ``gone`` (its preflight's refusal), ``unplaceable`` (its placement refusals)."""

    name = "gone"
    facts: dict = {}
    gone: str = ""
    unplaceable: dict = {}

    def preflight(self, plans: Sequence[Any]) -> None:
        if self.gone:
            raise ConfigError(self.gone)

    def placement_refusals(self, plans: Sequence[Any]) -> dict[int, str]:
        return dict(self.unplaceable)

    def cluster_facts(self, plans: Sequence[Any]) -> dict[str, Any]:
        return dict(self.facts)

    def submit(self, items, folder, python):
        return [Submitted(spec.point_id, None, error="the test submits nothing") for _, spec in items]


def _plan(tmp_path: Path, executor: str = "local"):
    """A two-point plan made in-process, as make_plan makes a dry run's (no preflight)."""
    from campaign.launch.launchplan import LaunchPlan
    from campaign.launch.plan import PointPlan, plan_point
    from campaign.observe.estimate import CampaignCost, PointCost

    points = []
    for i, gpus in enumerate((1, 2)):
        config = point_config(f"gpus={gpus}", f"results_dir={tmp_path / 'results'}",
                              f"store.url=sqlite:///{tmp_path / 'results' / 'campaign.db'}", "dry_run=true")
        p = plan_point(config, i, [f"gpus={gpus}", "dry_run=true"])
        p.config["platform"]["executor"] = executor
        points.append(PointPlan(p.idx, p.overrides, p.config, p.resources, p.repeat, p.batch_per_gpu, p.iterations,
                                untouched=(("seed=1", "why", "refusal"),), notes=("a note",)))
    cost = CampaignCost([PointCost(1, 9, 0.5, "the test", kind="flops"), PointCost(2, 5, None, "unknown: test")])
    return LaunchPlan(points=tuple(points), sweep_overrides=("gpus=1,2", "dry_run=true"), multirun=True, cost=cost,
                      notes=(), writes=(), refusals=("a time limit",), design=("study: x",), said=("override: y",),
                      python=((None, None),), command="campaign launch -m gpus=1,2 dry_run=true",
                      store_url=f"sqlite:///{tmp_path / 'results' / 'campaign.db'}",
                      results_dir=str(tmp_path / "results"), name=None, dry="table")


def test_a_plan_round_trips_through_json_exactly(tmp_path):
    from campaign.launch.launchplan import LaunchPlan, as_launch

    plan = _plan(tmp_path)
    again = LaunchPlan.from_json(json.loads(json.dumps(plan.to_json())))
    assert again == plan and again.points[1].resources == plan.points[1].resources
    assert again.cost.points[0].wall_s == plan.cost.points[0].wall_s and again.job_python() == {None: None}
    sent = as_launch(plan)  # what a saved plan holds: the launch without its dry_run
    assert [p.overrides for p in sent.points] == [["gpus=1"], ["gpus=2"]]
    assert {p.config["dry_run"] for p in sent.points} == {"false"} and sent.dry is None
    assert sent.command == "campaign launch -m gpus=1,2" and sent.refusals == ()
    with pytest.raises(ConfigError, match="missing or malformed"):
        LaunchPlan.from_json({**plan.to_json(), "points": [{"idx": 0}]})


def _saved(tmp_path: Path, executor: str = "local") -> Path:
    from campaign.launch.savedplan import save_plan

    path = tmp_path / "p.json"
    save_plan(_plan(tmp_path, executor), path)
    return path


def test_a_saved_plan_is_private_and_read_back(tmp_path):
    from campaign.launch.savedplan import read_plan

    path = _saved(tmp_path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    plan, doc, digest = read_plan(path)
    assert len(plan.points) == 2 and digest.startswith("sha256:") and len(digest) == 7 + 64
    assert doc["cluster"] == {"local": {}} and doc["folder"] == os.getcwd()


@pytest.mark.parametrize("change, reason", [
    (lambda t: t.replace('"gpus": 2', '"gpus": 3', 1), "was changed since it was saved"),
    (lambda t: "{" + t, "is not valid JSON"),
    (lambda t: json.dumps({"format": "something else"}), "is not a campaign plan"),
])
def test_an_edited_file_is_refused_in_one_line(tmp_path, capsys, change, reason):
    from campaign.cli import main

    path = _saved(tmp_path)
    path.write_text(change(path.read_text()))
    assert main(["submit", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: plan {path} {reason}") and err.count("\n") == 1, err
    assert not (tmp_path / "results").exists()  # nothing stored


def test_a_plan_saved_under_another_key_is_not_signed_by_you(tmp_path, monkeypatch, capsys):
    from campaign.cli import main

    path = _saved(tmp_path)
    monkeypatch.setenv("CAMPAIGN_CONFIG_DIR", str(tmp_path / "other-user"))
    from campaign.common.signing import signing_key

    signing_key(create=True)
    assert main(["submit", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: plan {path} is not signed by you") and err.count("\n") == 1
    assert not (tmp_path / "results").exists()


def test_another_code_version_or_catalogue_is_refused(tmp_path, monkeypatch):
    import campaign.launch.savedplan as saved
    import campaign.version

    path = _saved(tmp_path)
    monkeypatch.setattr(campaign.version, "version", lambda: "99.0")
    with pytest.raises(ConfigError, match=r"was made by campaign .+, this is campaign 99\.0"):
        saved.read_plan(path)
    monkeypatch.undo()
    monkeypatch.setattr(saved, "catalogue_digest", lambda: "sha256:" + "0" * 64)
    with pytest.raises(ConfigError, match=r"made from other configs or catalogue \(sha256:\w{12}… then, "
                                          r"sha256:000000000000… now\)"):
        saved.read_plan(path)


def test_the_catalogue_digest_follows_the_conf_files(tmp_path, monkeypatch):
    import campaign_conf

    from campaign.launch.savedplan import catalogue_digest

    before = catalogue_digest()
    conf = tmp_path / "conf"
    (conf / "platform").mkdir(parents=True)
    (conf / "platform" / "x.yaml").write_text("name: x\n")
    monkeypatch.setattr(campaign_conf, "__path__", [str(conf)])
    one = catalogue_digest()
    (conf / "platform" / "x.yaml").write_text("name: y\n")
    assert len({before, one, catalogue_digest()}) == 3


@pytest.fixture
def gone(monkeypatch):
    monkeypatch.setitem(BACKENDS, "gone", f"{__name__}:GoneBackend")
    monkeypatch.setattr(GoneBackend, "facts", {"partitions": {"gpu": [[4, 4, 32]]}})
    monkeypatch.setattr(GoneBackend, "gone", "")
    monkeypatch.setattr(GoneBackend, "unplaceable", {})
    return GoneBackend


def test_a_plan_the_cluster_can_no_longer_hold_is_refused(tmp_path, gone):
    from campaign.launch.savedplan import check_cluster, read_plan

    plan, doc, _ = read_plan(_saved(tmp_path, executor="gone"))
    assert doc["cluster"] == {"gone": {"partitions": {"gpu": [[4, 4, 32]]}}}  # what it relied on
    assert check_cluster(plan, doc["cluster"], "plan p") == []
    gone.facts = {"partitions": {"gpu": [[2, 4, 32]]}}  # fewer nodes, still enough: said, not refused
    assert check_cluster(plan, doc["cluster"], "plan p") == [
        'gone\'s answers changed since the plan was made ({"partitions": {"gpu": [[4, 4, 32]]}} then, '
        '{"partitions": {"gpu": [[2, 4, 32]]}} now); it still holds every point']
    gone.unplaceable = {1: "SLURM partition 'gpu' has 1 node(s)"}
    with pytest.raises(ConfigError, match=r"^plan p: the cluster can no longer hold it: point gpus=2: SLURM "
                                          r"partition 'gpu' has 1 node\(s\); save the plan again$"):
        check_cluster(plan, doc["cluster"], "plan p")
    gone.gone = "platform local: SLURM has no partition 'gpu'; available: debug"
    with pytest.raises(ConfigError, match=r"^plan p: the cluster can no longer hold it: platform local: SLURM has "
                                          r"no partition 'gpu'"):
        check_cluster(plan, doc["cluster"], "plan p")


def test_save_plan_without_a_dry_run_is_refused(tmp_path):
    from campaign.launch.main import launch, save_plan_option

    with pytest.raises(ConfigError, match=r"^--save-plan .*p\.json keeps a dry run's plan: add --dry-run"):
        launch(["-m", "gpus=1", "--save-plan", str(tmp_path / "p.json")], "campaign launch")
    assert save_plan_option(["gpus=1", "--save-plan=p.json", "--dry-run"]) == (
        ["gpus=1", "--dry-run"], Path("p.json").absolute())
    with pytest.raises(ConfigError, match="--save-plan takes the file"):
        save_plan_option(["--save-plan"])
    assert not (tmp_path / "p.json").exists()


def test_save_then_submit_runs_exactly_the_plan_and_names_it(ws):
    """The issue's sentence: launch --dry-run --save-plan, then submit, runs the two points,
    and the campaign's status and report name the plan."""
    from campaign.store import open_store

    args = ["-m", "platform=local", "gpus=1,2", *TINY]
    dry = ws.campaign("launch", *args, "--dry-run", "--save-plan", "p.json")
    assert dry.returncode == 0, dry.stderr
    note = dry.stdout.splitlines()[-1]
    assert note.startswith(f"note: plan saved to {ws.path / 'p.json'} (sha256:") and not ws.results.exists()
    sent = ws.campaign("submit", "p.json")
    assert sent.returncode == 0, sent.stderr
    cid = campaign_id_from(sent.stdout)
    assert f"{cid}: 2 of 2 point(s) submitted" in sent.stdout
    with open_store(ws.store_url, readonly=True) as store:
        campaign = store.resolve_campaign(cid)
        points = store.points(cid)
    digest = campaign["command"].rsplit(" ", 1)[1]
    assert campaign["command"] == f"campaign launch {' '.join(args)}  # from plan {digest}"
    assert note.split("(")[1].startswith(digest[:19]) and sent.stderr.count(digest[:19]) == 1
    assert [(p["gpus"], p["config"]["dry_run"], p["overrides"]) for p in points] == [
        (1, "false", ["platform=local", "gpus=1", *TINY]), (2, "false", ["platform=local", "gpus=2", *TINY])]
    done = ws.campaign("status", cid, "--wait", "--interval", "0.5", "--timeout", "120")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"campaign {cid} [launched from plan {digest[:19]}…]")
    from campaign.report.data import gather
    from campaign.report.sections import provenance

    with open_store(ws.store_url, readonly=True) as store:
        page = provenance(gather(store, [cid]))
    assert f"<dt>launched from plan</dt><dd>{digest}</dd>" in page
