"""Shared fixtures: run the real CLI in a process of its own (forked from one that imported
campaign once: tests/forkserver.py), in a fresh folder, on a fresh store."""

from __future__ import annotations

import functools
import json
import logging
import os
import random
import signal
import subprocess
import sys
import sysconfig
import tempfile
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pytest

from forkserver import ForkServer

# `python -m campaign[.launch]` forked from a process that imported campaign once (tests/forkserver.py)
FORKS = ForkServer(os.environ)

# Small, fast settings for the synthetic trainer on this 2-core machine.
TINY = [
    "experiment.base_iterations=8",
    "experiment.warmup_iterations=1",
    "trainer.params.width=4",
    "trainer.params.depth=2",
    "dataset.image_size=8",
]
# The test SLURM's GPUs are emulated (gres File= entries; ranks run on CPU). Its nodes carry
# the feature emulated_gpu, so a launch that reaches it does not check their compute capability
# against this machine's torch (campaign/launch/arch.py); this manual override is for launches
# whose sinfo gives no answer (away from the cluster, a fake one) or that plan in-process.
EMULATED_GPUS = "platform.compute_capability=null"


@dataclass
class Result:
    returncode: int
    stdout: str
    stderr: str


class Workspace:
    """A folder with its own results dir and store; runs commands as a user would."""

    def __init__(self, path: Path):
        self.path = path
        self.results = path / "results"
        self.store_url = f"sqlite:///{self.results}/campaign.db"
        # SLURM_CONF says which cluster (scripts/local-slurm.sh env): not a job's setting
        # CAMPAIGN_CONFIG_DIR: the suite's own signing key (private_config_dir), never ~/.config;
        # CAMPAIGN_TEST_*: the suite's own knobs (scripts/cpulog's log reaches the jobs)
        self.env = {k: v for k, v in os.environ.items()
                    if k in ("SLURM_CONF", "CAMPAIGN_CONFIG_DIR") or k.startswith("CAMPAIGN_TEST_")
                    or not k.startswith(("SLURM_", "SBATCH_", "CAMPAIGN_"))}
        self.env["CAMPAIGN_RESULTS"] = str(self.results)
        # Local jobs take turns through a machine-wide lock (campaign/backends/local.py);
        # a test's jobs take turns with that test's own, not with whatever else runs here.
        self.env["CAMPAIGN_LOCK_DIR"] = str(path / "lock")

    def away_from_slurm(self) -> "Workspace":
        """Commands from here on find SLURM's clients but no cluster (each says so and exits
        1), as on a laptop planning a study for its own cluster: what the test SLURM cannot
        place (its nodes hold 4 emulated GPUs; the study's A100 NVLINK nodes 8) is not refused
        on its say."""
        bin_dir = self.path / "no-slurm-bin"
        bin_dir.mkdir(exist_ok=True)
        for name in ("sinfo", "squeue", "scontrol", "sacct", "sacctmgr", "sbatch", "scancel", "srun"):
            tool = bin_dir / name
            tool.write_text(f"#!/bin/sh\necho '{name}: error: no SLURM cluster here (tests: away_from_slurm)' >&2\n"
                            "exit 1\n")
            tool.chmod(0o755)
        self.env["PATH"] = f"{bin_dir}{os.pathsep}{self.env.get('PATH', '')}"
        return self

    def run(self, *argv: str, timeout: float = 300, cwd: Path | None = None) -> Result:
        forked = FORKS.run(list(argv), self.env, cwd or self.path, timeout)  # campaign's own commands
        if forked is not None:
            return Result(*forked)
        proc = subprocess.run(list(argv), cwd=cwd or self.path, env=self.env, capture_output=True, text=True,
                              timeout=timeout)
        return Result(proc.returncode, proc.stdout, proc.stderr)

    def launch(self, *overrides: str, timeout: float = 120) -> Result:
        return self.run(sys.executable, "-m", "campaign.launch", *overrides, timeout=timeout)

    def campaign(self, *args: str, timeout: float = 300) -> Result:
        return self.run(sys.executable, "-m", "campaign", *args, timeout=timeout)

    @property
    def db(self) -> Path:
        return self.results / "campaign.db"

    def query(self, sql: str, *params):
        import sqlite3

        con = sqlite3.connect(self.db)
        try:
            return con.execute(sql, params).fetchall()
        finally:
            con.close()


