"""A campaign reference, a job to signal and the folder a job imports from, each as a
member of a group who can write the shared store or folder would craft them (issue #41):

- a campaign named like another campaign's id prefix never takes a write command's
  reference: ``campaign cancel PREFIX`` refuses, naming both, and kills nothing; the
  exact id cancels the right one;
- cancel signals only jobs tied to the campaign (its own job folder, the job's own
  submission in it): a point whose job folder is NULL or another's is left alone;
- a job never imports from the folder the launch ran from (``-P``, ``PYTHONSAFEPATH``);
- a store URL that does not parse is never echoed with its password.
"""

from __future__ import annotations

import json
import os
import sqlite3
import sys
import time

import pytest

from campaign.store import open_store
from conftest import TINY, campaign_id_from, point_config, until

SLEEPY = ["-m", "gpus=1", "trainer=sleep", "experiment.base_iterations=1000000", "experiment.warmup_iterations=0",
          "experiment.until_time_limit=true"]


def _pids_with(text: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as fh:
                    if text.encode() in fh.read():
                        found.append(int(entry))
            except OSError:
                pass
    return found


def _row(idx, **kw):
    row = dict(idx=idx, platform="local", trainer="synthetic", experiment="smoke", dataset="synthetic", gpus=1,
               nodes=1, repeat=0, executor="local", state="completed", iterations=8, batch_per_gpu=4, job_id=None,
               job_folder=None, reason=None, log_path=None, config=point_config("gpus=1"), submitted_at=time.time())
    row.update(kw)
    return row


@pytest.mark.slow
def test_cancel_by_a_prefix_another_campaign_is_named_refuses_and_the_exact_id_cancels_the_right_one(ws):
    ids = []
    try:
        for _ in range(2):
            ids.append(campaign_id_from(ws.launch(*SLEEPY).stdout))
        _reproduction(ws, *ids)
    finally:  # no job outlives the test, whatever failed
        for cid in ids:
            ws.campaign("cancel", cid)


def _reproduction(ws, a, b):
    folder_a, folder_b = (str((ws.results / "jobs" / c).resolve()) for c in (a, b))
    prefix = a[:-1]  # unique to a among the ids (the reproduction's "20261128-102518")
    until(lambda: _pids_with(folder_a) and _pids_with(folder_b), 60, "both jobs started")
    (b_job,) = ws.query("select job_id from point where campaign_id = ?", b)[0]
    # a member names their campaign b like a's id prefix, and adds a campaign whose points
    # name b's job: without a job folder, and with b's folder
    con = sqlite3.connect(ws.db)
    con.execute("update campaign set name = ? where id = ?", (prefix, b))
    con.commit()
    con.close()
    crafted = "20260101-000000-cccc"
    with open_store(ws.store_url) as s:
        s.register({"id": crafted, "created_at": time.time() - 60, "name": "crafted", "results_dir": str(ws.results)},
                   [_row(0, state="running", job_id=b_job), _row(1, state="running", job_id=b_job, job_folder=folder_b)])

    refused = ws.campaign("cancel", prefix)
    assert refused.returncode == 2 and refused.stdout == "", refused.stdout + refused.stderr
    assert refused.stderr == (f"error: campaign cancel '{prefix}': '{prefix}' matches 2 campaigns: "
                              f"{_order(ws, a, prefix)}; nothing done: give the exact id (campaign cancel {a})\n")
    time.sleep(1)
    assert _pids_with(folder_a) and _pids_with(folder_b)  # nothing killed
    assert "cancelled" not in {st for (st,) in ws.query("select state from point where campaign_id in (?, ?)", a, b)}
    # a read command goes on with the rule's winner (the id prefix), and says so
    status = ws.campaign("status", prefix)
    assert status.returncode == 0 and status.stdout.startswith(f"campaign {a}"), status.stdout + status.stderr
    assert f"note: '{prefix}' matches 2 campaigns" in status.stderr

    untied = ws.campaign("cancel", crafted)  # points naming b's job: never signalled
    assert untied.returncode == 0, untied.stderr
    assert untied.stdout == f"campaign {crafted}: cancelled 0 point(s); 2 not signalled (their job is not tied to it)\n"
    assert untied.stderr == (f"warning: 2 point(s) not signalled, their job not tied to campaign {crafted} "
                             f"(#0: no job folder stored; #1: its job folder {folder_b} is not the campaign's "
                             f"({ws.results / 'jobs' / crafted}))\n")
    time.sleep(1)
    assert _pids_with(folder_b)

    done = ws.campaign("cancel", a)
    assert done.returncode == 0 and done.stdout == f"campaign {a}: cancelled 1 point(s)\n", done.stdout + done.stderr
    until(lambda: not _pids_with(folder_a), 30, "a's job stopped")
    assert _pids_with(folder_b)  # b still runs (or waits for the machine)
    assert ws.campaign("cancel", b).returncode == 0  # by its exact id, whatever its name
    until(lambda: not _pids_with(folder_b), 30, "b's job stopped")


def _order(ws, a, prefix):
    """The candidates as the refusal lists them: latest first."""
    rows = ws.query("select id from campaign where id like ? or name = ? order by created_at desc, id desc",
                    prefix + "%", prefix)
    return ", ".join(f"{c} ({'its id' if c == a else 'its name'})" for (c,) in rows)


def test_another_users_campaign_is_said_and_needs_its_exact_id_to_write(ws):
    cid = "20260101-000000-dddd"
    with open_store(ws.store_url, create=True) as s:
        s.register({"id": cid, "created_at": time.time() - 60, "name": "theirs", "results_dir": str(ws.results),
                    "user": "someone-else"}, [_row(0)])
    me = __import__("getpass").getuser()
    refused = ws.campaign("cancel", "theirs")
    assert refused.returncode == 2 and refused.stderr == (
        f"error: campaign cancel 'theirs': campaign {cid} is someone-else's, not yours ({me}); nothing done: give "
        f"the exact id (campaign cancel {cid})\n")
    for command in ("resume", "ingest"):
        res = ws.campaign(command, "theirs")
        assert res.returncode == 2 and res.stderr.startswith(f"error: campaign {command} 'theirs': "), res.stderr
    status = ws.campaign("status", "theirs")
    assert status.returncode == 0 and f"note: campaign {cid} is someone-else's, not yours ({me})\n" in status.stderr
    exact = ws.campaign("cancel", cid)
    assert exact.returncode == 0 and exact.stdout == f"campaign {cid}: cancelled 0 point(s)\n"
    assert exact.stderr == f"note: campaign {cid} is someone-else's, not yours ({me})\n"


def test_a_job_never_imports_from_the_folder_the_launch_ran_from(ws):
    marker = ws.path / "planted-ran"
    planted = ws.path / "submitit"
    planted.mkdir()
    (planted / "__init__.py").write_text(f"open({str(marker)!r}, 'w').write('imported')\n"
                                         "raise RuntimeError('planted submitit imported')\n")
    # the launcher itself runs with -P (a user's `campaign launch` script does not import from
    # the folder either); what is checked is the job: its controller and ranks
    res = ws.run(sys.executable, "-P", "-m", "campaign.launch", "gpus=1", "trainer=sleep",
                 "experiment.base_iterations=4", "experiment.warmup_iterations=0", timeout=180)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "1 point(s): 1 completed" in res.stdout
    assert not marker.exists()


def test_the_ranks_python_runs_with_safe_path():
    from campaign.backends import sbatch as sb

    assert sb.submit_command("/r/jobs/x", None).split()[1:3] == ["-P", "-u"]
    assert sb.rank_python(None).endswith(" -P")
    assert sb.SAFE_PATH_ENV == {"PYTHONSAFEPATH": "1"}
    assert sb.submit_command("/r/jobs/x", "apptainer exec img.sif python").startswith(
        "apptainer exec img.sif python -u")  # a container's Python: PYTHONSAFEPATH, not a flag it may not know


@pytest.mark.parametrize("url, shown", [
    ("postgresql//u:pass/word@h/db", "postgresql//u:***@h/db"),
    ("postgresql:/u:pass/word@h/db", "postgresql:/u:***@h/db"),
    ("postgresql//u:pass word@h/db", "postgresql//u:***@h/db"),
    ("postgresql://u:pass/word@h/db", "postgresql://u:***@h/db"),
    ("sqlite:///results/campaign.db", "sqlite:///results/campaign.db"),
])
def test_a_store_url_that_does_not_parse_is_shown_without_its_password(url, shown):
    from campaign.common.redact import redact, redact_url

    assert redact_url(url) == shown
    assert redact("img/x:1.0@sha256:ab") == "img/x:1.0@sha256:ab"  # generic text keeps its '@'


def test_the_cli_never_echoes_an_unparsable_urls_password(ws):
    res = ws.campaign("status", "--store", "postgresql//u:pass/word@h/db")
    assert res.returncode == 2
    assert "pass/word" not in res.stdout + res.stderr and "word" not in res.stderr
    assert res.stderr == ("error: store URL 'postgresql//u:***@h/db' is not a database URL; use e.g. "
                          "sqlite:///results/campaign.db\n")
    assert json.dumps(res.stdout) == '""'
