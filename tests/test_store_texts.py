"""A launch's store writes made cheap a point (issue 50), with nothing stored or signed changed:
the JSON texts ``Store.register`` signs and stores, made from the configs' shared sections
(campaign/common/jsontext.py), are byte for byte ``json.dumps``'s; the job signature's text
is ``canonical``'s; ``mark_submitted`` (two statements) and ``open_attempts`` (no per-id
query on a launch's fresh points) record what they did."""

from __future__ import annotations

import enum
import hashlib
import hmac
import json
import math
import sqlite3

import pytest

from campaign.common.jsontext import Texts
from campaign.common.signing import canonical, job_payload, payload, sign, sign_job, signing_key, verify, verify_job
from campaign.store.store import open_store

STUDIES = ("swinv2_thesis", "dataparallel_a6000", "vit_deepspeed")


class Level(enum.IntEnum):
    HIGH = 3


class Name(str):
    pass


def _canon(doc) -> str:
    return json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


@pytest.fixture(scope="module")
def study_configs() -> dict:
    """The three study presets' composed configs (Hydra's compose, no sweep), redacted as a
    launch stores them: sections shared, the memo's own objects."""
    from hydra import compose, initialize_config_module
    from omegaconf import OmegaConf

    from campaign.catalogue.config import register
    from campaign.common.redact import redact_shared

    try:
        from tests.conftest import hydra_version_base_kept
    except ImportError:  # tests/ on sys.path
        from conftest import hydra_version_base_kept

    register()
    configs = {}
    with hydra_version_base_kept(), initialize_config_module("campaign_conf", version_base="1.3"):
        for study in STUDIES:
            cfg = OmegaConf.to_container(compose(config_name="config", overrides=[f"study={study}"]), resolve=True,
                                         enum_to_str=True)
            cfg.pop("hydra", None)
            configs[study] = redact_shared(cfg)
    return configs


def _rows(config: dict, n: int = 4) -> list[dict]:
    """Point rows as ``PointPlan.store_row`` makes them: a new top level each (results_dir,
    seed), the sections shared."""
    rows = []
    for i in range(n):
        c = dict(config, seed=1000 + i, results_dir=f"/r/{i % 2}")
        rows.append({"idx": i, "repeat": i % 2, "platform": "a100", "executor": "slurm", "batch_per_gpu": 8,
                     "iterations": 10 + i, "overrides": [f"seed={1000 + i}", "gpus=1,2"], "config": c})
    return rows


def test_texts_are_json_dumps_over_the_study_presets(study_configs):
    texts = Texts()  # one for every study and row: its memo is shared as in one register
    for study, config in study_configs.items():
        for row in _rows(config):
            assert texts.stored(row["config"]) == json.dumps(row["config"]), study
            assert texts.canonical(row["config"], 1) == _canon(row["config"]), study
            assert payload("c1", "/r", row, texts) == payload("c1", "/r", row) == canonical(
                {"v": 1, "campaign": "c1", "results_dir": "/r", "config": row["config"], "overrides": row["overrides"],
                 **{k: row[k] for k in ("idx", "repeat", "platform", "executor", "batch_per_gpu", "iterations")}})
            key = b"k" * 32
            # hmac.digest is the signature hmac.new made before: a store signed either way verifies
            assert sign(key, "c1", "/r", row, texts) == hmac.new(key, payload("c1", "/r", row),
                                                                 hashlib.sha256).hexdigest()


ODD = {
    "floats": [0.1, -0.0, 1e300, 1.5e-7, float("nan"), float("inf"), -float("inf"), 3.0],
    "text": ["é", "\u2603 snow", "tab\there", 'quote"back\\slash', "\x00nul", "\U0001f600", ""],
    "nested": [[[]], [{}], [1, [2, [3, None]]], {"b": {"a": [True, False]}}],
    "scalars": [None, True, False, 0, -1, 2**70, Level.HIGH, Name("sub")],
    "int_keys": {10: "ten", 9: "nine", 1: [1]},
    "mixed": {"z": 1, "a": {"y": (1, 2), "x": ()}, "é": "key"},
    "empty": {},
}


@pytest.mark.parametrize("top", [
    {"zz": ODD, "aa": "v", "n": None, "l": [ODD["nested"], (1, "t")], "f": 0.5, "b": True, "e": {}, "i": 7},
    {3: "int keys at the top", 1: ODD, 20: [ODD]},
    {"deep": {"deeper": ODD, "s": "x"}, "sect": ODD["mixed"], "again": ODD["mixed"]},
    {},
    {"k": Level.HIGH, "t": (), "s": Name("x"), "big": 2**64, "neg": -0.0},
])
def test_texts_are_json_dumps_for_odd_values(top):
    texts = Texts()
    for _ in range(2):  # the second from the memo
        for levels in (0, 1, 2, 3):
            assert texts.canonical(top, levels) == _canon(top)
            assert texts.stored(top, levels) == json.dumps(top)
        doc = {"v": 1, "config": top, "overrides": ["a=1", *ODD["text"]], "idx": 1, "l": [1, "a"], "e": []}
        assert texts.canonical(doc) == _canon(doc) and texts.stored(doc, 2) == json.dumps(doc)
        assert texts.stored_value(top).text == json.dumps(top) and texts.stored_value(top) == top