def pytest_addoption(parser):
    parser.addoption("--shuffle", nargs="?", const="random", default=None, metavar="SEED",
                     help="run the tests in a shuffled order (the seed is printed; --shuffle=SEED replays it)")


def pytest_configure(config):
    # The suite's commands take Ctrl-C as from a terminal. A suite started in the background
    # (`cmd &` in a script, `nohup ... &`) inherits SIGINT ignored, and every command a test
    # starts would inherit that in turn and rightly keep ignoring it: the tests that send one
    # hung, or passed where a library had reset the kernel's disposition behind Python's back.
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if config.pluginmanager.hasplugin("xdist") and not hasattr(config, "workerinput") \
            and getattr(config.option, "testrunuid", "unset") is None:
        config.option.testrunuid = uuid.uuid4().hex  # known here and on every worker: the groups' file
    value = config.getoption("--shuffle")
    if value is None:
        return
    if value == "random":  # a pytest-xdist worker takes the seed its controller drew (pytest_configure_node)
        value = str(getattr(config, "workerinput", {}).get("shuffle_seed", random.SystemRandom().randrange(10**6)))
    if not value.isdigit():
        raise pytest.UsageError(f"--shuffle takes a whole-number seed, got {value!r}: write --shuffle=SEED "
                                "(or --shuffle after the test paths)")
    config.shuffle_seed = int(value)


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node):
    """pytest-xdist: every worker shuffles with the controller's seed, so that all of them
    collect one order (xdist refuses to run otherwise)."""
    seed = getattr(node.config, "shuffle_seed", None)
    if seed is not None:
        node.workerinput["shuffle_seed"] = seed


def _shuffle_note(config) -> str | None:
    seed = getattr(config, "shuffle_seed", None)
    return None if seed is None else f"tests shuffled with seed {seed}: --shuffle={seed} replays this order"


def pytest_report_header(config):
    return _shuffle_note(config)


# Seconds each test took in a whole run here (scripts/test_durations.py writes it from a run's
# --junitxml): the order the suite's workers take its groups in, costliest first.
DURATIONS = Path(__file__).with_name("durations.json")
FAST_S = 0.3  # a test the file leaves out (under a second there)


def _group(item) -> str:
    """The group a pytest-xdist worker runs whole (``--dist loadgroup``): every test that uses
    the local SLURM cluster is in one (one worker: their jobs share the cluster's 8 emulated
    GPUs, and some fill its queue on purpose); every other test is in its module's (its
    module-scoped campaigns are then made once, by the worker that runs the module)."""
    return "slurm" if item.get_closest_marker("slurm") else item.nodeid.split("::")[0]


# pytest-xdist's own loadgroup reads xdist_group marks into the tests' ids by assigning
# item._nodeid, which pytest 9 no longer reads (its nodeid comes from item._id): every test
# is then its own group, and a module's module-scoped campaign is made once per worker that
# runs one of its tests. So the groups are ours: the first worker writes the SLURM tests' ids
# to a file named by the run's id as it finishes collecting, and the controller's scheduler
# (pytest_xdist_make_scheduler) groups by it.
def _groups_file(testrunuid: str) -> Path:
    return Path(tempfile.gettempdir()) / f"campaign-tests-{testrunuid}-groups.json"


@pytest.hookimpl(tryfirst=True)  # before the worker tells the controller its collection is done
def pytest_collection_finish(session):
    workerinput = getattr(session.config, "workerinput", None)
    if not workerinput or workerinput.get("workerid") != "gw0":
        return
    slurm = [item.nodeid for item in session.items if _group(item) == "slurm"]
    target = _groups_file(workerinput["testrunuid"])
    tmp = target.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(slurm))
    os.replace(tmp, target)


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_xdist_make_scheduler(config, log):
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    path = _groups_file(config.option.testrunuid)

    class Groups(LoadScopeScheduling):
        """xdist's scope scheduling with tests/conftest.py's groups (``_group``)."""

        slurm: set | None = None

        def _split_scope(self, nodeid: str) -> str:
            if Groups.slurm is None:
                try:
                    Groups.slurm = set(json.loads(path.read_text()))
                except (OSError, ValueError):
                    Groups.slurm = set()  # no file: each module a group of its own
            return "slurm" if nodeid in Groups.slurm else nodeid.split("::")[0]

    return Groups(config, log)


