"""Convergence end to end on the local default: a launch with experiment.validation=true and
experiment.epochs=2 -> the jobs -> evaluation rows -> ``campaign harvest --table convergence``
(table, figures whose data are the table's, CSV); and a job that cannot reach its store
spools its evaluation rows, which ``campaign ingest`` applies."""

from __future__ import annotations

import csv
import io
import sqlite3
import time

import pytest

pytest.importorskip("torch")
pytest.importorskip("timm")
pytest.importorskip("torchvision")
pl = pytest.importorskip("polars")

# 40 synthetic training images (a test split of 8: a fifth), 4 per GPU: 10 iterations per
# epoch on 1 GPU, 5 on 2; 2 epochs, 1 warm-up iteration among them.
TINY_DATA = ["dataset=synthetic", "dataset.length=40", "experiment=smoke", "experiment.images_per_gpu=4",
             "experiment.validation=true", "experiment.epochs=2"]
FROZEN = ["trainer=frozen_backbone", "trainer.params.backbone=squeezenet1_0",  # its study head: linear
          "trainer.params.image_size=32"]


def _csv(text: str) -> list[dict]:
    return list(csv.DictReader(io.StringIO(text)))


def _num(v: str):
    return None if v == "" else float(v)


def _expected_epoch_losses(db, gpus: int) -> dict[int, float]:
    """Hand count from the iteration table: each iteration's loss averaged over ranks, then
    over the epoch's iterations (40 images / (4 x gpus) per epoch)."""
    per_epoch = 40 // (4 * gpus)
    rows = db.execute("select i.iter, avg(i.loss) from iteration i join attempt a on a.id = i.attempt_id "
                      "join point p on p.id = a.point_id where p.gpus = ? group by i.iter order by i.iter",
                      (gpus,)).fetchall()
    assert [r[0] for r in rows] == list(range(2 * per_epoch))
    losses = [r[1] for r in rows]
    return {e: sum(losses[e * per_epoch:(e + 1) * per_epoch]) / per_epoch for e in (0, 1)}


@pytest.mark.slow
def test_vit_validation_and_epochs_through_harvest_figures_and_csv(ws):
    res = ws.launch("-m", "platform=local", "gpus=1,2", "trainer=vit", "trainer.params.model=vit_tiny", *TINY_DATA)
    assert res.returncode == 0, res.stderr
    done = ws.campaign("status", "--wait", "--interval", "0.5", "--timeout", "240", timeout=300)
    assert done.returncode == 0 and "2 completed" in done.stdout, done.stdout + done.stderr
    db = sqlite3.connect(ws.db)
    # one evaluation row per epoch per point, the whole test split (8 images) whatever the ranks
    evals = db.execute("select p.gpus, e.epoch, e.images, e.loss, e.accuracy from evaluation e "
                       "join attempt a on a.id = e.attempt_id join point p on p.id = a.point_id "
                       "order by p.gpus, e.epoch").fetchall()
    assert [(g, e, n) for g, e, n, _, _ in evals] == [(1, 0, 8), (1, 1, 8), (2, 0, 8), (2, 1, 8)]
    # accuracy is right answers over 8 images: a multiple of 1/8
    assert all(0 <= acc <= 1 and abs(acc * 8 - round(acc * 8)) < 1e-9 for *_, acc in evals)

    out = ws.campaign("harvest", "--table", "convergence", "--to", "csv")
    assert out.returncode == 0, out.stderr
    table = _csv(out.stdout)
    for gpus, per_epoch in ((1, 10), (2, 5)):
        mine = [r for r in table if r["gpus"] == str(gpus)]
        epochs = [r for r in mine if r["unit"] == "epoch"]
        windows = [r for r in mine if r["unit"] == "window"]
        assert [(r["epoch"], r["iterations"]) for r in epochs] == [("0", str(per_epoch)), ("1", str(2 * per_epoch))]
        assert windows[-1]["iterations"] == str(2 * per_epoch) and len(windows) == 2 * per_epoch  # <= 20: one each
        want = _expected_epoch_losses(db, gpus)
        stored = {e: (loss, acc) for g, e, _, loss, acc in evals if g == gpus}
        for r in epochs:
            e = int(r["epoch"])
            assert _num(r["loss"]) == pytest.approx(want[e])
            assert (_num(r["test_loss"]), _num(r["test_accuracy"]), r["test_images"]) == (
                pytest.approx(stored[e][0]), pytest.approx(stored[e][1]), "8")
            assert 0.0 <= _num(r["train_accuracy"]) <= 1.0
        # wall time only grows and the last window ends where the last epoch does
        walls = [_num(r["wall_s"]) for r in windows]
        assert walls == sorted(walls) and walls[-1] == pytest.approx(_num(epochs[-1]["wall_s"]))

    figs = ws.path / "figs"
    plots = ws.campaign("harvest", "--table", "convergence", "--plots", str(figs))
    assert plots.returncode == 0, plots.stderr
    assert sorted(p.name for p in figs.iterdir()) == sorted(
        f"loss_{k}.{ext}" for k in ("epochs", "iterations", "wall_time") for ext in ("png", "svg"))
    _figures_draw_the_table(ws, table)