def test_texts_refuse_what_json_refuses():
    for bad in ({"a": {1, 2}}, {"a": {"b": object()}}, {"a": 1, 2: "mixed keys sort"}):
        for levels in (1, 2):
            with pytest.raises(TypeError):
                Texts().canonical(bad, levels)


@pytest.mark.parametrize("values", [
    ("c1", 3, "slurm", "12_3", None),
    ("c\u00e9", 0, "local", "pid 7", "/jobs/\u2603"),
    ("c", True, None, 12, 1.5),
    ("c", [1, {"b": 2, "a": 1}], {"x": None}, float("nan"), Level.HIGH),
    (Name("c"), 2**70, "slurm", "", ""),
])
def test_job_payload_is_canonical(values):
    cid, point_id, executor, job_id, folder = values
    assert job_payload(*values) == canonical({"v": 1, "kind": "job", "campaign": cid, "point": point_id,
                                              "executor": executor, "job_id": job_id, "job_folder": folder})


def _point(idx: int, config: dict) -> dict:
    return {"idx": idx, "platform": "a100", "trainer": "t", "experiment": "e", "dataset": "d", "gpus": 1,
            "nodes": 1, "repeat": 0, "overrides": ["a=1"], "config": config, "executor": "slurm",
            "state": "registered"}


def test_register_stores_json_dumps_text_that_verifies(tmp_path, study_configs):
    shared = study_configs["vit_deepspeed"]
    configs = [dict(shared, results_dir=str(tmp_path)), dict(shared, results_dir=str(tmp_path), seed=12345),
               {"a": {"é": [0.1, None]}, "b": {5: "int key"}, "c": "\u2603"}]
    db = tmp_path / "c.db"
    with open_store(f"sqlite:///{db}", create=True) as s:
        ids = s.register({"id": "c1", "results_dir": str(tmp_path), "created_at": 1.0, "overrides": ["x"]},
                         [_point(i, c) for i, c in enumerate(configs)] + [dict(_point(3, {}), config=None)])
        rows = {r["id"]: r for r in s.points("c1")}
    raw = dict(sqlite3.connect(db).execute("select id, config from point").fetchall())
    key = signing_key()
    for pid, config in zip(ids, configs):
        assert raw[pid] == json.dumps(config)  # what SQLAlchemy's json.dumps stored before
        assert rows[pid]["config"] == json.loads(json.dumps(config))
        assert verify(key, "c1", str(tmp_path), rows[pid])
    assert raw[ids[3]] == "null" and verify(key, "c1", str(tmp_path), rows[ids[3]])


def test_mark_submitted_leaves_what_a_job_moved(tmp_path):
    with open_store(f"sqlite:///{tmp_path / 'c.db'}", create=True) as s:
        ids = s.register({"id": "c1", "results_dir": str(tmp_path), "created_at": 1.0},
                         [_point(i, {"i": i}) for i in range(3)])
        assert s.open_attempts(ids, origin="launch") == {pid: 0 for pid in ids}
        # the second point's job ran before its submission was recorded (a fast scheduler)
        s.set_state(ids[1], "running", "started")
        with s._begin() as conn:
            conn.exec_driver_sql("update attempt set state = 'running' where point_id = ?", (ids[1],))
        s.mark_submitted([{"point_id": pid, "job_id": f"j{pid}", "job_folder": f"/f/{pid}", "log_path": f"/l/{pid}",
                           "attempt_no": 0, "executor": "slurm"} for pid in ids[:2]]
                         + [{"point_id": ids[2], "job_id": "j", "state": "waiting", "reason": "held"}], "c1")
        points = {p["id"]: p for p in s.points("c1")}
        attempts = {a["idx"]: a for a in s.attempts("c1")}
    key = signing_key()
    for i, pid in enumerate(ids):
        p = points[pid]
        assert p["submitted_at"] is not None and p["job_id"] == ("j" if i == 2 else f"j{pid}")
        assert (p["state"], p["reason"]) == [("pending", None), ("running", "started"), ("waiting", "held")][i]
        assert verify_job(key, "c1", p) == (i < 2)  # the third named no executor: unsigned
    assert attempts[0]["state"] == "pending" and attempts[0]["job_id"] == f"j{ids[0]}"
    assert attempts[1]["state"] == "running" and attempts[1]["job_id"] == f"j{ids[1]}"
    assert attempts[2]["state"] == "registered" and attempts[2]["job_id"] is None  # no attempt_no given
    assert all(attempts[i]["submitted_at"] is not None for i in (0, 1))
    assert sign_job(key, "c1", ids[0], "slurm", f"j{ids[0]}", f"/f/{ids[0]}") == points[ids[0]]["job_signature"]


