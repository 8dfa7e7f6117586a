"""Secrets never leak, and every printed line is escaped (issue #30).

A store password with any character in it, a config value named like a secret
(``container.env.HF_TOKEN``) and a container variable reach no output, no stored copy
and no command line; text from a crafted store (a campaign id or name holding terminal
escapes) reaches the terminal escaped, whatever harvest's format.
"""

from __future__ import annotations

import json
import os
import sqlite3
import sys
import time
from pathlib import Path

import pytest

from campaign.common.redact import SECRET, ambiguous_password, is_secret_key, redact, redact_obj
from campaign.store import open_store
from conftest import TINY, point_config

# ---------------------------------------------------------------- URL passwords: parsed, any character

PASSWORDS = ["p/w d", "p@ss", "p/w d@x", "a#b?c", "s p a c e", "p%2Fw%20d%40x", "it's:\"q\"", "x/y?z#w@v"]


@pytest.mark.parametrize("password", PASSWORDS)
def test_a_whole_url_is_parsed_any_character_in_the_password(password):
    url = f"postgresql+psycopg2://campaign:{password}@127.0.0.1:5432/campaign?sslmode=require"
    assert redact(url) == "postgresql+psycopg2://campaign:***@127.0.0.1:5432/campaign?sslmode=require"
    assert redact(redact(url)) == redact(url)


@pytest.mark.parametrize("password", PASSWORDS)
@pytest.mark.parametrize("template", [
    "cannot reach results store {url}: connection refused",
    "refused: point store.url={url} gpus=64: does not fit",
    "campaign launch -m 'store.url={url}' 'name=a b@c' gpus=1,2",
    "error: store URL '{url}' is not a database URL",
])
def test_a_url_inside_text_is_found_by_pattern(password, template):
    text = template.format(url=f"postgresql://campaign:{password}@db.example:5432/campaign")
    out = redact(text)
    assert "postgresql://campaign:***@db.example:5432/campaign" in out, out
    for piece in {password, *password.split("@")} - {""}:
        if len(piece) > 2:
            assert piece not in out, out
    assert redact(out) == out


def test_hydra_escaped_overrides_and_query_passwords():
    assert redact(r"store.url=postgresql\://u\:p/w d@x@h\:5432/db") == r"store.url=postgresql\://u\:***@h\:5432/db"
    assert redact("postgresql://h/db?user=u&password=p/w d#x") == "postgresql://h/db?user=u&password=***"
    assert redact("x postgresql://h/db?sslpassword=s3cr3t&a=1 y") == "x postgresql://h/db?sslpassword=***&a=1 y"
    for safe in ("sqlite:///results/campaign.db", "sqlite:////abs/with@sign/c.db", "http://host:8080/path",
                 "postgresql://u@h/db", "no url here: a@b"):
        assert redact(safe) == safe


def test_a_raw_at_in_a_password_is_refused_before_any_lookup():
    why = ambiguous_password("postgresql+psycopg2://campaign:p/w d@x@127.0.0.1:1/campaign")
    assert why == ("store URL postgresql+psycopg2://campaign:***@127.0.0.1:1/campaign has '@' in its password, which "
                   "would be read as part of the host; percent-encode it as %40 (and '/' as %2F, ' ' as %20)")
    for fine in ("postgresql://u:p%40x@h/db", "postgresql://u:p/w d@h/db", "sqlite:///a@b/c.db", "postgresql://u@h/db"):
        assert ambiguous_password(fine) is None


# ---------------------------------------------------------------- keys named like secrets

SECRET_KEYS = ["HF_TOKEN", "container.env.HF_TOKEN", "dataset.s3_secret_key", "api_key", "WANDB_API_KEY", "apiKey",
               "password", "db_password", "PGPASSWORD", "passwd", "passphrase", "client_secret", "credentials",
               "AWS_SECRET_ACCESS_KEY", "private_key", "ssh-key", "key", "db_pwd", "GITHUB_TOKEN", "accessToken"]
PLAIN_KEYS = ["sort_key", "cache_key", "group_key", "monkey", "keys", "max_tokens", "num_tokens", "token_dim",
              "password_file", "secret_name", "access_key_id", "PWD", "NCCL_DEBUG", "OMP_NUM_THREADS", "name"]


