"""Issue #48: every stored column of the wrong type, shape or size, in every read command,
is one line, never a traceback, and the store is left byte for byte as it was.

One template store is made once: test_states.build's campaign, every table given rows (a
sampled point's iterations, profiler windows, engine phases, evaluations, heartbeats of a
running attempt, provenance with a container image, checkpoint segments) and a point
waiting for room (status estimates it). Each case is a copy of it with one column of one
table rewritten in every row (the first row alone where the schema refuses it in every
row: a unique key), as someone who can write a shared store would leave it, in one of
four kinds:

- ``type``: a value of another type (text in a number column, a blob in a text column, a
  JSON string where an object or list belongs);
- ``null``: NULL (a column the schema holds NOT NULL is skipped: SQLite refuses it);
- ``nested``: JSON nested where a value belongs (in a JSON column: its every leaf made
  ``{"a": [1, {"b": null}]}``; elsewhere that text);
- ``oversize``: a ``[{},{},...]`` longer than the bound on what the store's JSON functions
  may parse (``CAMPAIGN_JSON_MAX_MEMORY_MB`` lowered to 1 MiB: 12,787 characters) and
  than any text a read command shows.

The read commands run in this process (``campaign.cli.main``; a fresh process each would
take an hour). ``READERS`` names the commands that read each table (heartbeats: status;
the rows harvest aggregates: harvest, plan and report; the rest: all of them). Every
column in every kind against every command that reads its table is ~2,900 runs, 4 CPU
minutes here: too slow for the suite. So each (column, kind) runs against one of its
table's readers, in turn (every column meets several commands over its kinds, every
command many columns: ~470 runs, ~40 CPU seconds); ``CAMPAIGN_FUZZ_FULL=1`` runs the full
cross product. Each run ends with an exit status
of its documented set (0, 1 where nothing completed to harvest or plan, 2 for a store it
cannot use, with its one ``error:`` line last), no traceback, no line of stderr that is
not a line of its own (a traceback's frames are indented), and the store unchanged.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import sqlite3
from pathlib import Path

import pytest

from campaign_sql.schema import metadata

STATUS = [("status",), ("status", "--json")]
HARVEST = [("harvest",), ("harvest", "--table", "all", "--to", "json"), ("harvest", "--table", "attempts", "--to", "csv"),
           ("harvest", "--table", "convergence", "--to", "markdown"), ("harvest", "--to", "csv"), ("plan",),
           ("report", "--out", "{tmp}/report.html")]
ALL = STATUS + HARVEST
READERS = {  # table -> the read commands that read it
    "meta": ALL, "campaign": ALL, "point": ALL, "attempt": ALL,
    "progress": STATUS,  # heartbeats: what status shows of a running point
    "rank_timing": HARVEST, "iteration": HARVEST, "profile": HARVEST, "breakdown": HARVEST, "evaluation": HARVEST,
}
KINDS = ("type", "null", "nested", "oversize")
OVERSIZE = "[" + "{}," * 13_333 + "{}]"  # 40,002 characters
NESTED = {"a": [1, {"b": None}]}
EXITS = {0, 1, 2}


def _nested(value):
    if isinstance(value, dict):
        return {k: _nested(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_nested(v) for v in value]
    return NESTED


def _template(results: Path) -> Path:
    """test_states.build's campaign with a row in every table (module docstring)."""
    from test_states import NOW, build

    info = build(f"sqlite:///{results}/campaign.db", results)
    ids, db = info["ids"], results / "campaign.db"
    con = sqlite3.connect(db)
    a0, a1 = (con.execute("SELECT id FROM attempt WHERE point_id = ?", (ids[i],)).fetchone()[0] for i in (0, 1))
    provenance = {"host": "n1", "slurm_nodelist": "n1", "container": {"image": "/img/x.sif", "image_sha256": "ab" * 32}}
    con.execute("UPDATE attempt SET provenance = ?, origin = 'launch', overrides = ?, submitted_at = ?, "
                "node_list = 'n1', job_id = '1', world_size = 1, reason = 'ok'",
                (json.dumps(provenance), json.dumps(["trainer.lr=0.1"]), NOW - 70))
    extra = {"startup_s": 1.5, "precision": "fp32", "math": "tf32", "achieved_tflops": 1.0, "mfu": 0.1,
             "peak_tflops": 10.0, "peak_memory_source": "torch", "sample_transient_s": 0.1,
             "sample_transient_iterations": 1, "sample_check_s": 0.1, "exposed_comm_s": 0.0,
             "epochs": [{"epoch": 0, "train_accuracy": 0.5}],
             "checkpoint": {"segments": [{"attempt": 0, "first_iter": 0, "end_iter": 8, "gap_before_s": None,
                                          "wall_s": 1.0}], "resumed": 0, "gap_s": 0.0, "save_s": 0.1}}
    con.execute("UPDATE rank_timing SET extra = ?, host = 'n1', device = 'cpu', warmup_s = 0.5, iter_p95_s = 0.2, "
                "images_per_s = 10.0, final_loss = 1.0, data_wait_s = 0.1, compute_s = 0.5, comm_s = 0.1, "
                "peak_memory_bytes = 1e6, flops_per_iter = 1e9, trainable_params = 100", (json.dumps(extra),))
    con.execute("UPDATE point SET iterations = 16 WHERE id = ?", (ids[1],))  # sampled: 8 of 16 timed
    top_ops = {"kernels": [{"name": "k", "device_s": 0.1}], "operators": [{"name": "op", "cpu_s": 0.1}],
               "trace_file": "t.json.gz", "warning": "w", "wall_s": 2.0}
    for aid in (a0, a1):
        con.executemany("INSERT INTO iteration VALUES (?, 0, ?, ?, 1.0, ?, 0.1, 0.3, 0.4, 0.1, 0.05)",
                        [(aid, i, i < 2, 2.0 - i / 10) for i in range(10)])
        con.execute("INSERT INTO profile VALUES (?, 0, 2, 2.0, 1.0, 1.5, 0.5, 0.75, 0.1, 0.05, ?)",
                    (aid, json.dumps(top_ops)))
        con.executemany("INSERT INTO breakdown VALUES (?, 0, ?, 1.0, 0.1, 0.1, 0.2, 10)",
                        [(aid, "forward"), (aid, "epoch_0"), (aid, "epoch_1")])
        con.execute("INSERT INTO evaluation VALUES (?, 0, 'test', 1.0, 0.5, 100, 1.0)", (aid,))
    # point 4: an attempt running, with heartbeats
    con.execute("INSERT INTO attempt (point_id, attempt_no, state, started_at, job_id) "
                "VALUES (?, 0, 'running', ?, '999999998')", (ids[4], NOW - 50))
    a4 = con.execute("SELECT id FROM attempt WHERE point_id = ?", (ids[4],)).fetchone()[0]
    con.executemany("INSERT INTO progress VALUES (?, 0, ?, ?, ?, 8, 1)",
                    [(a4, s, NOW - 40 + 10 * s, 2 + 2 * s) for s in range(3)])
    # point 6: waiting for room (status estimates it from the campaign's measured rates)
    con.execute("INSERT INTO point (campaign_id, idx, platform, trainer, experiment, dataset, gpus, nodes, repeat, "
                "batch_per_gpu, iterations, overrides, config, executor, state) SELECT campaign_id, 6, platform, "
                "trainer, experiment, dataset, 4, nodes, repeat, batch_per_gpu, iterations, overrides, config, "
                "executor, 'waiting' FROM point WHERE idx = 0")
    con.execute("UPDATE campaign SET overrides = ?, command = 'campaign launch -m gpus=1,2', host = 'h'",
                (json.dumps(["gpus=1,2"]),))
    con.commit()
    con.close()
    return db


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> bytes:
    return _template(tmp_path_factory.mktemp("fuzz-template") / "results").read_bytes()


