"""Files campaign writes into a folder others may share never follow a link nor block on
a FIFO; files it reads there are opened without blocking (issue 41, findings 3, 4, 12).

A group member who can write a shared results folder plants, before a command runs, a
symbolic link to a victim file (which a plain ``open(path, "w")`` overwrites) or a FIFO
(which a plain open waits on forever) where campaign writes or reads: Hydra's record of
the sweep (``.hydra/multirun.yaml``), ``harvest --out``, ``report --out``, the figures of
``--plots DIR``, an image's record (``<image>.sha256``). Each test asserts the victim
unchanged and a one-line refusal (exit 2) or a safe result, within a timeout, so that a
regression fails instead of hanging.
"""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path

import pytest

from campaign.common.errors import ConfigError
from campaign.common.outfile import check_output, write_output
from conftest import TINY
from test_states import build

THEIRS = "the victim's own bytes\n"
FAST_S = 30  # every command here answers in seconds; a hang fails the test at this bound


def _victim(tmp_path: Path) -> Path:
    victim = tmp_path / "victim.txt"
    victim.write_text(THEIRS)
    return victim


def _plant(path: Path, what: str, victim: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if what == "symlink":
        path.symlink_to(victim)
    else:
        os.mkfifo(path)
    return path


def _one_error(res, text: str, notes: bool = False) -> None:
    """Exit 2 and the one line ``error: text``; ``notes``: after harvest's notes on the
    campaign read (the figures' targets are known once its tables are built)."""
    assert res.returncode == 2, res.stdout + res.stderr
    assert "Traceback" not in res.stderr, res.stderr
    if notes:
        assert [ln for ln in res.stderr.splitlines() if "error" in ln] == [f"error: {text}"], res.stderr
        assert res.stderr.endswith(f"error: {text}\n"), res.stderr
    else:
        assert res.stderr == f"error: {text}\n", res.stderr


KINDS = {"symlink": "a symbolic link", "fifo": "a FIFO"}


# ---------------------------------------------------------------- the one writing helper

def test_write_output_refuses_what_is_not_a_regular_file_and_writes_nothing(tmp_path):
    victim = _victim(tmp_path)
    _plant(tmp_path / "link.csv", "symlink", victim)
    _plant(tmp_path / "fifo.csv", "fifo", victim)
    (tmp_path / "folder.csv").mkdir()
    started = time.monotonic()
    for name, what in (("link.csv", "a symbolic link"), ("fifo.csv", "a FIFO"), ("folder.csv", "a directory")):
        with pytest.raises(ConfigError) as exc:
            write_output(tmp_path / name, b"mine")
        assert str(exc.value) == (f"--out {tmp_path / name}: is {what}, not a regular file; "
                                  "remove it or choose another path")
    assert time.monotonic() - started < 5
    assert victim.read_text() == THEIRS
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fifo.csv", "folder.csv", "link.csv", "victim.txt"]


def test_write_output_replaces_a_regular_file_and_a_link_planted_while_it_writes(tmp_path):
    victim = _victim(tmp_path)
    out = tmp_path / "r.html"
    out.write_text("last run's page")
    assert write_output(out, b"new page") == out and out.read_bytes() == b"new page"  # as before: replaced
    assert stat.S_IMODE(out.stat().st_mode) == 0o666 & ~_umask()

    def plant_then_write(fh):  # someone swaps the target for a link after the first check
        out.unlink()
        out.symlink_to(victim)
        fh.write(b"mine")

    with pytest.raises(ConfigError):  # checked again before the rename: refused, nothing left behind
        write_output(out, plant_then_write)
    assert victim.read_text() == THEIRS and out.is_symlink()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.html", "victim.txt"]


def test_an_output_folder_that_is_a_link_is_the_users_own_choice(tmp_path):
    """--out's folder may be a link (a scratch file system linked from home): the folders
    above an output are trusted to their owner. A caller in a shared results folder
    (parent_link=False: Hydra's record) refuses one."""
    (tmp_path / "scratch").mkdir()
    (tmp_path / "home").symlink_to(tmp_path / "scratch")
    assert write_output(tmp_path / "home" / "a.csv", b"x").read_bytes() == b"x"
    with pytest.raises(ConfigError) as exc:
        write_output(tmp_path / "home" / "b.csv", b"x", parent_link=False)
    assert "its folder" in str(exc.value) and "is a symbolic link" in str(exc.value)
    assert not (tmp_path / "scratch" / "b.csv").exists()


def test_the_store_probe_never_blocks_on_a_fifo(tmp_path):
    """check_output's SQLite probe of a companion's database (x.db for x.db-wal) opened
    x.db blocking: a FIFO there hung harvest --out x.db-wal."""
    os.mkfifo(tmp_path / "x.db")
    started = time.monotonic()
    assert check_output(tmp_path / "x.db-wal") == tmp_path / "x.db-wal"
    assert time.monotonic() - started < 5


def _umask() -> int:
    old = os.umask(0)
    os.umask(old)
    return old


# ---------------------------------------------------------------- harvest --out, report --out, --plots

@pytest.fixture
def store(ws):
    return build(ws.store_url, ws.results)


@pytest.mark.parametrize("what", ["symlink", "fifo"])
@pytest.mark.parametrize("command", [("harvest", "--to", "csv"), ("report",)], ids=["harvest", "report"])
def test_out_onto_a_planted_link_or_fifo_is_refused_in_one_line(ws, store, tmp_path, command, what):
    victim = _victim(tmp_path)
    out = _plant(ws.results / "shared" / f"out.{'csv' if command[0] == 'harvest' else 'html'}", what, victim)
    res = ws.campaign(*command, "--out", str(out), timeout=FAST_S)  # a FIFO hung here: TimeoutExpired
    _one_error(res, f"--out {out}: is {KINDS[what]}, not a regular file; remove it or choose another path")
    assert victim.read_text() == THEIRS
    assert out.is_symlink() if what == "symlink" else stat.S_ISFIFO(out.lstat().st_mode)  # left as it was


def test_figures_never_follow_a_link_planted_in_the_plots_folder(ws, store, tmp_path):
    victim = _victim(tmp_path)
    plots = ws.results / "plots"
    link = _plant(plots / "speedup.png", "symlink", victim)
    res = ws.campaign("harvest", "--plots", str(plots), timeout=120)
    _one_error(res, f"--plots {link}: is a symbolic link, not a regular file; remove it or choose another path",
               notes=True)
    assert victim.read_text() == THEIRS and link.is_symlink()
    assert sorted(p.name for p in plots.iterdir()) == ["speedup.png"]  # every target checked before any is written
    link.unlink()
    res = ws.campaign("harvest", "--plots", str(plots), timeout=120)
    assert res.returncode == 0, res.stderr
    assert (plots / "speedup.png").read_bytes().startswith(b"\x89PNG") and (plots / "speedup.svg").is_file()
    assert not [p for p in plots.iterdir() if p.name.endswith(".tmp")]


# ---------------------------------------------------------------- Hydra's record of the sweep

def test_a_launch_refuses_a_planted_multirun_yaml_and_stores_nothing(ws, tmp_path):
    """Chosen: refused in one line before anything is stored (the record of a campaign is
    written once its points are stored; a link found then would only be a warning)."""
    victim = _victim(tmp_path)
    record = _plant(ws.results / ".hydra" / "multirun.yaml", "symlink", victim)
    res = ws.launch("-m", "gpus=1", *TINY, timeout=FAST_S * 4)
    _one_error(res, f"results_dir's Hydra record {record}: is a symbolic link, not a regular file; remove it or "
                    "choose another results_dir")
    assert victim.read_text() == THEIRS and not ws.db.exists() and not (ws.results / "jobs").exists()


def test_a_launch_refuses_a_hydra_folder_that_is_a_link(ws, tmp_path):
    (tmp_path / "elsewhere").mkdir()
    ws.results.mkdir()
    (ws.results / ".hydra").symlink_to(tmp_path / "elsewhere")
    res = ws.launch("-m", "gpus=1", *TINY, timeout=FAST_S * 4)
    _one_error(res, f"results_dir's Hydra record folder {ws.results / '.hydra'} is a symbolic link, not a folder; "
                    "remove it or choose another results_dir")
    assert list((tmp_path / "elsewhere").iterdir()) == [] and not ws.db.exists()


def test_the_record_is_written_through_the_helper(tmp_path):
    """save_multirun_yaml itself (what runs once the campaign is stored) never follows a link."""
    from omegaconf import OmegaConf

    from campaign.launch.sweep import save_multirun_yaml

    victim = _victim(tmp_path)
    record = _plant(tmp_path / "results" / ".hydra" / "multirun.yaml", "symlink", victim)
    with pytest.raises(ConfigError):
        save_multirun_yaml(OmegaConf.create({"a": 1}), record)
    assert victim.read_text() == THEIRS
    record.unlink()
    save_multirun_yaml(OmegaConf.create({"a": 1, "url": "postgresql://u:s3cret@h/db"}), record)
    assert record.read_text() == "a: 1\nurl: postgresql://u:***@h/db\n"


# ---------------------------------------------------------------- an image's record

def test_a_fifo_as_an_images_record_is_taken_as_absent_without_blocking(ws, tmp_path):
    from test_arch import make_image

    img = make_image(tmp_path / "img", "campaign.sif", "13.0", "sm_80")
    side = Path(str(img) + ".sha256")
    side.unlink()
    os.mkfifo(side)
    ws.away_from_slurm()
    started = time.monotonic()
    res = ws.launch("platform=a100", "gpus=1", "trainer=sleep", "container=apptainer", f"container.image={img}",
                    "--dry-run", timeout=FAST_S * 4)
    assert time.monotonic() - started < FAST_S * 4
    warning = f"warning: container image record {side} is not a regular file (a FIFO); not read (taken as absent)"
    assert res.stderr.count(warning) == 1, res.stderr
    assert "Traceback" not in res.stderr, res.stderr
    # the job's start reads it by the same rule (image_provenance): the digest is then computed
    from campaign.catalogue.container import _sidecar_sha256, file_sha256

    assert _sidecar_sha256(str(img)) is None
    with pytest.raises(OSError):  # a FIFO as the image itself: refused at once, never hashed
        file_sha256(str(side))
    assert time.monotonic() - started < FAST_S * 4
