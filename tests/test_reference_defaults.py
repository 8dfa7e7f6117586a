"""The reference workload's defaults (issue #23): ``trainer=swinv2_upernet`` trains on its
study's dataset shapes (ADE20K's 512 crops, 150 classes; synthetic batches without a
``dataset.root``) unless a dataset is named; the readable dry run shows each point's
schedule where it differs; a point estimated over its platform's time limit is refused
unless it checkpoints (campaign/launch/timelimit.py)."""

from __future__ import annotations

import json

import pytest

from campaign.common.errors import ConfigError
from campaign.observe.estimate import ASSUMED_MFU, STARTUP_S, campaign_cost, fmt_duration, fmt_gpu_hours
from campaign.launch.timelimit import check_time_limits, time_limit_refusals
from campaign.launch.validate import names_dataset, reference_dataset
from trainers.registry import spec_of
from trainers.specs.swinv2_upernet import FLOPS_PER_ITERATION

from conftest import EMULATED_GPUS  # this machine's torch has no Volta kernels: V100 points not checked

REF = ("trainer=swinv2_upernet",)


def _json(res) -> list[dict]:
    assert res.returncode == 0, res.stderr
    return [json.loads(line) for line in res.stdout.splitlines() if line.startswith("{")]


def _plan(*overrides: str):
    """A point planned from Hydra's composition, as a launch plans it (its overrides passed)."""
    from hydra import compose, initialize_config_module

    from campaign.catalogue.config import register
    from campaign.launch.plan import plan_point
    from conftest import hydra_version_base_kept

    register()
    with hydra_version_base_kept(), initialize_config_module("campaign_conf", version_base="1.3"):
        cfg = compose("config", overrides=list(overrides))
    return plan_point(cfg, 0, list(overrides))


# ------------------------------------------------------------------ the trainer's own dataset


def test_the_reference_trainer_alone_trains_on_ade20k_shapes_in_the_json_and_the_stored_config(ws):
    (point,) = _json(ws.launch("-m", *REF, "gpus=1", "--json"))
    data = point["config"]["dataset"]
    assert (data["name"], data["image_size"], data["num_classes"], data["channels"], data["root"]) == (
        "synthetic", 512, 150, 3, None)
    stored = _plan(*REF).store_row()
    assert stored["dataset"] == "synthetic"
    assert (stored["config"]["dataset"]["image_size"], stored["config"]["dataset"]["num_classes"]) == (512, 150)


def test_a_named_dataset_always_wins_and_a_root_reads_ade20k(ws, tmp_path):
    (cifar,) = _json(ws.launch("-m", *REF, "gpus=1", "dataset=synthetic", "--json"))
    assert (cifar["config"]["dataset"]["image_size"], cifar["config"]["dataset"]["num_classes"]) == (32, 10)
    # named without its root: refused as before (a dry run notes it), never silently synthetic
    named = ws.launch("-m", *REF, "gpus=1", "dataset=ade20k", "--json")
    assert json.loads(named.stdout)["config"]["dataset"]["name"] == "ade20k"
    assert "note: dataset.root is required for dataset=ade20k" in named.stderr
    # a root without a name: the study's dataset itself, read from there
    assert _plan(*REF, f"dataset.root={tmp_path}").config["dataset"]["name"] == "ade20k"
    # another trainer keeps the global default
    assert _plan("trainer=synthetic").config["dataset"]["image_size"] == 32


