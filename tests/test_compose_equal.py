"""The launch's composer (campaign/launch/compose.py: one Hydra composition per distinct
group choice, each point's value overrides applied to it) gives every point exactly
what Hydra composes for that point on its own (``load_sweep_config``, the code path of
Hydra's own launchers), key for key and type for type: over every option of every
config group in conf/ and the points of the three study presets and their reduced
twins (issue 50). A value Hydra refuses is refused by the composer too."""

from __future__ import annotations

import functools
from typing import Any

import pytest
from omegaconf import OmegaConf, open_dict

try:
    from tests.conftest import hydra_version_base_kept
except ImportError:  # tests/ on sys.path (rootdir-relative imports off)
    from conftest import hydra_version_base_kept


def plans_agree(*args):
    try:
        from tests.test_plan_memo import plans_agree as agree
    except ImportError:
        from test_plan_memo import plans_agree as agree
    return agree(*args)

GROUPS = ("platform", "experiment", "dataset", "trainer", "store", "container")  # conf/'s groups, study aside
STUDIES = ("swinv2_thesis", "dataparallel_a6000", "vit_deepspeed")


@pytest.fixture(scope="module")
def hydra():
    """(the config loader, a function: command line -> the sweep's master config)."""
    from hydra import initialize_config_module
    from hydra.core.global_hydra import GlobalHydra
    from hydra.types import RunMode

    from campaign.catalogue.config import register

    register()
    with hydra_version_base_kept(), initialize_config_module("campaign_conf", version_base="1.3"):
        loader = GlobalHydra.instance().config_loader()

        @functools.lru_cache(maxsize=None)
        def master(*line: str):
            return loader.load_configuration("config", overrides=list(line), run_mode=RunMode.MULTIRUN)

        yield loader, master


def typed(value: Any) -> Any:
    """``value`` with every scalar's type beside it: ``1``, ``1.0`` and ``True`` differ."""
    if isinstance(value, dict):
        return {k: typed(v) for k, v in value.items()}
    if isinstance(value, list):
        return [typed(v) for v in value]
    return (type(value).__name__, value)


def hydra_alone(loader, master, point: list[str]) -> Any:
    """What Hydra composes for ``point`` on its own (the exception's type if it refuses)."""
    try:
        cfg = loader.load_sweep_config(master, list(point))
        with open_dict(cfg):
            cfg.pop("hydra", None)
        return typed(OmegaConf.to_container(cfg, resolve=True, throw_on_missing=True, enum_to_str=True))
    except Exception as exc:  # noqa: BLE001 - compared with the composer's refusal
        return ("refused", type(exc).__name__)


def composed(composer, point: list[str]) -> Any:
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from campaign.common.errors import ConfigError

    try:
        return typed(composer.compose(point))
    except (HydraException, OmegaConfBaseException, ValueError, ConfigError) as exc:
        return ("refused", type(exc).__name__)


def _same(got: Any, want: Any, point: list[str]) -> None:
    if isinstance(want, tuple) and want[:1] == ("refused",):  # Hydra's error and ours differ in kind, not in verdict
        assert isinstance(got, tuple) and got[:1] == ("refused",), point
    else:
        assert got == want, point


def test_every_group_option_composes_as_hydra_alone(hydra):
    """One composer over points that pick every option of every group in conf/ (study
    aside: the next test), each with value overrides; then points of one group choice that
    differ only in their values (the composer's cached leaf checks), one that moves a
    value interpolations read (results_dir), one that adds a key, and refused values."""
    from campaign.launch.compose import PointComposer

    loader, master_of = hydra
    master = master_of()
    composer = PointComposer(loader, master)
    groups = {g: loader.get_group_options(g) for g in GROUPS}
    assert all(groups.values()), groups
    widest = max(len(options) for options in groups.values())
    # every option of every group, several groups' options to a point (fewer compositions)
    points = [[f"{g}={options[i % len(options)]}" for g, options in groups.items()] + ["gpus=2", f"seed={i}"]
              for i in range(widest)]
    points += [["seed=0"], ["seed=-7", "name=b c"], ["max_gpu_hours=2.5"], ["results_dir=/tmp/elsewhere"],
               ["+trainer.params.extra=1"], ["gpus=abc"], ["seed=012"], ["seed=True"]]
    for point in points:
        _same(composed(composer, point), hydra_alone(loader, master, point), point)
    assert composer.full_composes < len(points)  # one per group choice, not one per point
    # planned through one launch's memo, each as planned alone (tests/test_plan_memo.py), the
    # seeds of a class served from its plan
    seeds = [p[:-1] + [f"seed={s}"] for p in points[:widest] for s in (1, 2)] + [["seed=5", "repeats=2"], ["gpus=3"]]
    memo = plans_agree(composer, points + seeds + [["max_retries=-1"], ["max_retries=-1", "seed=4"]], None)
    assert memo.served >= len(seeds) // 2, (memo.served, memo.planned)