@pytest.mark.parametrize("key", SECRET_KEYS)
def test_secret_keys(key):
    assert is_secret_key(key)


@pytest.mark.parametrize("key", PLAIN_KEYS)
def test_not_secret_keys(key):
    assert not is_secret_key(key)


def test_a_config_has_its_secret_named_values_masked():
    config = {"container": {"runtime": "apptainer", "env": {"HF_TOKEN": "hf_abc", "NCCL_DEBUG": "INFO", "API_KEY": 1234,
                                                            "EMPTY_TOKEN": ""}},
              "dataset": {"s3_secret_key": "k3y", "sort_key": "name", "root": "/d"},
              "store": {"url": "postgresql://u:p/w d@h/db"}, "auth": {"credentials": {"user": "u", "pw": "x"}},
              "flags": {"use_token": True, "token": None}}
    assert redact_obj(config) == {
        "container": {"runtime": "apptainer", "env": {"HF_TOKEN": SECRET, "NCCL_DEBUG": "INFO", "API_KEY": SECRET,
                                                      "EMPTY_TOKEN": ""}},
        "dataset": {"s3_secret_key": SECRET, "sort_key": "name", "root": "/d"},
        "store": {"url": "postgresql://u:***@h/db"}, "auth": {"credentials": {"user": SECRET, "pw": SECRET}},
        "flags": {"use_token": True, "token": None}}


def test_key_value_text_is_masked_by_the_same_rule():
    line = ("campaign launch -m +container.env.HF_TOKEN=hf_abc '+container.env.MY_SECRET=a b' "
            "dataset.sort_key=name APPTAINERENV_WANDB_API_KEY=w1 PWD=/home/u")
    assert redact(line) == ("campaign launch -m +container.env.HF_TOKEN=*** '+container.env.MY_SECRET=***' "
                            "dataset.sort_key=name APPTAINERENV_WANDB_API_KEY=*** PWD=/home/u")


def test_a_value_hydra_quotes_is_masked_whole():
    """Hydra's quoted values (key='a b', key="a b") and the shell-escaped form Hydra's own hint
    uses (key=\\'a b\\') are masked to their closing quote, as is a key=value item of a
    printed list; nothing of the secret is left after its first character."""
    for text, want in ((r"api_key=\'hunter2\'", "api_key=***"), ("api_key='hunter2'", "api_key=***"),
                       ('db_password="hunter 2" gpus=2', "db_password=*** gpus=2"),
                       (r"'api_key=\'hunter2\'' gpus=1", "'api_key=***' gpus=1"),
                       ("['gpus=1', 'token=hunter2']", "['gpus=1', 'token=***']"),
                       ('["token=hunter2","gpus=1"]', '["token=***","gpus=1"]'),
                       ("token='hunter2", "token=***")):
        assert redact(text) == want and redact(want) == want, text


def test_hydras_hint_for_a_sweep_without_m_is_no_secret():
    """Hydra's own hint (``gpus=1,2`` without -m) comes through as Hydra wrote it; a value
    that is not exactly one of its placeholders, or another key, is masked as before."""
    hint = ("Ambiguous value for argument 'gpus=1,2' 1. To use it as a list, use key=[value1,value2] 2. To use it as "
            "string, quote the value: key=\\'value1,value2\\' 3. To sweep over it, add --multirun to your command line")
    assert redact(hint) == hint and redact("quote the value: key='value1,value2'\n") == "quote the value: key='value1,value2'\n"
    for secret in ("key=[value1,value2]x", "key=[a,b]", "key=[value1,value2]@h", "api_key=[value1,value2]",
                   "container.env.key=[value1,value2]", "'key=[value1,value2]'"):
        assert "value1" not in redact(secret) and "hunter2" not in redact(secret) and SECRET in redact(secret), secret


# ---------------------------------------------------------------- messages: status --store, refused:

CLOSED = "127.0.0.1:1"  # nothing listens on port 1