def test_reference_dataset_rules():
    spec = spec_of("swinv2_upernet")
    ade = {"dataset": {"name": "ade20k", "root": None, "image_size": 512, "num_classes": 150}}
    assert reference_dataset(ade, spec, ["trainer=swinv2_upernet"])["name"] == "synthetic"
    assert reference_dataset(ade, spec, ["dataset=ade20k"])["name"] == "ade20k"
    assert reference_dataset(ade, spec, ["dataset.name=ade20k"])["name"] == "ade20k"
    rooted = {"dataset": {**ade["dataset"], "root": "/data"}}
    assert reference_dataset(rooted, spec, [])["name"] == "ade20k"
    assert reference_dataset(ade, spec_of("synthetic"), [])["name"] == "ade20k"  # declares no study dataset
    assert ade["dataset"]["name"] == "ade20k"  # the config is not changed in place
    assert names_dataset(["+dataset=toy"]) and names_dataset(["dataset@dataset=cifar10"])
    assert not names_dataset(["dataset.root=/x", "dataset.image_size=64", "datasets=1"])


def test_the_readable_dry_run_names_the_trainers_dataset(ws):
    res = ws.launch("-m", *REF, "gpus=1", "trainer.params.variant=tiny", "--dry-run")
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines()[1] == ("every point: trainer=swinv2_upernet experiment=weak_scaling "
                                          "dataset=synthetic 512px 150 classes (ade20k's shapes, no dataset.root)")
    named = ws.launch("-m", *REF, "gpus=1", "dataset=synthetic", "--dry-run")
    assert named.stdout.splitlines()[1] == "every point: trainer=swinv2_upernet experiment=weak_scaling"


@pytest.mark.parametrize("trainer,study,shapes", [
    ("frozen_backbone", "mnist", (28, 1, 10)),  # its study: grey 28x28 MNIST digits (resized by the trainer)
    ("vit", "cifar10", (32, 3, 10)),  # its study: CIFAR-10 (resized to the ViT's input by the trainer)
])
def test_the_other_trainers_train_on_their_studys_dataset_shapes(ws, tmp_path, trainer, study, shapes):
    (point,) = _json(ws.launch("-m", f"trainer={trainer}", "gpus=1", "--json"))
    data = point["config"]["dataset"]
    assert (data["name"], data["image_size"], data["channels"], data["num_classes"], data["root"]) == (
        "synthetic", *shapes, None)
    stored = _plan(f"trainer={trainer}").store_row()
    assert stored["dataset"] == "synthetic"
    got = stored["config"]["dataset"]
    assert (got["image_size"], got["channels"], got["num_classes"]) == shapes
    # a named dataset wins; a root alone reads the study's own
    named = _plan(f"trainer={trainer}", "dataset=synthetic").config["dataset"]
    assert (named["name"], named["image_size"], named["channels"]) == ("synthetic", 32, 3)
    assert _plan(f"trainer={trainer}", f"dataset.root={tmp_path}").config["dataset"]["name"] == study


def test_the_readable_dry_run_names_a_grey_dataset(ws):
    res = ws.launch("-m", "trainer=frozen_backbone", "gpus=1", "--dry-run")
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines()[1] == ("every point: trainer=frozen_backbone experiment=weak_scaling "
                                          "dataset=synthetic 28px 1-channel 10 classes (mnist's shapes, no dataset.root)")


def test_each_trainers_declared_dataset_is_the_one_its_conf_file_picks():
    """TrainerDef.dataset (what the launch keeps synthetic without a root) and the conf
    file's ``override /dataset`` (what Hydra composes) name the same dataset."""
    import re
    from pathlib import Path

    conf = Path(__file__).resolve().parents[1] / "conf" / "trainer"
    for path in sorted(conf.glob("*.yaml")):
        picked = re.search(r"^\s*- override /dataset@_global_\.dataset: (\w+)", path.read_text(), re.M)
        assert (picked.group(1) if picked else None) == spec_of(path.stem).dataset, path.name


# ------------------------------------------------------------------ the schedule in the readable dry run