def _by_cost(items) -> list:
    """``items`` with the costliest group first, each group's tests together and in their
    order (a module split apart would set its module-scoped fixtures up again)."""
    try:
        seconds = json.loads(DURATIONS.read_text())
    except (OSError, ValueError):
        seconds = {}
    cost: dict[str, float] = {}
    for item in items:
        cost[_group(item)] = cost.get(_group(item), 0.0) + float(seconds.get(item.nodeid, FAST_S))
    return sorted(items, key=lambda item: (-cost[_group(item)], _group(item)))


def pytest_collection_modifyitems(config, items):
    if getattr(config, "shuffle_seed", None) is not None:
        random.Random(config.shuffle_seed).shuffle(items)
    else:
        items[:] = _by_cost(items)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """A failed SLURM test's report carries the cluster as it was then (queue with reasons,
    node states): a job that never ran says why (a CI run's whole cluster held by jobs a
    killed earlier run left behind read as a test's own timeout)."""
    report = yield
    if report.failed and item.get_closest_marker("slurm"):
        report.sections.append(("the local SLURM cluster at the failure", _cluster_now()))
    return report


def _cluster_now() -> str:
    out = []
    for argv in (["squeue", "-a", "-o", "%i %P %T %r %M %l %D %b %j"], ["sinfo", "-N", "-o", "%N %P %T %G %E"]):
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=20)
            out.append(f"$ {' '.join(argv)}\n{done.stdout}{done.stderr}")
        except (OSError, subprocess.SubprocessError) as exc:
            out.append(f"$ {' '.join(argv)}: {exc}")
    return "\n".join(out)


def pytest_unconfigure(config):
    FORKS.stop()
    if not hasattr(config, "workerinput") and getattr(config.option, "testrunuid", None):
        _groups_file(config.option.testrunuid).unlink(missing_ok=True)


def pytest_terminal_summary(terminalreporter, config):
    if _shuffle_note(config):  # again at the end, where -q shows it too
        terminalreporter.write_line(_shuffle_note(config))


_SITE_PACKAGES = tuple({os.path.join(sysconfig.get_paths()[k], "") for k in ("purelib", "platlib")})


# Variables set by others than the test: pytest's own, and torch's inductor, which writes its
# default cache folder into os.environ the first time anything asks for it (the profiler does).
# Set by pytest, or by a package on its first import and kept for the process (polars's
# jemalloc setting): whichever test imports it first did not leave it behind.
_NOT_THE_TESTS = {"PYTEST_CURRENT_TEST", "TORCHINDUCTOR_CACHE_DIR", "_RJEM_MALLOC_CONF"}


def _process_state() -> dict:
    """What a test may not leave changed for the next one (issue #27): the working
    directory, environment, umask, import path, Hydra's singletons, logging and signal
    handlers. Cheap: a few syscalls and copies, microseconds."""
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.hydra_config import HydraConfig
    from hydra.version import getbase
    from packaging.version import Version

    mask = os.umask(0o022)
    os.umask(mask)
    root = logging.getLogger()
    base = getbase()
    return {
        "cwd": os.getcwd(),
        "environ": {k: v for k, v in os.environ.items() if k not in _NOT_THE_TESTS},
        "umask": oct(mask),
        # entries a package adds inside site-packages on its first import (pkg_resources puts
        # setuptools/_vendor last) are that package's, kept for good: not the test's doing
        "sys.path": [p for p in sys.path if not p.startswith(_SITE_PACKAGES)],
        "_sys.path": list(sys.path),
        "GlobalHydra initialized": GlobalHydra.instance().is_initialized(),
        "HydraConfig set": HydraConfig.initialized(),
        # unset (a bare object(), copied anew by hydra_restore_singletons) is 1.1, and Hydra's
        # own base_at_least() sets 1.1 there on first use: compare what it means
        "Hydra version_base": Version("1.1") if type(base) is object else base,
        "_Hydra version_base": base,
        "root logger": (root.level, list(root.handlers)),
        "signal handlers": {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1,
                                                             signal.SIGUSR2, signal.SIGCHLD)},
        # what the kernel holds, which a child inherits: a library's sigaction, or a mask, that
        # Python's table above does not see (a worker whose commands then ignored Ctrl-C)
        "signals ignored or blocked (kernel)": _kernel_signals(),
    }


