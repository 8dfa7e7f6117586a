"""``campaign figures`` (issue #46): every declared table and figure of a study
(conf/study/figures/*.yaml) from small crafted stores shaped as each study's reduced twin.
Each expected number is worked out HERE from the study's own formula and the rows written,
never by campaign's code: the ViT study's strong-scaling speedup T(1)/T(N) and efficiency
speedup/N and its mean time per epoch (Figs 12, 13, 16), the thesis's training time in hours
(Fig 1), its eq. 3.1-3.3 (Figs 2-5) and platform comparison (Figs 6-8), the DataParallel
study's computation and communication per iteration (Fig 1a). The CSV behind each figure is
compared within 1e-9 relative; index.json lists every declared item."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pytest
from sqlalchemy import insert, select

from campaign.cli import main
from campaign.harvest.declared import DECLARED_STATUS, declarations
from campaign.store import open_store
from campaign_sql.schema import attempt, breakdown, evaluation, iteration, profile, rank_timing

REL = 1e-9
import os

TEXTS = (Path(os.environ["CAMPAIGN_REFERENCE_TEXT"]).parent if os.environ.get("CAMPAIGN_REFERENCE_TEXT")
         else Path(__file__).resolve().parent.parent.parent / "shared" / "reference")


def _store(tmp_path: Path, cid: str, points: list[dict], db: str = "") -> str:
    """A store of one campaign: each point with one completed attempt and its rows (``ranks``:
    rank_timing rows; ``phases``: (rank, phase, total_s, mean_s, count); ``profile``: (rank,
    cpu total s, device total s); ``losses``: per-iteration losses, rank 0's (a list) or each
    rank's ({rank: list}); ``ranks`` may carry rank_timing's ``extra`` (a stop rule's keys); ``evaluation``:
    (epoch, loss, accuracy))."""
    url = f"sqlite:///{tmp_path}/{db or cid}.db"
    rows = [{k: v for k, v in p.items() if k not in ("ranks", "phases", "profile", "losses", "evaluation")}
            for p in points]
    with open_store(url, create=True) as s:
        pids = s.register({"id": cid, "name": cid.split("-")[-1], "created_at": 1.0}, rows)
        with s.engine.begin() as conn:
            conn.execute(insert(attempt), [dict(point_id=p, attempt_no=0, state="completed") for p in pids])
            ids = dict(conn.execute(select(attempt.c.point_id, attempt.c.id).where(attempt.c.point_id.in_(pids))).all())
            for pid, p in zip(pids, points):
                aid = ids[pid]
                conn.execute(insert(rank_timing), [dict(attempt_id=aid, rank=r, warmup_iterations=1, warmup_s=0.1,
                                                        iterations=p["iterations"], **rt)
                                                   for r, rt in enumerate(p["ranks"])])
                if p.get("phases"):
                    conn.execute(insert(breakdown), [dict(attempt_id=aid, rank=r, phase=ph, total_s=t, mean_s=m,
                                                          count=c) for r, ph, t, m, c in p["phases"]])
                if p.get("profile"):
                    conn.execute(insert(profile), [dict(attempt_id=aid, rank=r, iterations=2, total_s=1.0,
                                                        top_ops={"cpu_time_total_s": c, "device_time_total_s": d})
                                                   for r, c, d in p["profile"]])
                if p.get("losses"):
                    by_rank = p["losses"] if isinstance(p["losses"], dict) else {0: p["losses"]}
                    conn.execute(insert(iteration), [dict(attempt_id=aid, rank=r, iter=i, warmup=i == 0, iter_s=0.5,
                                                          loss=v) for r, vals in by_rank.items()
                                                     for i, v in enumerate(vals)])
                if p.get("evaluation"):
                    conn.execute(insert(evaluation), [dict(attempt_id=aid, epoch=e, split="test", loss=lo, accuracy=a,
                                                           images=10000) for e, lo, a in p["evaluation"]])
    return url


def _run(url: str, cid: str, out: Path, capsys, *formats: str) -> dict:
    assert main(["figures", cid, "--store", url, "--out", str(out), *formats]) == 0, capsys.readouterr().err
    return json.loads((out / "index.json").read_text())


def _csv(path: Path) -> list[dict]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def _num(row: dict, col: str) -> float:
    return float(row[col])


def _by_gpus(rows: list[dict], col: str, **where) -> dict[int, float]:
    return {int(r["gpus"]): _num(r, col) for r in rows if all(r.get(k) == v for k, v in where.items())}


def _made(index: dict) -> set[str]:
    return {e["number"] for e in index["items"] if e["status"] == "made"}


# ------------------------------------------------------------------ the ViT study (its twin's grid)

VIT = {"name": "vit_deepspeed_small", "text": "vit-deepspeed-scaling.txt"}
# (experiment, dataset, images per GPU) -> {gpus: each rank's wall seconds}
VIT_WALL = {("vit_strong", "cifar10", 8): {1: [30.0], 2: [16.5, 17.25]},
            ("vit_strong", "cifar100", 8): {1: [31.0], 2: [18.0, 17.5]},
            ("vit_strong", "cifar100", 4): {1: [50.0], 2: [32.0, 31.5]},
            ("vit_weak", "cifar10", 8): {1: [3.0], 2: [3.5, 3.25]},
            ("vit_weak", "cifar100", 8): {1: [3.1], 2: [3.4, 3.6]}}
# each rank's seconds of epoch 0 and epoch 1
VIT_EPOCHS = {1: [(14.0, 15.0)], 2: [(8.0, 8.5), (8.25, 8.75)]}


def _vit_points() -> list[dict]:
    points = []
    for (exp, ds, b), walls in VIT_WALL.items():
        for n, ranks in walls.items():
            share = {"fraction": 0.002} if exp == "vit_strong" else {}
            images = round(50_000 * 0.002) * (n if exp == "vit_weak" else 1)  # the training share (100 per GPU: weak)
            its = 2 * (images // (b * n)) - 1  # 2 epochs of whole batches, less the warm-up iteration
            exp_cfg = {"epochs": 2, "warmup_iterations": 1, "scaling": "weak", "images_per_gpu": b}
            if exp == "vit_weak":
                exp_cfg["dataset_fraction_per_gpu"] = 0.002
            config = {"study": VIT, "gpus": n, "dataset": {"name": ds, **share}, "experiment": exp_cfg,
                      "trainer": {"params": {"engine": "ddp"}}}
            points.append(dict(idx=len(points), platform="t4", trainer="vit", experiment=exp, dataset=ds, gpus=n,
                               nodes=1, repeat=0, batch_per_gpu=b, iterations=its, executor="slurm", state="completed",
                               overrides=[f"gpus={n}", f"experiment={exp}", f"dataset={ds}",
                                          f"experiment.images_per_gpu={b}", "trainer.params.engine=ddp"],
                               config=config,
                               ranks=[dict(wall_s=w, images=b * its) for w in ranks],
                               phases=[(r, f"epoch_{e}", t, t / 12, 12) for r, ep in enumerate(VIT_EPOCHS[n])
                                       for e, t in enumerate(ep)],
                               losses=[2.3 - 0.05 * i for i in range(24)],
                               evaluation=[(0, 2.0, 0.2 + 0.01 * n), (1, 1.8, 0.3 + 0.01 * n)]))
    return points


def test_vit_strong_scaling_speedup_efficiency_and_epoch_time_by_hand(tmp_path, capsys):
    cid = "20260301-000000-vit1-vit-twin"
    url = _store(tmp_path, cid, _vit_points())
    index = _run(url, cid, tmp_path / "out", capsys, "--formats", "png")
    out = tmp_path / "out"
    for number, (exp, ds, b) in (("fig13", ("vit_strong", "cifar10", 8)), ("fig12", ("vit_strong", "cifar100", 4)),
                                 ("fig16", ("vit_strong", "cifar100", 8))):
        rows = _csv(out / f"{number}.csv")
        t = {n: max(w) for n, w in VIT_WALL[(exp, ds, b)].items()}  # the slowest rank's timed window
        assert _by_gpus(rows, "speedup") == pytest.approx({n: t[1] / t[n] for n in t}, rel=REL), number
        assert _by_gpus(rows, "efficiency") == pytest.approx({n: t[1] / t[n] / n for n in t}, rel=REL), number
        assert "speedup kept" in next(r for r in rows if r["gpus"] == "2")["note"]  # the dropped batch named
    # the study's time per epoch: the mean over all its epochs, each epoch its slowest rank's
    epoch_s = {n: sum(max(r[e] for r in ranks) for e in (0, 1)) / 2 for n, ranks in VIT_EPOCHS.items()}
    assert epoch_s == {1: 14.5, 2: (8.25 + 8.75) / 2}
    for number in ("fig08", "fig16", "fig09", "fig17"):
        rows = _csv(out / f"{number}.csv")
        assert _by_gpus(rows, "epoch_s") == pytest.approx(epoch_s, rel=REL), number
    assert (out / "fig13.png").is_file() and (out / "fig13.txt").is_file()
    caption = (out / "fig13.txt").read_text()
    assert caption.startswith("fig13: CIFAR-10 Strong Scaling Speedup (Batch size 64)\ndefinition: speedup")
    assert "source: section IV-D: \"Figure 12 and Figure 13 shows the speedup" in caption
    # every item of the declaration, in its order; made wherever the twin's grid covers it
    declared = declarations()["vit_deepspeed"]
    assert [e["number"] for e in index["items"]] == [i.number for i in declared.items]
    assert _made(index) == {"fig08", "fig09", "fig10", "fig11", "fig12", "fig13", "fig16", "fig17"}
    assert all(e["status"] in DECLARED_STATUS for e in index["items"] if e["number"] not in _made(index))
    assert {e["number"]: e["status"] for e in index["items"]}["fig14"] == "outside_grid"
    acc = _csv(out / "fig10.csv")  # test accuracy after each epoch, as stored
    assert sorted((int(r["gpus"]), int(r["epoch"]), float(r["test_accuracy"])) for r in acc if r["test_accuracy"]) == \
        sorted((n, e, a) for n in (1, 2) for e, a in ((0, 0.2 + 0.01 * n), (1, 0.3 + 0.01 * n)) for _ in (0, 1))


# ------------------------------------------------------------------ the reference study (its twin's grid)

THESIS = {"name": "swinv2_thesis_small", "text": "swinv2-ddp-scalability-thesis.txt"}
PLATFORMS = {"v100": (1, 2, 4), "a100": (1, 2, 4), "a100_nvlink_40": (1, 2, 4, 8), "a100_nvlink_80": (1, 2, 4, 8)}
BASE = {"v100": 40_000.0, "a100": 33_000.0, "a100_nvlink_40": 22_000.0, "a100_nvlink_80": 20_000.0}


def _thesis_wall(plat: str, n: int, rank: int) -> float:
    return BASE[plat] / n ** 0.6 + 7.0 * rank  # the ranks end apart: the job's time is the slowest's


def _thesis_totals(plat: str, n: int, rank: int) -> tuple[float, float]:
    """(the profiler's CPU time total, its CUDA time total) of a rank, seconds."""
    return 0.8 + 0.3 * n + 0.01 * rank, 0.5 + 0.02 * n - 0.005 * rank


def _thesis_points() -> list[dict]:
    points = []
    for plat, counts in PLATFORMS.items():
        for n in counts:
            its = 32 // n
            points.append(dict(idx=len(points), platform=plat, trainer="swinv2_upernet", experiment="weak_scaling",
                               dataset="ade20k", gpus=n, nodes=1, repeat=0, batch_per_gpu=2, iterations=its,
                               executor="slurm", state="completed", overrides=[f"platform={plat}", f"gpus={n}"],
                               config={"study": THESIS, "gpus": n, "experiment": {"scaling": "weak"}},
                               ranks=[dict(wall_s=_thesis_wall(plat, n, r), images=2 * its) for r in range(n)],
                               profile=[(r, *_thesis_totals(plat, n, r)) for r in range(n)]))
    return points


def test_thesis_hours_equations_3_1_to_3_3_and_platform_comparison_by_hand(tmp_path, capsys):
    cid = "20260301-000000-sw01-thesis-twin"
    url = _store(tmp_path, cid, _thesis_points())
    index = _run(url, cid, tmp_path / "out", capsys, "--formats", "none")  # the numbers (the ViT test draws)
    out = tmp_path / "out"
    assert not list(out.glob("*.png")) and (out / "fig01.txt").is_file()
    fig1, fig2, fig3 = (_csv(out / f"fig0{i}.csv") for i in (1, 2, 3))
    fig4, fig5 = _csv(out / "fig04.csv"), _csv(out / "fig05.csv")
    for plat, counts in PLATFORMS.items():
        t = {n: max(_thesis_wall(plat, n, r) for r in range(n)) for n in counts}
        assert _by_gpus(fig1, "training time (hours)", platform=plat) == pytest.approx(
            {n: t[n] / 3600 for n in counts}, rel=REL)  # its Fig 1 in hours (section 5.1)
        assert _by_gpus(fig2, "speedup", platform=plat) == pytest.approx({n: t[1] / t[n] for n in counts}, rel=REL)
        assert _by_gpus(fig3, "efficiency", platform=plat) == pytest.approx({n: t[1] / t[n] / n for n in counts},
                                                                             rel=REL)
        # eq. 3.3: T_d / T_t of the ranks' mean totals, T_t = CPU + CUDA time, in %
        cpu = {n: sum(_thesis_totals(plat, n, r)[0] for r in range(n)) / n for n in counts}
        dev = {n: sum(_thesis_totals(plat, n, r)[1] for r in range(n)) / n for n in counts}
        assert _by_gpus(fig4, "GPU utilization, eq. 3.3 (%)", platform=plat) == pytest.approx(
            {n: 100 * dev[n] / (cpu[n] + dev[n]) for n in counts}, rel=REL)
        assert _by_gpus(fig5, "CPU utilization, eq. 3.3 (%)", platform=plat) == pytest.approx(
            {n: 100 * cpu[n] / (cpu[n] + dev[n]) for n in counts}, rel=REL)
    # on the twin, its two platforms stand in for each comparison (conf/study/figures: twin_where)
    twin_pair = ("v100", "a100_nvlink_80")
    for number, plats in (("fig06", twin_pair), ("fig07", twin_pair), ("fig08", twin_pair)):
        rows = _csv(out / f"{number}.csv")
        assert {r["platform"] for r in rows} == set(plats), number
        for plat in plats:
            counts = PLATFORMS[plat]
            t = {n: max(_thesis_wall(plat, n, r) for r in range(n)) for n in counts}
            cpu = {n: sum(_thesis_totals(plat, n, r)[0] for r in range(n)) / n for n in counts}
            dev = {n: sum(_thesis_totals(plat, n, r)[1] for r in range(n)) / n for n in counts}
            assert _by_gpus(rows, "speedup", platform=plat) == pytest.approx({n: t[1] / t[n] for n in counts}, rel=REL)
            assert _by_gpus(rows, "gpu_util_study", platform=plat) == pytest.approx(
                {n: dev[n] / (cpu[n] + dev[n]) for n in counts}, rel=REL)
            assert _by_gpus(rows, "cpu_util_study", platform=plat) == pytest.approx(
                {n: cpu[n] / (cpu[n] + dev[n]) for n in counts}, rel=REL)
    # Table 3: this store's 32/N iterations of 2 images per GPU (the study's 160K/N of 8; the twin now runs 16/N)
    tab3 = _csv(out / "tab03.csv")
    assert {(r["platform"], int(r["gpus"]), int(r["iterations"]), int(r["batch_per_gpu"])) for r in tab3} == {
        (p, n, 32 // n, 2) for p, counts in PLATFORMS.items() for n in counts}
    declared = declarations()["swinv2_thesis"]
    assert [e["number"] for e in index["items"]] == [i.number for i in declared.items]
    assert _made(index) == {"tab03", *(f"fig0{i}" for i in range(1, 9))}
    assert {e["number"]: e["status"] for e in index["items"]}["tab01"] == "not_measured"


# ------------------------------------------------------------------ the DataParallel study (its twin's grid)

DP = {"name": "dataparallel_a6000_small", "text": "dataparallel-frozen-backbones-a6000.txt"}
DEFAULTS = {"gpus": 2, "experiment.global_batch": 16, "trainer.params.backbone": "resnet18",
            "trainer.params.hidden": 64, "trainer.params.mode": "train", "trainer.params.engine": "ddp"}
# one factor at a time from the twin's defaults (conf/study/dataparallel_a6000_small.yaml's grids)
DP_GRID = ([{"gpus": n} for n in (1, 2, 4)] + [{"experiment.global_batch": 8}]
           + [{"trainer.params.backbone": "squeezenet1_0"}] + [{"trainer.params.hidden": 32}]
           + [{"gpus": 1, "trainer.params.mode": "inference", "trainer.params.engine": e, "experiment.global_batch": b}
              for e in ("dataparallel", "vanilla") for b in (8, 16)])


def _dp_seconds(i: int, rank: int) -> tuple[float, float, float]:
    """(study.compute, study.comm_barrier or comm_sync, the iteration) mean seconds of point i's rank."""
    compute, comm = 0.010 + 0.002 * i + 0.0003 * rank, 0.001 + 0.0005 * i - 0.0001 * rank
    return compute, comm, compute + comm + 0.0002


def _dp_points() -> list[dict]:
    points = []
    for i, change in enumerate(DP_GRID):
        s = {**DEFAULTS, **change}
        n, mode = s["gpus"], s["trainer.params.mode"]
        comm = "study.comm_barrier" if mode == "train" else "study.comm_sync"
        config = {"study": DP, "gpus": n, "experiment": {"global_batch": s["experiment.global_batch"],
                                                         "scaling": "strong", "epochs": 3},
                  "trainer": {"params": {k.rsplit(".", 1)[-1]: v for k, v in s.items() if k.startswith("trainer.")}}}
        phases = []
        for r in range(n):
            c, m, it = _dp_seconds(i, r)
            phases += [(r, "study.compute", c * 4, c, 4), (r, comm, m * 4, m, 4), (r, "iteration", it * 4, it, 4)]
            phases += [(r, f"epoch_{e}", 1.0, 0.5, 2) for e in (0, 1)]
        points.append(dict(idx=i, platform="a100", trainer="frozen_backbone", experiment="dataparallel_study",
                           dataset="mnist", gpus=n, nodes=1, repeat=0, batch_per_gpu=s["experiment.global_batch"] // n,
                           iterations=4, executor="slurm", state="completed",
                           overrides=[f"{k}={v}" for k, v in s.items()], config=config,
                           ranks=[dict(wall_s=1.0 + 0.1 * i, images=4 * s["experiment.global_batch"] // n)
                                  for _ in range(n)],
                           phases=phases, losses=[1.0 - 0.1 * k for k in range(4)] if mode == "train" else None))
    return points


def test_dataparallel_fig_1a_is_the_studys_computation_and_communication_by_hand(tmp_path, capsys):
    cid = "20260301-000000-dp01-dp-twin"
    url = _store(tmp_path, cid, _dp_points())
    index = _run(url, cid, tmp_path / "out", capsys, "--formats", "png")
    out = tmp_path / "out"
    assert (out / "fig01a.png").is_file() and not (out / "fig01a.svg").exists()
    rows = _csv(out / "fig01a.csv")
    for phase, k in (("study.compute", 0), ("study.comm_barrier", 1)):
        # Fig 1a: the default point at 1, 2 and 4 GPUs (DP_GRID's first three), each phase's mean over ranks, in ms
        want = {n: 1000 * sum(_dp_seconds(i, r)[k] for r in range(n)) / n for i, n in enumerate((1, 2, 4))}
        assert _by_gpus(rows, "per_iteration_ms", phase=phase) == pytest.approx(want, rel=REL)
    assert {r["phase"] for r in rows} == {"study.compute", "study.comm_barrier"}  # never campaign's phases
    fig4a = _csv(out / "fig04a.csv")  # inference: the forward's ms per engine and batch
    want = {(e, b): 1000 * _dp_seconds(DP_GRID.index({"gpus": 1, "trainer.params.mode": "inference",
                                                      "trainer.params.engine": e, "experiment.global_batch": b}), 0)[0]
            for e in ("dataparallel", "vanilla") for b in (8, 16)}
    got = {(r["trainer.params.engine"], int(r["experiment.global_batch"])): _num(r, "per_iteration_ms") for r in fig4a}
    assert got == pytest.approx(want, rel=REL)
    assert _made(index) == {"fig01a", "fig01b", "fig02a", "fig02b", "fig03a", "fig03b", "fig04a", "fig04b", "fig05a",
                            "fig05b"}
    assert {e["number"]: e["status"] for e in index["items"]}["fig06a"] == "no_numbers"


# ------------------------------------------------------------------ the declarations themselves


def _plain(text: str) -> str:
    text = text.replace("\\times", "x").replace("\\_", "_").replace("$", "").replace("~", " ").replace("`", "")
    return re.sub(r"\s+", "", text)


@pytest.mark.skipif(not TEXTS.is_dir(), reason=f"no study texts at {TEXTS}")
def test_every_declared_source_is_the_texts_own_sentence():
    for study in declarations().values():
        text = _plain((TEXTS / study.text).read_text())
        for item in study.items:
            assert _plain(item.source.quote) in text, (study.study, item.number)


def test_bad_input_is_one_line_and_a_listing_writes_nothing(tmp_path, capsys):
    cid = "20260301-000000-sw02-thesis-twin"
    url = _store(tmp_path, cid, _thesis_points()[:2])
    (tmp_path / "file").write_text("x")
    assert main(["figures", cid, "--store", url, "--out", str(tmp_path / "file")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: --out ") and "not a folder" in err
    assert main(["figures", "nope", "--store", url]) == 2
    assert main(["figures", cid, "--store", url]) == 0  # a listing: made or why not, nothing written
    listing = capsys.readouterr().out
    assert re.search(r"^fig01 +made", listing, re.M) and re.search(r"^fig06 +no_points", listing, re.M)
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith(f"{cid}.db")) == ["file"]


def test_two_campaigns_make_one_set_the_newer_attempt_winning_and_no_study_gets_the_usual_figures(tmp_path, capsys):
    old, new = "20260301-000000-sw03-thesis-a", "20260302-000000-sw04-thesis-b"
    points = _thesis_points()
    first = [p for p in points if p["platform"] in ("a100", "v100")]
    again = [dict(p, ranks=[dict(r, wall_s=r["wall_s"] / 2) for r in p["ranks"]]) for p in first if p["platform"] == "a100"]
    url = _store(tmp_path, old, first, db="two")
    _store(tmp_path, new, again + [p for p in points if p["platform"].startswith("a100_nvlink")], db="two")
    out = tmp_path / "out"
    assert main(["figures", old, new, "--store", url, "--out", str(out), "--formats", "none"]) == 0
    rows = _csv(out / "fig01.csv")
    for plat, halved in (("a100", 2), ("v100", 1), ("a100_nvlink_40", 1)):
        want = {n: max(_thesis_wall(plat, n, r) for r in range(n)) / halved / 3600 for n in PLATFORMS[plat]}
        assert _by_gpus(rows, "training time (hours)", platform=plat) == pytest.approx(want, rel=REL), plat
    notes = next(e for e in json.loads((out / "index.json").read_text())["items"] if e["number"] == "fig01")["notes"]
    assert len(notes) == 3 and all(f"campaign {new} (b)'s newer attempt wins over campaign {old} (a)" in n
                                   for n in notes)
    # a campaign of no study: harvest's usual figures, listed in the index
    plain = "20260303-000000-pl01-plain"
    url = _store(tmp_path, plain, [dict(p, config={"gpus": p["gpus"]}) for p in points[:3]])
    assert main(["figures", plain, "--store", url, "--out", str(tmp_path / "plain"), "--formats", "png"]) == 0
    index = json.loads((tmp_path / "plain" / "index.json").read_text())
    assert index["study"] is None and "training_time" in _made(index)
    assert (tmp_path / "plain" / "training_time.png").is_file()
