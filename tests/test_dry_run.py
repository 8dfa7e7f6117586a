"""A dry run a person can read (campaign/launch/dryrun.py) and what a campaign will cost
before it runs (campaign/observe/estimate.py): the table of points, the exact sbatch scripts and
commands (a container's wrapper included, with no runtime on this machine), the machine
form, the estimate's numbers, and the budget a launch refuses to exceed."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import pytest

from campaign.backends import sbatch as sb
from campaign.backends.local import LOCK_FILE, exclusive_setup, lock_lines
from campaign.backends.resources import Resources
from campaign.observe.estimate import STARTUP_S, CampaignCost, PointCost, check_budget
from campaign.common.errors import ConfigError
from campaign.launch.dryrun import PLACEHOLDER_ID, dry_run_mode
from conftest import EMULATED_GPUS, campaign_id_from

LAW = {1: 8 * (0.012 + 0.002), 2: 2 * 8 * (0.012 / 2 + 0.001 + 0.002), 4: 4 * 8 * (0.012 / 4 + 0.002 + 0.002)}


def _table(stdout: str) -> list[list[str]]:
    """The rows of the points table (after its ``---`` rule), split on whitespace."""
    lines = stdout.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith("---")) + 1
    rows = []
    for ln in lines[start:]:
        if not ln.strip() or ln.startswith("estimate:"):
            break
        rows.append(ln.split())
    return rows


def test_the_dry_run_table(ws):
    res = ws.launch("-m", "platform=v100,a100", "gpus=1,4", "trainer=sleep", "seed=0,1",
                    "experiment.base_iterations=100", EMULATED_GPUS, "--dry-run")
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines[0] == "dry run: 8 point(s) in 4 sbatch job array(s); nothing is submitted or stored"
    assert lines[1] == "every point: trainer=sleep experiment=weak_scaling"
    assert lines[2].split() == ["#", "platform", "gpus", "nodes", "partition", "time", "limit", "seed",
                                "img/GPU", "global", "batch", "iterations", "array", "est.", "time", "GPU-h", "rate",
                                "from"]
    rows = _table(res.stdout)
    # points with the same resources share an array: the two seeds of each platform and GPU count
    # the schedule (experiment.base_iterations is set): 8 images per GPU, N x 8 globally, 100/N iterations
    assert [(r[7], r[8], r[9]) for r in rows] == [("8", str(8 * int(r[2])), str(100 // int(r[2]))) for r in rows]
    assert [(r[1], r[2], r[6], r[10]) for r in rows] == [
        ("v100", "1", "0", "A1[0]"), ("v100", "1", "1", "A1[1]"), ("v100", "4", "0", "A2[0]"),
        ("v100", "4", "1", "A2[1]"), ("a100", "1", "0", "A3[0]"), ("a100", "1", "1", "A3[1]"),
        ("a100", "4", "0", "A4[0]"), ("a100", "4", "1", "A4[1]")]
    assert {(r[3], r[4], r[5]) for r in rows} == {("1", "v100", "24:00:00"), ("1", "a100", "24:00:00")}
    # the sleep trainer's law: 105 iterations (5 warm-up) x N*B*t(N) s, after the stated start-up
    for r in rows:
        gpus = int(r[2])
        wall = STARTUP_S + (100 // gpus + 5) * LAW[gpus]
        assert r[11] == f"{int(round(wall)) // 60}:{int(round(wall)) % 60:02d}", r
        assert float(r[12]) == pytest.approx(wall * gpus / 3600, rel=0.05)
        assert r[13] == "law"
    total = sum(2 * (STARTUP_S + (100 // g + 5) * LAW[g]) * g / 3600 for g in (1, 4)) * 2
    estimate = next(ln for ln in lines if ln.startswith("estimate: "))
    assert estimate.startswith(f"estimate: {total:.2g} GPU-hours, wall time ")
    assert "(if every point runs at once, queue wait not included)" in estimate
    assert "  rate of 8 point(s): the trainer's declared time law" in lines
    assert not ws.results.exists()


def test_a_containerised_dry_run_shows_the_wrapped_command_without_the_runtime(ws, tmp_path):
    empty = tmp_path / "bin"
    empty.mkdir()
    ws.env["PATH"] = str(empty)  # no apptainer, no sbatch: a laptop
    image = tmp_path / "nowhere" / "campaign.sif"
    res = ws.launch("-m", "platform=a100", "gpus=2", "container=apptainer", f"container.image={image}",
                    "dataset=cifar10", "dataset.root=/data/cifar", "trainer=vit", "--show-scripts")
    assert res.returncode == 0, res.stderr
    out = res.stdout
    results = ws.results.absolute()
    folder = results / "jobs" / PLACEHOLDER_ID
    wrapped = shlex.join(["apptainer", "exec", "--nv", "--bind", f"/data/cifar,{results}", str(image), "python"])
    command = f"{sb.rank_python(wrapped)} -u -m submitit.core._submit {folder}"  # USR2 ignored until the job's handler
    # the exact script submitit writes for this array (the function the submission uses)
    resources = Resources(nodes=1, tasks_per_node=2, gpus_per_node=2, cpus_per_task=16, timeout_min=1440,
                          partition="a100")
    script = sb.render_sbatch(sb.sbatch_parameters(resources, f"{PLACEHOLDER_ID}-a100-1x2"), folder,
                            sb.rank_python(wrapped), 1)
    assert script.rstrip() in out
    assert f"== A1: the command each of its 2 task(s) runs (srun, one per rank) ==\n{command}\n" in out
    assert "#SBATCH --partition=a100" in out and "--kill-on-bad-exit=1" in out
    for lack in (f"container image {image} not found", "apptainer not found on PATH", "sbatch not found on PATH",
                 "dataset.root=/data/cifar: no such directory"):
        assert f"note: would be refused here: {lack}" in out
    assert not ws.results.exists()
    # a launch (not a dry run) refuses what is missing, as before
    refused = ws.launch("-m", "platform=a100", "gpus=2", "container=apptainer", f"container.image={image}")
    assert refused.returncode == 2 and refused.stderr.startswith("error: container image")


def test_local_scripts_wait_for_the_machine_as_the_local_backend_does(ws, tmp_path):
    assert lock_lines() == exclusive_setup() or not exclusive_setup()
    res = ws.launch("-m", "gpus=1,2", "trainer=sleep", "--show-scripts")
    assert res.returncode == 0, res.stderr
    jobs = ws.results.absolute() / "jobs"
    lock = Path(ws.env["CAMPAIGN_LOCK_DIR"]) / LOCK_FILE  # the machine-wide lock (this workspace's own)
    assert f"exec 9>>{lock}\nflock 9\n# then 2 process(es), one per rank, each running:\n" \
           f"{shlex.quote(sys.executable)} -P -u -m submitit.core._submit {jobs / PLACEHOLDER_ID}\n" in res.stdout
    assert res.stdout == ws.launch("-m", "gpus=1,2", "trainer=sleep", "dry_run=scripts").stdout
    assert not ws.results.exists() and not lock.parent.exists()  # a dry run makes nothing


def test_the_machine_form(ws):
    res = ws.launch("-m", "gpus=1,2", "trainer=sleep", "experiment.base_iterations=100", "--json")
    assert res.returncode == 0, res.stderr
    docs = [json.loads(line) for line in res.stdout.splitlines()]
    assert [d["overrides"] for d in docs] == [["gpus=1", "trainer=sleep", "experiment.base_iterations=100"],
                                              ["gpus=2", "trainer=sleep", "experiment.base_iterations=100"]]
    for d, gpus in zip(docs, (1, 2)):
        assert d["estimate"]["s_per_it"] == pytest.approx(LAW[gpus])
        assert d["estimate"]["iterations"] == 100 // gpus + 5
        assert d["estimate"]["wall_s"] == pytest.approx(STARTUP_S + (100 // gpus + 5) * LAW[gpus])
        assert d["resources"]["tasks_per_node"] == gpus and d["schedule"]["iterations"] == 100 // gpus
        assert d["config"]["trainer"]["name"] == "sleep"


def test_dry_run_modes():
    assert [dry_run_mode(v) for v in (False, "False", "true", True, "scripts", "json")] == [
        None, None, "table", "table", "scripts", "json"]
    with pytest.raises(ConfigError, match="dry_run=yesplease is not a dry-run mode; valid: false, true, scripts, json"):
        dry_run_mode("yesplease")


@pytest.mark.slow
def test_a_budget_refuses_a_campaign_over_it_and_stores_nothing(ws):
    over = ws.launch("-m", "gpus=1,2", "trainer=sleep", "experiment.base_iterations=100", "max_gpu_hours=0.001")
    assert over.returncode == 2
    expected = sum((STARTUP_S + (100 // g + 5) * LAW[g]) * g / 3600 for g in (1, 2))
    assert over.stderr.startswith(f"error: this campaign needs an estimated {expected:.2g} GPU-hours (2 point(s), ")
    assert "over max_gpu_hours=0.001; nothing was stored" in over.stderr and over.stderr.count("\n") == 1
    assert not ws.db.exists()
    assert ws.launch("-m", "gpus=1,2", "trainer=sleep", "max_gpu_hours=0.001", "--dry-run").returncode == 2
    assert ws.launch("-m", "gpus=1,2", "trainer=sleep", "experiment.base_iterations=100", "max_gpu_hours=1",
                     "--dry-run").returncode == 0
    unknown = ws.launch("-m", "gpus=1", "trainer=swinv2_upernet", "trainer.params.variant=micro", "max_gpu_hours=5",
                        "--dry-run")
    assert unknown.returncode == 2 and "max_gpu_hours=5 cannot be checked: 1 point(s) have no estimate (unknown: " \
                                      "trainer swinv2_upernet declares no FLOPs" in unknown.stderr


def test_check_budget():
    known = CampaignCost([PointCost(2, 100, 0.5, "x", kind="law")])
    check_budget(known, None)
    check_budget(known, 1.0)
    with pytest.raises(ConfigError, match="max_gpu_hours must be > 0 when set"):
        check_budget(known, 0)
    with pytest.raises(ConfigError, match=r"needs an estimated 0.033 GPU-hours .* over max_gpu_hours=0.01"):
        check_budget(known, 0.01)


@pytest.mark.slow
def test_a_launch_prints_its_estimate_and_the_next_one_uses_what_it_measured(ws):
    res = ws.launch("-m", "gpus=1", "trainer=sleep", "experiment.base_iterations=20", "trainer.params.a_s=0.024")
    assert res.returncode == 0, res.stderr
    cid = campaign_id_from(res.stdout)
    assert "est. time" in res.stdout and "estimate: " in res.stdout
    assert "  rate of 1 point(s): the trainer's declared time law" in res.stdout
    assert ws.campaign("status", "--wait", "--interval", "0.3").returncode == 0
    (measured,) = ws.query("select max(wall_s / iterations) from rank_timing")[0]
    again = ws.launch("-m", "gpus=1", "trainer=sleep", "experiment.base_iterations=20", "trainer.params.a_s=0.024",
                      "--json")
    (doc,) = [json.loads(line) for line in again.stdout.splitlines()]
    assert doc["estimate"]["source"] == f"measured in campaign {cid}"
    assert doc["estimate"]["s_per_it"] == pytest.approx(measured)
    assert measured == pytest.approx(8 * (0.024 + 0.002), rel=0.05)  # the law, as the store measured it
    other = ws.launch("-m", "gpus=1", "trainer=sleep", "experiment.base_iterations=20", "--json")  # other work
    assert json.loads(other.stdout)["estimate"]["source"] == "the trainer's declared time law"


@pytest.mark.parametrize("trainer, params, dataset", [
    ("synthetic", {"width": 4, "depth": 2}, {"channels": 3, "image_size": 8, "num_classes": 10}),
    ("synthetic", {"width": 8, "depth": 4}, {"channels": 1, "image_size": 17, "num_classes": 7}),
    ("vit", {"model": "vit_tiny", "image_size": None}, {"num_classes": 10}),
    ("vit", {"model": "vit_tiny", "image_size": 64}, {"num_classes": 100}),
])
def test_a_trainers_declared_flops_are_what_torch_counts(trainer, params, dataset):
    """The torch-free FLOPs a declaration states (the estimate's source) against torch's
    FlopCounterMode over one training iteration of the real model, per image. On CPU the
    counter does not see the attention kernels (scaled_dot_product_attention), whose
    FLOPs (4 T^2 D per block forward, backward twice that) are added here."""
    torch = pytest.importorskip("torch")
    from torch.utils.flop_counter import FlopCounterMode

    from trainers import registry

    config = {"trainer": {"name": trainer, "params": params}, "dataset": dataset}
    declared = registry.spec_of(config["trainer"]).flops_per_image(config)
    if trainer == "synthetic":
        from trainers.synthetic import make_model

        model, side = make_model(dataset["channels"], dataset["num_classes"], params["width"], params["depth"]), \
            dataset["image_size"]
        x = torch.randn(3, dataset["channels"], side, side)
        attention = 0.0
    else:
        from trainers.specs.vit import SHAPES
        from trainers.vit import build_vit

        side = params["image_size"] or SHAPES[params["model"]][0]
        model = build_vit(params["model"], num_classes=dataset["num_classes"], image_size=side)
        x = torch.randn(3, 3, side, side)
        _, patch, width, depth, _ = SHAPES[params["model"]]
        tokens = (side // patch) ** 2 + 1
        attention = 3 * depth * 4.0 * tokens * tokens * width
    y = torch.randint(0, dataset["num_classes"], (3,))
    with FlopCounterMode(display=False) as counter:
        torch.nn.functional.cross_entropy(model(x), y).backward()
    counted = counter.get_total_flops() / 3
    if attention and any("attention" in str(op) for op in counter.get_flop_counts()["Global"]):
        attention = 0.0  # this torch counts them itself
    assert declared == pytest.approx(counted + attention, rel=1e-6)


def test_the_launch_table_shows_the_swept_keys(capsys):
    """A launch's table (campaign.launch.report.print_submitted) has a column for each key its
    sweep varies, and one for the repeat: a sweep over trainer.optimizer has no rows that look
    the same (issue 49). A key named like a secret shows ***."""
    from types import SimpleNamespace

    from campaign.launch.plan import PointPlan
    from campaign.launch.report import print_submitted
    from conftest import point_config

    config = point_config()
    res = Resources(nodes=1, tasks_per_node=1, gpus_per_node=0, cpus_per_task=1, timeout_min=60)
    points, idx = [], 0
    for opt in ("sgd", "adamw"):
        for rep in (0, 1):
            over = ["gpus=1", f"trainer.optimizer={opt}", f"+container.env.HF_TOKEN=hf_{opt}", "name=opt"]
            points.append(PointPlan(idx=idx, overrides=over, config=config, resources=res, repeat=rep))
            idx += 1
    done = [SimpleNamespace(job_id=str(100 + i), waiting=None, error=None) for i in range(4)]
    print_submitted("20260101-000000-aaaa", points, done, "", cost=None)
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].split() == ["#", "platform", "gpus", "trainer", "experiment", "trainer.optimizer",
                                "container.env.HF_TOKEN", "repeat", "job", "est.", "time", "GPU-h", "state"]
    assert [ln.split() for ln in lines[3:7]] == [
        [str(i), "local", "1", "synthetic", "smoke", opt, "***", str(rep), str(100 + i), "-", "-", "submitted"]
        for i, (opt, rep) in enumerate([("sgd", 0), ("sgd", 1), ("adamw", 0), ("adamw", 1)])]
    assert "hf_" not in "\n".join(lines)


def test_a_large_launch_prints_a_row_a_group_and_says_where_each_point_is(capsys, monkeypatch):
    """Above ROWS_SHOWN points, a launch prints a row per (platform, GPUs, trainer, experiment,
    state): the points' numbers and count, their jobs, the longest estimate and the GPU-hours of
    all, then where every point is listed (issue 50: the 10,000-row table was a twelfth of a
    launch's time, and no reader's)."""
    from types import SimpleNamespace

    import campaign.launch.report as report
    from campaign.launch.plan import PointPlan
    from conftest import point_config

    monkeypatch.setattr(report, "ROWS_SHOWN", 4)
    res = Resources(nodes=1, tasks_per_node=1, gpus_per_node=0, cpus_per_task=1, timeout_min=60)
    config = point_config()
    points = [PointPlan(idx=i, overrides=[f"seed={i}"], config=config, resources=res) for i in range(6)]
    done = [SimpleNamespace(job_id=f"7_{i}" if i != 3 else None, waiting=None, error="bad partition" if i == 3 else None)
            for i in range(6)]
    cost = SimpleNamespace(points=[SimpleNamespace(wall_s=60.0 * (i + 1), gpu_hours=0.5) for i in range(6)])
    import campaign.launch.dryrun as dryrun

    monkeypatch.setattr(dryrun, "estimate_lines", lambda c: [])
    report.print_submitted("20260101-000000-aaaa", points, done, "", cost=cost)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "campaign 20260101-000000-aaaa: 5 of 6 point(s) submitted"
    assert lines[1].split() == ["#", "platform", "gpus", "trainer", "experiment", "points", "jobs", "est.", "time",
                                "(longest)", "GPU-h", "state"]
    assert [ln.split() for ln in lines[3:5]] == [
        ["0,1,..,5", "local", "1", "synthetic", "smoke", "5", "7_0", "..", "7_5", "6:00", "2.5", "submitted"],
        ["3", "local", "1", "synthetic", "smoke", "1", "-", "4:00", "0.5", "rejected:", "bad", "partition"]]
    assert lines[5] == "(6 points in 2 group(s): campaign status 20260101-000000-aaaa lists each)"