def _figures_draw_the_table(ws, table: list[dict]) -> None:
    """The figures' lines are the CSV's rows: the same code path, drawn in this process."""
    from campaign.harvest.convergence import convergence_table
    from campaign.harvest.plots_convergence import loss_epochs_figure, loss_iterations_figure, loss_time_figure
    from campaign.store import open_store

    with open_store(ws.store_url, readonly=True) as store:
        df, _ = convergence_table(store, store.resolve_campaign(None))
    checks = ((loss_iterations_figure, "window", "iterations", "loss"), (loss_time_figure, "window", "wall_s", "loss"),
              (loss_epochs_figure, "epoch", "epoch", "loss"), (loss_epochs_figure, "epoch", "epoch", "test_loss"))
    for make, unit, x, y in checks:
        fig = make(df)
        lines = [ln for ln in fig.axes[0].get_lines() if (ln.get_linestyle() == "--") == (y == "test_loss")]
        want = []
        for gpus in ("1", "2"):
            rows = [r for r in table if r["unit"] == unit and r["gpus"] == gpus]
            want.append(([_num(r[x]) for r in rows], [_num(r[y]) for r in rows]))
        got = [([float(v) for v in ln.get_xdata()], [float(v) for v in ln.get_ydata()]) for ln in lines]
        assert [(pytest.approx(xs), pytest.approx(ys)) for xs, ys in want] == got, (make.__name__, y)


@pytest.mark.slow
def test_a_job_that_cannot_reach_its_store_spools_its_evaluation_rows_and_ingest_applies_them(ws):
    res = ws.launch("-m", "platform=local", "gpus=1", "store.busy_timeout_s=0.5", *FROZEN, *TINY_DATA)
    assert res.returncode == 0, res.stderr
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and ws.query("select state from point")[0][0] != "running":
        time.sleep(0.1)
    lock = sqlite3.connect(ws.db, timeout=30, check_same_thread=False)
    lock.execute("BEGIN EXCLUSIVE")  # the store is out of reach from now until the job has ended
    spool = next(ws.results.glob("jobs/*/")) / "spool"
    while time.monotonic() < deadline and not list(spool.glob("*.jsonl")):
        time.sleep(0.2)
    time.sleep(3)  # let the job finish writing its spool
    lock.rollback()
    lock.close()
    wait = ws.campaign("status", "--wait", "--interval", "0.5", "--timeout", "120")
    assert wait.returncode == 1 and "1 point(s): 1 spooled" in wait.stdout, wait.stdout + wait.stderr
    assert ws.query("select count(*) from evaluation")[0][0] == 0
    (path,) = spool.glob("*.jsonl")
    assert '"evaluation"' in path.read_text()
    ing = ws.campaign("ingest")
    assert ing.returncode == 0 and "ingested 1 spool file(s)" in ing.stdout, ing.stdout + ing.stderr
    assert ws.query("select epoch, split, images from evaluation order by epoch") == [(0, "test", 8), (1, "test", 8)]
    out = ws.campaign("harvest", "--table", "convergence", "--to", "csv")
    assert out.returncode == 0, out.stderr
    epochs = [r for r in _csv(out.stdout) if r["unit"] == "epoch"]
    assert [(r["epoch"], r["iterations"], r["test_images"]) for r in epochs] == [("0", "10", "8"), ("1", "20", "8")]
    assert ws.campaign("ingest").stdout.startswith("ingested 0 spool file(s)")  # exactly once