def test_open_attempts_numbers_after_earlier_ones_in_the_range(tmp_path):
    with open_store(f"sqlite:///{tmp_path / 'c.db'}", create=True) as s:
        ids = s.register({"id": "c1", "results_dir": str(tmp_path), "created_at": 1.0},
                         [_point(i, {"i": i}) for i in range(4)])
        assert s.open_attempts(ids[1:3], origin="launch") == {ids[1]: 0, ids[2]: 0}
        s.mark_submitted([{"point_id": ids[1], "job_id": "7", "attempt_no": 0}])
        # ids[0] and ids[3] have none, ids[1] a submitted one, ids[2] one still open (kept)
        assert s.open_attempts(ids, origin="retry") == {ids[0]: 0, ids[1]: 1, ids[2]: 0, ids[3]: 0}
        assert s.open_attempts([ids[3]], origin="retry", state="waiting") == {ids[3]: 0}
        assert s.open_attempts([], origin="retry") == {}
        assert [(a["idx"], a["attempt_no"], a["origin"]) for a in s.attempts("c1")] == [
            (0, 0, "retry"), (1, 0, "launch"), (1, 1, "retry"), (2, 0, "launch"), (3, 0, "retry")]


@pytest.mark.postgres
@pytest.mark.parametrize("driver", ["psycopg2", "psycopg"])
def test_the_same_on_postgresql(driver, study_configs, tmp_path):
    """On PostgreSQL, through either driver: the stored config text is json.dumps's, the
    signatures verify, and mark_submitted's CASE guards and open_attempts' probe hold."""
    pytest.importorskip(driver)
    from test_postgres import fresh_database

    with fresh_database() as url:
        url = url.replace("postgresql+psycopg2://", f"postgresql+{driver}://")
        configs = [dict(study_configs["swinv2_thesis"], results_dir=str(tmp_path), seed=i) for i in range(3)]
        with open_store(url, create=True) as s:
            ids = s.register({"id": "c1", "results_dir": str(tmp_path), "created_at": 1.0},
                             [_point(i, c) for i, c in enumerate(configs)])
            assert s.open_attempts(ids, origin="launch") == {pid: 0 for pid in ids}
            s.set_state(ids[1], "running", "started")
            s.mark_submitted([{"point_id": pid, "job_id": f"j{pid}", "attempt_no": 0, "executor": "slurm"}
                              for pid in ids], "c1")
            assert s.open_attempts(ids[:1], origin="retry") == {ids[0]: 1}
            with s.engine.connect() as conn:
                raw = dict(conn.exec_driver_sql("select id, config::text from point").all())
            points = {p["id"]: p for p in s.points("c1")}
        key = signing_key()
        for i, (pid, config) in enumerate(zip(ids, configs)):
            assert raw[pid] == json.dumps(config)
            assert verify(key, "c1", str(tmp_path), points[pid]) and verify_job(key, "c1", points[pid])
            assert points[pid]["state"] == ("running" if i == 1 else "pending")


def test_execute_many_writes_what_sqlalchemy_writes(tmp_path):
    """campaign.store.many on SQLite: the rows SQLAlchemy's executemany writes, the JSON
    columns through the same serializer; a Python-side default a row leaves out (and a row
    missing a value) through SQLAlchemy itself."""
    import sqlalchemy

    from campaign.store import many
    from campaign_sql.schema import attempt, campaign, point

    rows = [{"point_id": 1, "attempt_no": i, "state": "registered", "origin": "launch",
             "overrides": [None, ["a=\u00e9", {"b": 0.1}], "x"][i % 3]} for i in range(6)]
    tables = {}
    for name, run in (("mine", many.execute_many), ("sqlalchemy", lambda conn, stmt, r: conn.execute(stmt, r))):
        with open_store(f"sqlite:///{tmp_path / name}.db", create=True) as s, s.engine.begin() as conn:
            conn.execute(sqlalchemy.insert(campaign), [{"id": "c1", "created_at": 1.0}])
            # no "repeat": its Python-side default (0), which only SQLAlchemy fills in
            run(conn, sqlalchemy.insert(point), [{k: v for k, v in _point(i, {"i": [i]}).items() if k != "repeat"}
                                                 | {"campaign_id": "c1"} for i in range(2)])
            run(conn, sqlalchemy.insert(attempt), rows)
            run(conn, sqlalchemy.update(attempt).where(attempt.c.attempt_no == sqlalchemy.bindparam("n"))
                .values(state="pending", reason=sqlalchemy.bindparam("why")), [{"n": 1, "why": "\u2603"}, {"n": 4, "why": None}])
            with pytest.raises(sqlalchemy.exc.StatementError):  # a row without a value the first has
                run(conn, sqlalchemy.insert(attempt), [{"point_id": 2, "attempt_no": 0, "state": "r"}, {"point_id": 2}])
        raw = sqlite3.connect(tmp_path / f"{name}.db")
        tables[name] = [raw.execute(f"select * from {t} order by id").fetchall() for t in ("point", "attempt")]
    assert tables["mine"] == tables["sqlalchemy"]
    assert [r[9] for r in tables["mine"][0]] == [0, 0]  # repeat's default
    assert [r[11] for r in tables["mine"][1]][:3] == ["null", '["a=\\u00e9", {"b": 0.1}]', '"x"']