_WATCHED = {"SigIgn": (signal.SIGINT, signal.SIGTERM), "SigBlk": (signal.SIGINT, signal.SIGTERM, signal.SIGUSR2)}


def _kernel_signals() -> dict:
    """{"SigIgn": [...], "SigBlk": [...]}: which watched signals this process's kernel state
    ignores or blocks (/proc/self/status; {} where there is none)."""
    try:
        with open("/proc/self/status") as fh:
            masks = {k: int(v, 16) for k, _, v in (line.partition(":\t") for line in fh) if k in _WATCHED}
    except OSError:
        return {}
    return {k: [s.name for s in sigs if masks.get(k, 0) >> (s - 1) & 1] for k, sigs in _WATCHED.items()}


def _changes(before: dict, after: dict) -> list[str]:
    out = []
    for key, was in before.items():
        if key.startswith("_"):  # kept to restore, compared through its public key
            continue
        now = after[key]
        if key == "environ":
            out += [f"os.environ[{k!r}]: {was.get(k)!r} -> {now.get(k)!r}"
                    for k in sorted(was.keys() | now.keys()) if was.get(k) != now.get(k)]
        elif now != was:
            out.append(f"{key}: {was!r} -> {now!r}")
    return out


def _restore(state: dict) -> None:
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.hydra_config import HydraConfig
    from hydra.version import VersionBase

    os.chdir(state["cwd"])
    for key in os.environ.keys() - state["environ"].keys() - _NOT_THE_TESTS:
        del os.environ[key]
    os.environ.update(state["environ"])
    os.umask(int(state["umask"], 8))
    sys.path[:] = state["_sys.path"] + [p for p in sys.path if p.startswith(_SITE_PACKAGES)
                                        and p not in state["_sys.path"]]
    if not state["GlobalHydra initialized"]:
        GlobalHydra.instance().clear()
    if not state["HydraConfig set"]:
        HydraConfig.instance().cfg = None
    VersionBase.instance().version_base = state["_Hydra version_base"]
    root = logging.getLogger()
    root.setLevel(state["root logger"][0])
    root.handlers[:] = state["root logger"][1]
    for signum, handler in state["signal handlers"].items():
        if handler is not None:  # None: set outside Python, cannot be put back from here
            signal.signal(signum, handler)  # the kernel's disposition with it
    kernel = state["signals ignored or blocked (kernel)"]
    if kernel:
        blocked = {signal.Signals[name] for name in kernel["SigBlk"]}
        signal.pthread_sigmask(signal.SIG_UNBLOCK, set(_WATCHED["SigBlk"]) - blocked)
        signal.pthread_sigmask(signal.SIG_BLOCK, blocked)


@pytest.fixture(autouse=True)
def _leaves_the_process_as_it_found_it():
    """Fails a test that leaves process-wide state changed (tests pass in any order:
    ``--shuffle``); the state is put back first so the next test starts clean."""
    before = _process_state()
    yield
    if "matplotlib.pyplot" in sys.modules:  # figures a test drew to inspect (pyplot keeps each open)
        sys.modules["matplotlib.pyplot"].close("all")
    after = _process_state()
    changed = _changes(before, after)
    if changed:
        _restore(before)
        pytest.fail("the test left process-wide state changed: " + "; ".join(changed), pytrace=False)


@pytest.fixture(autouse=True, scope="session")
def private_config_dir(tmp_path_factory) -> Path:
    """The user's private config folder (campaign/common/signing.py: the signing key) for the whole
    suite: a session folder, so no test reads or writes the real ~/.config/campaign."""
    folder = tmp_path_factory.mktemp("config") / "campaign"
    os.environ["CAMPAIGN_CONFIG_DIR"] = str(folder)
    # and the local executor's job lock (campaign/backends/local.py): a test that launches with
    # os.environ's variables (not a Workspace's, which has its own) takes this worker's lock,
    # neither the user's machine-wide one (their own local jobs) nor the other workers'
    os.environ["CAMPAIGN_LOCK_DIR"] = str(tmp_path_factory.mktemp("lock"))
    return folder