@pytest.mark.parametrize("command", ["status", "harvest", "cancel", "ingest"])
def test_a_store_that_cannot_be_opened_is_named_without_its_password(ws, command):
    encoded = ws.campaign(command, "--store", f"postgresql+psycopg2://campaign:p%2Fw%20d%40x@{CLOSED}/campaign")
    assert encoded.returncode == 2
    assert encoded.stderr.startswith(f"error: cannot open results store postgresql+psycopg2://campaign:***@{CLOSED}"
                                     "/campaign: "), encoded.stderr
    raw = ws.campaign(command, "--store", f"postgresql+psycopg2://campaign:p/w d@x@{CLOSED}/campaign")
    assert raw.returncode == 2
    assert raw.stderr == (f"error: store URL postgresql+psycopg2://campaign:***@{CLOSED}/campaign has '@' in its "
                          "password, which would be read as part of the host; percent-encode it as %40 (and '/' as "
                          "%2F, ' ' as %20)\n")
    for res in (encoded, raw):
        for piece in ("p%2Fw", "p/w", "w d", "d@x", "%40x"):
            assert piece not in res.stdout + res.stderr


def test_a_refused_point_is_named_without_the_stores_password(ws):
    url = f"postgresql+psycopg2://campaign:p%2Fw%20d%40x@{CLOSED}/campaign"
    res = ws.launch("-m", "platform=local", "gpus=1,64", f"store.url={url}", *TINY)
    assert res.returncode == 2
    refused = [line for line in res.stderr.splitlines() if line.startswith("refused:")]
    assert refused and "store.url=postgresql+psycopg2\\://campaign\\:***@127.0.0.1\\:1/campaign" in refused[0], refused
    assert "p%2Fw" not in res.stdout + res.stderr


# ---------------------------------------------------------------- container.env: the runtime's prefix, never argv

FAKE_RUNTIME = """#!/usr/bin/env bash
if [[ $1 == --version ]]; then echo "apptainer version 1.3.4-fake"; exit 0; fi
printf '%s\\n' "$@" > "{log}/argv-$$.txt"
env | grep -E '^(APPTAINER|SINGULARITY)ENV_' > "{log}/env-$$.txt"
shift
while [[ $1 == --* ]]; do
  case $1 in --nv) shift ;; *) shift 2 ;; esac
done
shift  # the image
shift  # python
exec {python} "$@"
"""
TOKEN = "hf_LeakCheck0123456789"
URL_PASSWORD = "pa/ss wd@x"


def _fake_apptainer(ws, outside: Path) -> tuple[Path, Path]:
    """A stand-in apptainer on the workspace's PATH that logs argv and its prefixed variables
    into ``outside`` (not scanned for leaks), then runs the job's Python; and an image."""
    bin_dir, logs = outside / "bin", outside / "runtime-log"
    bin_dir.mkdir(parents=True)
    logs.mkdir()
    fake = bin_dir / "apptainer"
    fake.write_text(FAKE_RUNTIME.format(log=logs, python=sys.executable))
    fake.chmod(0o755)
    image = ws.path / "campaign.sif"
    image.write_bytes(b"not really an image")
    ws.env["PATH"] = f"{bin_dir}{os.pathsep}{ws.env['PATH']}"
    return logs, image


@pytest.mark.slow
def test_container_variables_reach_the_job_through_its_environment_only(ws, tmp_path_factory):
    _check_container_variables(ws, tmp_path_factory.mktemp("outside"), ["gpus=1", *TINY])


@pytest.mark.slurm
def test_container_variables_reach_a_slurm_job_through_its_environment_only(ws, tmp_path_factory):
    """sbatch hands the launch's environment to the job and srun to its tasks: the same
    channel as the store URL's (CAMPAIGN_STORE_URL); the script holds no variable."""
    from test_slurm import _cluster_up

    why = _cluster_up()
    if why:
        pytest.skip(why)
    ws.env["SLURM_CONF"] = os.environ.get("SLURM_CONF", "/tmp/campaign-slurm/etc/slurm.conf")
    _check_container_variables(ws, tmp_path_factory.mktemp("outside"),
                               ["platform=v100", "gpus=1", "platform.cpus_per_task=1", *TINY], timeout=600)