def _header_and_rows(stdout: str) -> tuple[list[str], list[list[str]]]:
    lines = stdout.splitlines()
    rule = next(i for i, ln in enumerate(lines) if ln.startswith("---"))
    # columns by the rule's dashes: headers hold spaces ("time limit", "global batch")
    spans, start = [], None
    for i, ch in enumerate(lines[rule] + " "):
        if ch == "-" and start is None:
            start = i
        elif ch != "-" and start is not None:
            spans.append((start, i))
            start = None
    cut = lambda ln: [ln[a:b + 2].strip() for a, b in spans]  # noqa: E731 (right-aligned numbers run to b)
    rows = []
    for ln in lines[rule + 1:]:
        if not ln.strip() or ln.startswith("estimate:"):
            break
        rows.append(cut(ln))
    return cut(lines[rule - 1]), rows


def test_the_dry_run_shows_the_schedule_where_it_differs(ws):
    weak = ws.launch("-m", "platform=v100", EMULATED_GPUS, "gpus=1,2,4", "trainer=sleep", "--dry-run")
    header, rows = _header_and_rows(weak.stdout)
    # weak scaling: the same 8 images per GPU (not shown), a global batch and iterations per point
    assert "img/GPU" not in header
    got = [(r[header.index("gpus")], r[header.index("global batch")], r[header.index("iterations")]) for r in rows]
    assert got == [("1", "8", "160000"), ("2", "16", "80000"), ("4", "32", "40000")]
    strong = ws.launch("-m", "gpus=1,2", "trainer=sleep", "experiment=strong_scaling", "experiment.global_batch=32",
                       "experiment.base_iterations=10", "--dry-run")
    header, rows = _header_and_rows(strong.stdout)
    # strong scaling: images per GPU differ; the global batch is set, so every schedule column is shown
    assert [(r[header.index("img/GPU")], r[header.index("global batch")], r[header.index("iterations")])
            for r in rows] == [("32", "32", "10"), ("16", "32", "10")]
    same = ws.launch("-m", "gpus=2", "trainer=sleep", "seed=0,1", "--dry-run")
    header, _ = _header_and_rows(same.stdout)
    assert not {"img/GPU", "global batch", "iterations"} & set(header)


# ------------------------------------------------------------------ the time limit


def test_the_reference_study_dry_run_has_an_estimate_for_every_point(ws):
    points = _json(ws.launch("-m", *REF, "platform=v100,a100,a100_nvlink_40,a100_nvlink_80", EMULATED_GPUS,
                             "gpus=1,2,4", "--json"))
    assert len(points) == 12
    for p in points:
        est, plat = p["estimate"], p["config"]["platform"]
        assert est["wall_s"] is not None and est["source"].startswith("the trainer's declaration"), est
        # SwinV2-B at 512 x 8: the table's 14.1 TFLOP per iteration at 35 % of the fp32 peak
        expected = FLOPS_PER_ITERATION[("base", 512)] / (plat["peak_tflops"]["fp32"] * 1e12 * ASSUMED_MFU)
        assert est["s_per_it"] == pytest.approx(expected, rel=1e-9)
        assert est["iterations"] == 160_000 // _gpus(p) + 5  # weak scaling 160K/N, 5 warm-up
        assert est["wall_s"] == pytest.approx(STARTUP_S + est["iterations"] * expected)


def _gpus(p: dict) -> int:
    return int(next(o for o in p["overrides"] if o.startswith("gpus=")).split("=")[1])


