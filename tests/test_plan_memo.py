"""A launch plans each class of points once (campaign/launch/planmemo.py, issue 50): every
point it serves from a class's plan equals, field for field and type for type, what
planning that point on its own gives (or the same refusal), over every option of every
config group and the grids of the three study presets and their twins (``plans_agree``,
run by tests/test_compose_equal.py on the points it composes); a planning step that
reads a value makes that value part of the class; nothing shared is changed."""

from __future__ import annotations

import dataclasses


try:
    from tests.test_compose_equal import hydra, typed  # noqa: F401  (hydra: the fixture)
except ImportError:  # tests/ on sys.path (rootdir-relative imports off)
    from test_compose_equal import hydra, typed  # noqa: F401


def planned(plan_point, cfg, idx, point, cmdline, **memo):
    """A point's plan as comparable data (config typed), or its refusal (type, message)."""
    from campaign.common.errors import ConfigError, InfeasiblePoint

    try:
        p = plan_point(cfg, idx, point, typed=cmdline, **memo)
    except (ConfigError, InfeasiblePoint) as exc:
        return ("refused", type(exc).__name__, str(exc))
    fields = {f.name: getattr(p, f.name) for f in dataclasses.fields(p)}
    fields["config"] = typed(fields["config"])
    fields["redacted"] = typed(p.redacted_config())  # a served point's from its plan's (redact_like)
    return fields


def plans_agree(composer, points, cmdline):
    """Every point planned alone (its own copy of its composition) and through one launch's
    memo (its sections shared): equal plans; the shared compositions unchanged after.
    tests/test_compose_equal.py runs it on its points, with the composer it compared."""
    from campaign.launch.plan import plan_point
    from campaign.launch.planmemo import PlanMemo

    memo = PlanMemo()
    bases: dict = {}  # each group choice's composition, as composed (before any point of it is planned)
    for idx, point in enumerate(points):
        try:
            cfg, fingerprints = composer.compose_shared(point)
        except Exception:  # noqa: BLE001 - a point the composer refuses (compared there)
            continue
        bases.update({k: typed(b.plain) for k, b in composer._bases.items() if k not in bases})
        want = planned(plan_point, composer.compose(point), idx, point, cmdline)  # its own copy, planned alone
        got = planned(plan_point, cfg, idx, point, cmdline, memo=memo, fingerprints=fingerprints)
        assert got == want, point
    # the composer's shared sections are as composed: planning changed copies only
    assert {k: typed(b.plain) for k, b in composer._bases.items()} == bases
    return memo


def test_a_value_a_step_reads_is_part_of_the_class(hydra, monkeypatch):
    """A planning step that reads ``seed`` (and refuses seed=3): each seed is planned, seed=3
    refused, the others served nothing of it; a step that reads no seed serves them all."""
    from campaign.common.errors import ConfigError
    from campaign.launch import plan as plan_module
    from campaign.launch.compose import PointComposer
    from campaign.launch.plan import plan_point
    from campaign.launch.planmemo import PlanMemo

    loader, master_of = hydra
    composer = PointComposer(loader, master_of())
    points = [["gpus=1", f"seed={s}"] for s in range(6)]

    def run(memo):
        out = []
        for i, point in enumerate(points):
            cfg, fingerprints = composer.compose_shared(point)
            try:
                out.append(plan_point(cfg, i, point, typed=None, memo=memo, fingerprints=fingerprints).config["seed"])
            except ConfigError as exc:
                out.append(str(exc))
        return out

    memo = PlanMemo()
    assert run(memo) == [0, 1, 2, 3, 4, 5] and (memo.planned, memo.served) == (1, 5)
    # what a caller sets on one point's top level (design.py's relabelling) reaches no other
    memo, got = PlanMemo(), []
    for i, point in enumerate(points[:3]):
        cfg, fingerprints = composer.compose_shared(point)
        got.append(plan_point(cfg, i, point, typed=None, memo=memo, fingerprints=fingerprints))
        got[-1].config["experiment"] = {"name": f"relabelled {i}"}
    assert [p.config["seed"] for p in got] == [0, 1, 2] and memo.served == 2
    cfg, fingerprints = composer.compose_shared(points[3])
    fourth = plan_point(cfg, 3, points[3], typed=None, memo=memo, fingerprints=fingerprints)
    assert fourth.config["experiment"]["name"] == "weak_scaling"
    real = plan_module.check_recovery

    def reads_seed(c):
        if c["seed"] == 3:
            raise ConfigError("seed=3 is refused here")
        real(c)

    monkeypatch.setattr(plan_module, "check_recovery", reads_seed)
    memo = PlanMemo()
    assert run(memo) == [0, 1, 2, "seed=3 is refused here", 4, 5] and (memo.planned, memo.served) == (6, 0)
    monkeypatch.setattr(plan_module, "check_recovery", lambda c: dict(c) and real(c))  # reads every value
    memo = PlanMemo()
    assert run(memo) == [0, 1, 2, 3, 4, 5] and memo.served == 0


def test_reads_are_noted_and_bulk_reads_count_as_all():
    """``_Reads``: a key read is noted, one written first is not; ``items()``, a copy, ``==``
    and ``{**c}`` read every value."""
    from campaign.launch.planmemo import _Reads

    c = _Reads({"a": 1, "b": 2, "c": {"x": 1}})
    c["b"] = 3
    assert c["a"] == 1 and c.get("b") == 3 and "c" in c and list(c) == ["a", "b", "c"]
    assert c.read == {"a"} and not c.everything
    for bulk in (lambda d: d.items(), lambda d: d.copy(), lambda d: d == {}, lambda d: {**d}, lambda d: dict(d),
                 lambda d: list(d.values()), lambda d: repr(d)):
        d = _Reads({"a": 1, "b": 2})
        bulk(d)
        assert d.everything or d.read == {"a", "b"}, bulk