def _check_container_variables(ws, outside: Path, args: list[str], timeout: float = 120) -> None:
    logs, image = _fake_apptainer(ws, outside)
    index = f"https://user:{URL_PASSWORD}@pypi.example/simple"
    res = ws.launch("-m", "container=apptainer", f"container.image={image}", f"+container.env.HF_TOKEN={TOKEN}",
                    "+container.env.NCCL_DEBUG=INFO", f"+container.env.INDEX_URL='{index}'", *args, timeout=timeout)
    assert res.returncode == 0, res.stderr
    wait = ws.campaign("status", "--wait", "--interval", "0.5", timeout=timeout)
    assert wait.returncode == 0, wait.stdout + wait.stderr
    argvs = [p.read_text() for p in logs.glob("argv-*.txt")]
    envs = [p.read_text().splitlines() for p in logs.glob("env-*.txt")]
    assert argvs and len(envs) == len(argvs)
    assert all(TOKEN not in a and "INDEX_URL" not in a and "--env" not in a for a in argvs)
    for env in envs:  # the real values, under apptainer's prefix
        assert f"APPTAINERENV_HF_TOKEN={TOKEN}" in env and "APPTAINERENV_NCCL_DEBUG=INFO" in env
        assert f"APPTAINERENV_INDEX_URL={index}" in env
    # nothing the launch, the store, the jobs or Hydra wrote holds them
    outputs = [res.stdout, res.stderr, wait.stdout, wait.stderr, ws.campaign("status", "--json").stdout]
    leaks = (TOKEN, URL_PASSWORD, "pa/ss", "ss wd")
    for text in outputs:
        assert not any(s in text for s in leaks), text
    files = [p for p in ws.path.rglob("*") if p.is_file()]
    assert any(p.name.endswith(".pkl") for p in files) and any(p.name == "campaign.db" for p in files)
    assert any(p.name == "multirun.yaml" for p in files)
    for p in files:
        data = p.read_bytes()
        assert not any(s.encode() in data for s in leaks), p
    config = json.loads(ws.query("select config from point")[0][0])
    assert config["container"]["env"] == {"HF_TOKEN": SECRET, "NCCL_DEBUG": "INFO",
                                          "INDEX_URL": "https://user:***@pypi.example/simple"}
    (command,) = ws.query("select command from campaign")[0]
    assert f"+container.env.HF_TOKEN={SECRET}" in command and TOKEN not in command
    prov = json.loads(ws.query("select provenance from attempt")[0][0])
    assert prov["container"]["env"]["HF_TOKEN"] == SECRET


def test_a_dry_run_shows_the_prefixed_variables_masked(ws):
    image = ws.path / "campaign.sif"
    image.write_bytes(b"x")
    res = ws.launch("-m", "platform=a100", "gpus=2", "container=apptainer", f"container.image={image}",
                    f"+container.env.HF_TOKEN={TOKEN}", "+container.env.NCCL_DEBUG=INFO", "dry_run=scripts", *TINY)
    assert res.returncode == 0, res.stderr
    assert ("# in its environment (inherited from the launch, not on its command line): "
            "APPTAINERENV_HF_TOKEN=*** APPTAINERENV_NCCL_DEBUG=INFO") in res.stdout
    assert TOKEN not in res.stdout + res.stderr and "--env" not in res.stdout
    js = ws.launch("-m", "platform=a100", "gpus=2", "container=apptainer", f"container.image={image}",
                   f"+container.env.HF_TOKEN={TOKEN}", "dry_run=json", *TINY)
    assert js.returncode == 0 and TOKEN not in js.stdout + js.stderr


# ---------------------------------------------------------------- terminal escapes from a crafted store

HOSTILE = "\x1b]0;pwned\x07\x1b[2J\u202e"
RAW = ("\x1b", "\x07", "\u202e")


GOOD_ID = "20260101-000000-aaaa"