@pytest.mark.parametrize("study", [s + twin for s in STUDIES for twin in ("", "_small")])
def test_study_preset_points_compose_as_hydra_alone(hydra, study):
    """Every point of the preset's grid (hydra.sweeper.params and grids) composed by one
    composer; its first and last (other group choices) compared with Hydra's own."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from campaign.launch.compose import PointComposer
    from hydra_plugins.campaign_launcher.campaign_sweeper import union_points

    loader, master_of = hydra
    master = master_of(f"study={study}")
    sweeper = master.hydra.sweeper
    params = OmegaConf.to_container(sweeper.params) if sweeper.get("params") else {}
    grids = OmegaConf.to_container(sweeper.grids) if sweeper.get("grids") else []
    points = [[f"study={study}", *p] for p in
              union_points(OverridesParser.create(config_loader=loader), params, grids, [])]
    assert len(points) > 1, study
    composer = PointComposer(loader, master)
    got = [composed(composer, p) for p in points]
    assert composer.full_composes < len(points)
    for i in (0, -1):
        _same(got[i], hydra_alone(loader, master, points[i]), points[i])
    plans_agree(composer, points, [f"study={study}"])  # through one launch's memo, each as planned alone


def test_a_section_is_redacted_and_checked_once_and_never_shared():
    """campaign/common/memo.py: the answer for a section seen before is the same as the
    first (a fresh copy each time), a section that differs in a value or only in a
    value's type is worked out anew, and a refusal is not remembered as a pass."""
    from campaign.common.errors import ConfigError
    from campaign.common.memo import SectionMemo, fingerprint
    from campaign.common.redact import redact_obj
    from campaign.launch.validate import check_known_keys, check_sizes

    calls = []
    memo = SectionMemo(lambda v: calls.append(v) or {"n": len(calls)})
    first, again = memo({"a": 1}), memo({"a": 1})
    assert first == again == {"n": 1} and first is not again
    assert memo({"a": True}) == {"n": 2} and memo({"a": 1.0}) == {"n": 3}  # 1, True and 1.0 differ
    assert fingerprint({"a": object()}) is None and memo({"a": len}) == {"n": 4} and memo({"a": len}) == {"n": 5}

    store = {"url": "postgresql://u:pw@h/db", "password": "pw", "busy_timeout_s": 30.0}
    config = {"store": store, "seed": 1, "name": "x"}
    for _ in range(2):
        got = redact_obj(config)
        assert got == {"store": {"url": "postgresql://u:***@h/db", "password": "***", "busy_timeout_s": 30.0},
                       "seed": 1, "name": "x"}
        got["store"]["url"] = "changed"  # a caller's change reaches neither the memo nor the next answer
    assert store["url"] == "postgresql://u:pw@h/db"
    # a launch's points (PointPlan.redacted_config): the same answer, its sections shared, its top level its own
    from campaign.common.redact import redact_shared

    one, two = redact_shared(dict(config, seed=1)), redact_shared(dict(config, seed=2))
    assert one == dict(redact_obj(config), seed=1) and two["seed"] == 2 and one is not two
    assert one["store"] is two["store"] and one["store"] is not store

    good = {"experiment": {"iterations": 5}}
    check_sizes(good)
    check_sizes(good)
    with pytest.raises(ConfigError, match="experiment.iterations"):
        check_sizes({"experiment": {"iterations": 2**64}})
    with pytest.raises(ConfigError, match="unknown config key 'platform.nosuch'"):
        check_known_keys({"platform": {"nosuch": 1}})
    with pytest.raises(ConfigError, match="unknown config key 'platform.nosuch'"):  # refused again, not remembered
        check_known_keys({"platform": {"nosuch": 1}})