def _value(column, kind: str):
    """The SQL value of ``kind`` for ``column`` (None: a JSON column's own value, nested)."""
    sql_type = str(column.type)
    if kind == "null":
        return None
    if kind == "oversize":
        return OVERSIZE
    if kind == "nested":
        return None if sql_type == "JSON" else json.dumps(NESTED)
    if sql_type == "JSON":
        return '"str"'
    return b"\xff\x00" if sql_type.startswith(("VARCHAR", "TEXT")) else "abc"


def _mutated(db: Path, template: bytes, table, column, kind: str) -> bool:
    """The template at ``db`` with ``kind`` written into ``table.column``; False where the
    schema refuses it."""
    db.write_bytes(template)
    con = sqlite3.connect(db)
    try:
        if kind == "nested" and str(column.type) == "JSON":
            for rowid, text in con.execute(f'SELECT rowid, "{column.name}" FROM "{table.name}"').fetchall():
                nested = json.dumps(_nested(json.loads(text)) if text is not None else NESTED)
                con.execute(f'UPDATE "{table.name}" SET "{column.name}" = ? WHERE rowid = ?', (nested, rowid))
        else:
            value = _value(column, kind)
            try:
                con.execute(f'UPDATE "{table.name}" SET "{column.name}" = ?', (value,))
            except sqlite3.IntegrityError:  # a unique key: its first row alone
                con.execute(f'UPDATE "{table.name}" SET "{column.name}" = ? WHERE rowid = '
                            f'(SELECT min(rowid) FROM "{table.name}")', (value,))
        con.commit()
        return True
    except sqlite3.IntegrityError:  # NOT NULL, or a type the column refuses (an INTEGER PRIMARY KEY)
        return False
    except sqlite3.DatabaseError:
        return False
    finally:
        con.close()