# The studies' reduced twins as their pages launch them (the reference study's narrowed to two
# platforms at 1 and 2 GPUs: speedup, the reference figures and the workload warning need no more)
STUDY_TWINS = {
    "swinv2_thesis_small": ("-m", "study=swinv2_thesis_small", "platform=v100,a100_nvlink_80", "gpus=1,2"),
    "dataparallel_a6000_small": ("-m", "study=dataparallel_a6000_small", "name=dp-twin"),
    "vit_deepspeed_small": ("-m", "study=vit_deepspeed_small", "name=vit-twin"),
}


@pytest.fixture(scope="session")
def study_twins(tmp_path_factory):
    """(workspace, study -> campaign id, study -> the launch's result): the three studies'
    reduced twins launched together on the local SLURM cluster, so that their points share its
    GPUs instead of running one module after another (tests/test_study_small_slurm.py and
    tests/test_study_twins_slurm.py read them). Skipped when the cluster is not up."""
    from test_slurm import _cluster_up

    why = _cluster_up()
    if why:
        pytest.skip(why)
    space = Workspace(tmp_path_factory.mktemp("study-twins"))
    ids, launched = {}, {}
    for study, argv in STUDY_TWINS.items():
        res = space.launch(*argv, timeout=300)
        assert res.returncode == 0, res.stdout + res.stderr
        ids[study], launched[study] = campaign_id_from(res.stdout), res
    for cid in ids.values():
        space.campaign("status", cid, "--wait", "--interval", "2", "--timeout", "900", timeout=1000)
    yield space, ids, launched
    for cid in ids.values():
        space.campaign("cancel", cid)


@pytest.fixture
def default_sigint():
    """SIGINT as a command started from a terminal has it (Python's KeyboardInterrupt), for the
    tests that send one to this process: a suite started in the background (``cmd &`` in a
    script) inherits it ignored, and ``interrupt.catching()`` then rightly leaves it so."""
    before = signal.getsignal(signal.SIGINT)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, before)


@pytest.fixture
def ws(tmp_path: Path) -> Workspace:
    return Workspace(tmp_path)


@functools.lru_cache(maxsize=None)
def _composed_point(*overrides: str) -> str:
    from hydra import compose, initialize_config_module

    from campaign.catalogue.config import register
    from campaign.launch.plan import plan_point

    register()
    with hydra_version_base_kept(), initialize_config_module("campaign_conf", version_base="1.3"):
        cfg = compose("config", overrides=list(overrides))
    return json.dumps(plan_point(cfg, 0, []).config)


@contextmanager
def hydra_version_base_kept() -> Iterator[None]:
    """Hydra's version base as it was before: ``initialize*(version_base=...)`` sets it for
    the whole process and keeps it after its context ends, and an app composed later without
    one (Hydra's launcher test apps) would get 1.3's defaults (no chdir) instead of 1.1's."""
    from hydra.version import VersionBase

    saved = VersionBase.instance().getbase()
    try:
        yield
    finally:
        VersionBase.instance().version_base = saved


def point_config(*overrides: str) -> dict:
    """A point's resolved config as a launch stores it (``experiment=smoke`` with TINY,
    then ``overrides``): what ``campaign resume`` plans again from a store filled by hand."""
    return json.loads(_composed_point("experiment=smoke", *TINY, *overrides))


def campaign_id_from(stdout: str) -> str:
    for line in stdout.splitlines():
        if line.startswith("campaign "):
            return line.split()[1].rstrip(":")
    raise AssertionError(f"no campaign id in: {stdout}")


def until(pred, timeout: float, what: str, every: float = 0.5):
    """``pred()``'s first truthy value, asked every ``every`` seconds for up to
    ``timeout``; AssertionError naming ``what`` when it never comes."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = pred()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"timed out waiting for {what}")