def test_a_1_gpu_reference_point_over_its_time_limit_is_refused_without_checkpointing(ws):
    over = ws.launch(*REF, "platform=v100", EMULATED_GPUS, "gpus=1", "platform.time_limit_min=600")
    assert over.returncode == 2
    wall = STARTUP_S + 160_005 * FLOPS_PER_ITERATION[("base", 512)] / (14.0e12 * ASSUMED_MFU)
    minutes = -(-int(wall) // 60)
    assert over.stderr == (
        "error: point platform=v100 gpus=1 trainer=swinv2_upernet experiment=weak_scaling: estimated wall time "
        f"{fmt_duration(wall)} "
        "is over platform v100's time limit 10:00:00 and nothing resumes it; use experiment.checkpoint=true "
        f"(each attempt resumes where the last one stopped), or platform.time_limit_min={minutes} where the "
        "partition allows it, or the projection pilot first (experiment=projection), or "
        "experiment.until_time_limit=true to run into the limit on purpose\n")
    assert not ws.db.exists()
    # checkpointed, the same point is accepted (planned, estimated, nothing refused)
    ok = _plan(*REF, "platform=v100", EMULATED_GPUS, "gpus=1", "platform.time_limit_min=600",
               "experiment.checkpoint=true")
    assert time_limit_refusals([ok], campaign_cost([ok])) == []
    check_time_limits([ok], campaign_cost([ok]))
    dry = ws.launch("-m", *REF, "platform=v100", EMULATED_GPUS, "gpus=1", "platform.time_limit_min=600",
                    "experiment.checkpoint=true", "--dry-run")
    assert dry.returncode == 0 and "would be refused: point" not in dry.stdout
    # and so is one whose limit holds it
    assert _refusals(*REF, "platform=v100", EMULATED_GPUS, "gpus=1", f"platform.time_limit_min={minutes}") == []
    assert len(_refusals(*REF, "platform=v100", EMULATED_GPUS, "gpus=1",
                         f"platform.time_limit_min={minutes - 1}")) == 1
    # and one meant to run into its limit (a slice of a longer run, a timeout test)
    assert _refusals(*REF, "platform=v100", EMULATED_GPUS, "gpus=1", "platform.time_limit_min=600",
                     "experiment.until_time_limit=true") == []


def _refusals(*overrides: str) -> list[str]:
    p = _plan(*overrides)
    return time_limit_refusals([p], campaign_cost([p]))


def test_a_dry_run_notes_each_point_over_its_limit_and_a_launch_names_how_many(ws):
    dry = ws.launch("-m", *REF, "platform=a100", "gpus=1,2,4", "--dry-run")
    assert dry.returncode == 0
    noted = [ln for ln in dry.stdout.splitlines() if ln.startswith("note: would be refused: point")]
    # a100 (fp32 peak 19.5): 1 GPU ~3.8 days, 2 GPUs ~1.9 days over 24 h; 4 GPUs ~23 h fit
    assert [ln.split()[6] for ln in noted] == ["gpus=1", "gpus=2"]
    refused = ws.launch("-m", *REF, "platform=a100", "gpus=1,2,4")
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1
    assert "(1 more point(s) likewise; --dry-run lists them)" in refused.stderr
    assert not ws.db.exists()


def test_an_unknown_estimate_never_refuses():
    p = _plan(*REF, "platform=v100", EMULATED_GPUS, "gpus=1", "dataset=synthetic", "platform.time_limit_min=1")
    cost = campaign_cost([p])
    assert not cost.points[0].known and time_limit_refusals([p], cost) == []


def test_a_time_law_estimate_is_compared_too():
    p = _plan("trainer=sleep", "platform=v100", EMULATED_GPUS, "gpus=1", "experiment.base_iterations=100000",
              "platform.time_limit_min=1")
    (line,) = time_limit_refusals([p], campaign_cost([p]))
    assert "use experiment.checkpoint=true" in line and "platform.time_limit_min=" in line
    with pytest.raises(ConfigError, match="over platform v100's time limit 0:01:00"):
        check_time_limits([p], campaign_cost([p]))


# ------------------------------------------------------------------ GPU-hours per platform

REFERENCE_SWEEP = (*REF, "platform=v100,a100,a100_nvlink_40", EMULATED_GPUS, "gpus=1,2,4,8")


def _by_hand(platform: dict, gpus: int) -> tuple[float, float]:
    """(wall s, GPU-hours) of a weak-scaling reference point from the FLOPs table alone."""
    s_per_it = FLOPS_PER_ITERATION[("base", 512)] / (platform["peak_tflops"]["fp32"] * 1e12 * ASSUMED_MFU)
    wall = STARTUP_S + (160_000 // gpus + 5) * s_per_it
    return wall, wall * gpus / 3600


def test_the_reference_study_dry_run_sums_gpu_hours_per_platform(ws):
    """The full 160K schedule's GPU-hours per platform, in --json (each point carries its
    platform's totals) and the readable dry run, equal to its points' estimates summed and
    to the FLOPs table worked by hand (v100 and a100 have 4 GPUs per node: no 8-GPU point).
    Planned for the study's own cluster: the test SLURM (4 GPUs a node) is not asked."""
    ws.away_from_slurm()
    res = ws.launch("-m", *REFERENCE_SWEEP, "--json")
    points = _json(res)
    assert [(p["config"]["platform"]["name"], _gpus(p)) for p in points] == [
        ("v100", 1), ("v100", 2), ("v100", 4), ("a100", 1), ("a100", 2), ("a100", 4),
        ("a100_nvlink_40", 1), ("a100_nvlink_40", 2), ("a100_nvlink_40", 4), ("a100_nvlink_40", 8)]
    totals = {}
    for name in ("v100", "a100", "a100_nvlink_40"):
        mine = [p for p in points if p["config"]["platform"]["name"] == name]
        (total,) = {json.dumps(p["platform_estimate"], sort_keys=True) for p in mine}  # the same on each
        total = json.loads(total)
        assert total["platform"] == name and total["points"] == len(mine) and total["unknown"] == 0
        assert total["longest_wall_s"] == max(p["estimate"]["wall_s"] for p in mine)
        assert total["gpu_hours"] == pytest.approx(sum(p["estimate"]["gpu_hours"] for p in mine), rel=1e-12)
        hand = [_by_hand(mine[0]["config"]["platform"], _gpus(p)) for p in mine]
        assert total["longest_wall_s"] == pytest.approx(hand[0][0], rel=1e-9)  # the 1-GPU point is the longest
        assert total["gpu_hours"] == pytest.approx(sum(h for _, h in hand), rel=1e-9)
        totals[name] = total
    # V100 (fp32 peak 14 TFLOP/s): 160,005 iterations x 14.13 TFLOP at 35 % (2.88 s each): 5.34 days on one GPU
    assert totals["v100"]["longest_wall_s"] / 86400 == pytest.approx(5.342, abs=0.001)

    dry = ws.launch("-m", *REFERENCE_SWEEP, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    lines = dry.stdout.splitlines()
    at = lines.index("per platform (its points' estimates summed):")
    assert lines[at + 1:at + 4] == [
        f"  {name:<14}  {t['points']} point(s), longest {fmt_duration(t['longest_wall_s'])}, "
        f"{fmt_gpu_hours(t['gpu_hours'])} GPU-hours" for name, t in totals.items()]
    assert not lines[at + 4].startswith("  ")


def test_gpu_hours_per_platform_leave_unknown_points_out():
    from campaign.launch.dryrun import platform_costs, platform_lines

    a = _plan(*REF, "platform=a100", "gpus=4")
    b = _plan(*REF, "platform=a100_nvlink_40", "gpus=4", "dataset=synthetic")  # 32px: not in the FLOPs table
    c = _plan(*REF, "platform=a100_nvlink_40", "gpus=2")
    cost = campaign_cost([a, b, c])
    assert [(r.platform, r.points, r.unknown) for r in platform_costs([a, b, c], cost)] == [
        ("a100", 1, 0), ("a100_nvlink_40", 2, 1)]
    assert platform_costs([a, b, c], cost)[1].gpu_hours == cost.points[2].gpu_hours
    assert platform_lines([a, b, c], cost)[2].endswith("; 1 point(s) unknown")
    assert platform_lines([a], campaign_cost([a])) == []  # one platform: the estimate line says it
    d = _plan(*REF, "platform=a100", "gpus=4", "dataset=synthetic")
    assert platform_lines([b, d], campaign_cost([b, d])) == []  # nothing known: nothing to sum