def _run(argv: list[str]) -> tuple[object, str, str]:
    """``campaign argv`` in this process, as a fresh process would run it (the command's JSON
    budget unspent); its exit status, stdout and stderr."""
    from campaign.cli import main
    from campaign.common import bounded

    bounded.STORED.spent, bounded.STORED.max_bytes = 0, None
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code: object = main(argv)
        except SystemExit as exc:
            code = exc.code
        except BaseException as exc:  # noqa: BLE001  (what escaped the CLI's mapper: a traceback)
            import traceback

            traceback.print_exc(file=err)
            code = f"raised {type(exc).__name__}"
    return code, out.getvalue(), err.getvalue()


def _problem(code: object, out: str, err: str) -> str | None:
    """What is wrong with a command's answer, or None."""
    lines = err.splitlines()
    if code not in EXITS:
        return f"exit {code}"
    if "Traceback" in out + err:
        return "a traceback"
    if any(line[:1].isspace() for line in lines):
        return "a line of stderr that is not a line of its own"
    errors = [line for line in lines if line.startswith("error: ")]
    if code == 2 and (len(errors) != 1 or lines[-1] != errors[0]):
        return "exit 2 without its one error line last"
    if code != 2 and errors:
        return f"an error line with exit {code}"
    return None


@pytest.mark.slow
@pytest.mark.parametrize("table", [t.name for t in metadata.sorted_tables])
def test_every_column_of_every_kind_is_one_line_in_every_read_command(template, tmp_path, table):
    from campaign.common import bounded

    t = metadata.tables[table]
    db, url = tmp_path / "campaign.db", f"sqlite:///{tmp_path}/campaign.db"
    problems, ran = [], 0
    full, readers = os.environ.get("CAMPAIGN_FUZZ_FULL") == "1", READERS[table]
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CAMPAIGN_JSON_MAX_MEMORY_MB", "1")  # the bound on what SQL parses: 12,787 characters
        try:
            for n, (column, kind) in enumerate((c, k) for c in t.columns for k in KINDS):
                if not _mutated(db, template, t, column, kind):
                    continue
                before = hashlib.sha256(db.read_bytes()).digest()
                for command in readers if full else [readers[n % len(readers)]]:
                    argv = [a.format(tmp=tmp_path) for a in command] + ["--store", url]
                    code, out, err = _run(argv)
                    ran += 1
                    why = _problem(code, out, err)
                    if why:
                        problems.append(f"{table}.{column.name} {kind}: campaign {' '.join(command)}: {why}: "
                                        f"{err.strip().splitlines()[-1:] or out[-200:]}")
                if hashlib.sha256(db.read_bytes()).digest() != before:
                    problems.append(f"{table}.{column.name} {kind}: the store changed")
        finally:
            bounded.STORED.spent, bounded.STORED.max_bytes = 0, None
    assert ran and not problems, "\n".join(problems)