def _crafted(ws, cid: str = GOOD_ID) -> str:
    """A store whose campaign name and a platform name (and ``cid``, if it is so made) hold
    terminal escapes, with two completed points to harvest; returns the campaign id."""
    from sqlalchemy import insert, select

    from campaign_sql.schema import attempt, rank_timing

    rows = [dict(idx=i, platform=f"local{HOSTILE}", trainer="synthetic", experiment="smoke", dataset="synthetic",
                 gpus=g, nodes=1, repeat=0, executor="local", state="completed", iterations=8 // g, batch_per_gpu=4,
                 job_id=None, job_folder=None, reason=None, log_path=None, config=point_config(f"gpus={g}"))
            for i, g in enumerate((1, 2))]
    with open_store(ws.store_url, create=True) as s:
        ids = s.register({"id": cid, "created_at": time.time(), "name": f"demo{HOSTILE}",
                          "results_dir": str(ws.results)}, rows)
        with s.engine.begin() as conn:
            for pid, wall in zip(ids, (10.0, 6.0)):
                conn.execute(insert(attempt), [dict(point_id=pid, attempt_no=0, state="completed",
                                                    started_at=time.time() - 60, ended_at=time.time() - 30)])
                aid = conn.execute(select(attempt.c.id).where(attempt.c.point_id == pid)).scalar_one()
                conn.execute(insert(rank_timing), [dict(attempt_id=aid, rank=0, iterations=8, warmup_iterations=1,
                                                        wall_s=wall, images=64, iter_mean_s=wall / 8,
                                                        iter_median_s=wall / 8)])
    return cid


@pytest.mark.parametrize("args", [[], ["--to", "csv"], ["--to", "markdown"], ["--to", "json"], ["--table", "all"],
                                  ["--table", "all", "--to", "csv"], ["--table", "attempts"], ["--compare", "ideal"]])
def test_harvest_escapes_what_a_crafted_store_holds(ws, args):
    _crafted(ws)
    res = ws.campaign("harvest", *args)
    for text in (res.stdout, res.stderr):
        assert not any(ch in text for ch in RAW), repr(text)
    if res.returncode == 0 and args in ([], ["--to", "csv"]):
        assert r"local\x1b]0;pwned\x07\x1b[2J\u202e" in res.stdout, res.stdout
    if res.returncode == 0 and args == ["--to", "markdown"]:  # markdown's [ and ] escaped too: no link syntax
        assert r"local\x1b\]0;pwned\x07\x1b\[2J\u202e" in res.stdout, res.stdout
    if args in ([], ["--to", "csv"], ["--to", "markdown"], ["--to", "json"]):
        assert res.returncode == 0, res.stderr
    if args == ["--to", "json"]:  # JSON keeps the data, escaped by JSON itself
        assert {r["platform"] for r in json.loads(res.stdout)} == {f"local{HOSTILE}"}


@pytest.mark.parametrize("args", [[], ["--to", "csv"], ["--to", "markdown"], ["--table", "attempts"]])
def test_harvest_escapes_a_crafted_campaign_id(ws, args):
    """A campaign id that holds escapes is refused as an altered store or, were it read,
    shown escaped in harvest's header: never raw on the terminal."""
    _crafted(ws, f"{GOOD_ID}{HOSTILE}")
    res = ws.campaign("harvest", *args)
    assert not any(ch in res.stdout + res.stderr for ch in RAW), repr(res.stdout + res.stderr)
    escaped = GOOD_ID + r"\x1b]0;pwned\x07\x1b[2J\u202e"
    if res.returncode == 0:
        assert res.stdout.startswith(f"campaign {escaped}\n") or args, res.stdout
    else:
        assert res.returncode == 2 and escaped in res.stderr and res.stderr.count("\n") == 1, res.stderr


def test_harvest_to_a_file_keeps_the_data_as_it_is(ws):
    _crafted(ws)
    out = ws.path / "scaling.csv"
    res = ws.campaign("harvest", "--to", "csv", "--out", str(out))
    assert res.returncode == 0, res.stderr
    assert f"local{HOSTILE}" in out.read_text()
    assert not any(ch in res.stdout + res.stderr for ch in RAW)


def test_a_crafted_campaign_is_escaped_in_every_read_command(ws):
    cid = _crafted(ws, f"{GOOD_ID}{HOSTILE}")
    for argv in (["status"], ["cancel"], ["harvest", "demo" + HOSTILE], ["status", "nosuch" + HOSTILE]):
        res = ws.campaign(*argv)
        assert not any(ch in res.stdout + res.stderr for ch in RAW), (argv, res.stdout, res.stderr)
    assert sqlite3.connect(ws.db).execute("select id from campaign").fetchone()[0] == cid  # read commands wrote nothing