def test_a_figure_stored_as_nested_json_reads_as_absent_not_as_zero(template, tmp_path):
    """SQLite reads a JSON path that holds an object as the object's text, which a cast
    to a number makes 0: the figure is read only where it is of its kind."""
    import csv

    db = tmp_path / "campaign.db"
    db.write_bytes(template)
    con = sqlite3.connect(db)
    con.execute("""UPDATE rank_timing SET extra = json_set(extra, '$.achieved_tflops', json('{"a": 1}'),
                                                           '$.precision', json('[1]'))""")
    con.commit()
    con.close()
    code, out, err = _run(["harvest", "--table", "hardware", "--to", "csv", "--store", f"sqlite:///{db}"])
    assert code == 0, err
    rows = list(csv.DictReader(io.StringIO(out)))
    assert [(r["gpus"], r["achieved_tflops"], r["precision"]) for r in rows] == [("1", "", ""), ("2", "", "")]


# ---------------------------------------------------------------- the issue's cases, each by its line

CID = "20260101-000000-aaaa"
CASES = {  # the issue's tracebacks: (the rewrite, the commands, the warning each prints)
    "config-str": ("UPDATE point SET config = '\"str\"' WHERE idx = 0", [("status",), ("harvest",)],
                   f"warning: point #0 (id 1) of campaign {CID}: config='str' is not a JSON object; left out"),
    "wall-s-abc": ("UPDATE rank_timing SET wall_s = 'abc' WHERE attempt_id = 1",
                   [("harvest",), ("plan",), ("report", "--out", "{tmp}/r.html")],
                   f"warning: point #0 (id 1) of campaign {CID}: its rank_timing.wall_s holds text, not a number; "
                   "left out"),
    "started-at-x": ("UPDATE attempt SET started_at = 'x' WHERE id = 3", [("report", "--out", "{tmp}/r.html")],
                     f"warning: attempt 0 of point #2 of campaign {CID}: started_at='x' is not a unix time (seconds "
                     "from 1970 up to the year 9999); left out"),
    "checkpoint-shape": ("UPDATE rank_timing SET extra = json_set(extra, '$.checkpoint.segments', json('[[1]]')) "
                         "WHERE attempt_id = 1", [("report", "--out", "{tmp}/r.html"), ("harvest", "--table", "attempts")],
                         f"warning: point #0 (id 1) of campaign {CID}: its rank_timing.extra's checkpoint segments are "
                         "not as a job writes them; its attempts shown without them"),
}


@pytest.mark.parametrize("case", CASES)
def test_the_issues_tracebacks_are_one_warning_line(template, tmp_path, case):
    statement, commands, warning = CASES[case]
    db = tmp_path / "campaign.db"
    db.write_bytes(template)
    con = sqlite3.connect(db)
    assert con.execute(statement).rowcount == 1
    con.commit()
    con.close()
    before = db.read_bytes()
    for command in commands:
        code, out, err = _run([a.format(tmp=tmp_path) for a in command] + ["--store", f"sqlite:///{db}"])
        assert (code, _problem(code, out, err)) == (0, None), err
        assert warning in err.splitlines(), err
    assert db.read_bytes() == before
