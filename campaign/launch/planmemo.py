"""Planning each distinct point once, not each point's copy.

The points of a sweep share almost all of their config: a 10,000-point sweep over
``platform=a,b gpus=1,2 seed=range(...)`` has 4 distinct sets of sections (``platform``,
``trainer``, ``experiment`` ...) and varies a few top-level values. Planning a point
(``plan.plan_checked``: its trainer's declaration, its schedule, its resources, what it
does not read) is a pure function of its config, its overrides' keys and the command
line, and it reads only some of the top-level values: ``gpus`` and ``nodes`` always,
``seed`` never. So a launch plans each *class* of points once and serves the others
from it:

- a class is the points with the same top-level keys, the same sections (their
  ``marshal`` fingerprints, campaign/common/memo.py), the same overrides' keys (and the
  same lines where a line picks a section: ``platform=a100``) and the same command line;
- within a class, a plan answers every point whose top-level values *that the planning
  read* are the ones it read (equal and of the same type). Which ones it read is not
  declared but watched (``_Reads``: a dict that notes each key read, and counts a read
  of every value, ``items()``, ``==``, a copy, as reading all of them), so a check that
  starts reading ``seed`` makes every seed its own plan: slower, never wrong;
- a served point's config is the plan's, with the top-level values it did not read put
  back to the point's own. Its sections are the plan's own objects, shared by the
  class: read, never changed (``PointPlan.config``'s contract);
- a refusal is served too: the same error for every point of its class that reads the
  same values.

The memo lives for one launch (``compose_points`` makes it): what planning asks of this
machine and the cluster (an engine installed, the emulated GPUs) is asked once a launch,
as before. tests/test_plan_memo.py plans every option of every config group and the
study presets both ways and compares the plans.
"""

from __future__ import annotations

import dataclasses
import marshal
from typing import Any, Callable, Optional, Sequence

_MISSING = object()


class _Reads(dict):
    """A point's top level while it is planned: notes the keys whose values are read
    (``read``), not counting keys written first; ``everything`` once an operation reads
    every value. The key set itself is the class's, so iterating keys reads no value."""

    def __init__(self, config: dict[str, Any]):
        super().__init__(config)
        self.read: set[str] = set()
        self.written: set[str] = set()
        self.everything = False

    def _note(self, key: Any) -> None:
        if key not in self.written:
            self.read.add(key)

    def _all(self) -> None:
        self.everything = True

    def __getitem__(self, key: Any) -> Any:
        self._note(key)
        return dict.__getitem__(self, key)

    def get(self, key: Any, default: Any = None) -> Any:
        self._note(key)
        return dict.get(self, key, default)

    def __iter__(self):  # a Python __iter__ also sends dict(self) and {**self} through __getitem__
        return dict.__iter__(self)

    def __setitem__(self, key: Any, value: Any) -> None:
        self.written.add(key)
        dict.__setitem__(self, key, value)

    def __delitem__(self, key: Any) -> None:
        self._note(key)
        self.written.add(key)
        dict.__delitem__(self, key)

    def pop(self, key: Any, *default: Any) -> Any:
        self._note(key)
        self.written.add(key)
        return dict.pop(self, key, *default)

    def setdefault(self, key: Any, default: Any = None) -> Any:
        self._note(key)
        self.written.add(key)
        return dict.setdefault(self, key, default)

    def update(self, *args: Any, **kwargs: Any) -> None:
        self._all()  # rare: no planning step updates the top level in bulk
        dict.update(self, *args, **kwargs)

    def items(self):  # type: ignore[override]
        self._all()
        return dict.items(self)

    def values(self):  # type: ignore[override]
        self._all()
        return dict.values(self)

    def copy(self) -> dict[str, Any]:  # type: ignore[override]
        self._all()
        return dict(dict.items(self))

    def popitem(self) -> Any:
        self._all()
        return dict.popitem(self)

    def __eq__(self, other: Any) -> bool:
        self._all()
        return dict.__eq__(self, other)

    def __ne__(self, other: Any) -> bool:
        self._all()
        return dict.__ne__(self, other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        self._all()
        return dict.__repr__(self)

    def __or__(self, other: Any) -> Any:
        self._all()
        return dict(dict.items(self)) | other

    def __ror__(self, other: Any) -> Any:
        self._all()
        return other | dict(dict.items(self))

    def __reduce_ex__(self, protocol: Any) -> Any:
        self._all()
        return (dict, (dict(dict.items(self)),))


def _typed(value: Any) -> tuple[type, Any]:
    """A top-level value as a key: ``1``, ``1.0`` and ``True`` are different values here."""
    return (type(value), value)


@dataclasses.dataclass
class _Served:
    """One plan of a class: the top-level keys it read, and its answer (a PointPlan or the
    exception it raised)."""

    plan: Any = None
    error: Optional[BaseException] = None
    keep: tuple[str, ...] = ()  # top-level keys neither read nor written: the point's own values go back


class PlanMemo:
    """One launch's plans by class (module docstring)."""

    def __init__(self) -> None:
        # class key -> [(the read keys, in order), {their typed values -> _Served}]
        self._classes: dict[tuple, list[tuple[tuple[str, ...], dict[tuple, _Served]]]] = {}
        # (id of a fingerprints dict, the config's keys) -> (it, its sorted items; None: a section has none)
        self._sections: dict[tuple, tuple[dict, Optional[tuple]]] = {}
        self._lines: dict[Any, tuple[str, Optional[str]]] = {}  # override line -> (prefix, top-level key or None)
        self.planned = 0  # points planned in full (one a class and set of read values)
        self.served = 0  # points served from a plan

    def plan(self, config: dict[str, Any], fingerprints: Optional[dict[str, Optional[bytes]]], idx: int,
             overrides: Sequence[str], repeat: int, typed: Optional[Sequence[str]],
             run: Callable[[dict[str, Any]], Any], first: Callable[[dict[str, Any]], None]) -> Any:
        """``config``'s plan (``run(config)``: a PointPlan), from its class's plan when one
        read the same values; ``first(config)`` checks what the class key fixes (its key
        set and sections), once a class. ``fingerprints``: each section's (None: planned
        in full, its class unknown)."""
        key = self._class_key(config, fingerprints, overrides, typed)
        if key is None:
            first(config)
            return run(config)
        kinds = self._classes.get(key)
        if kinds is None:
            first(config)  # raises for the whole class: nothing is kept
            kinds = self._classes[key] = []
        for names, by_values in kinds:
            got = by_values.get(tuple(_typed(dict.get(config, k, _MISSING)) for k in names))
            if got is not None:
                self.served += 1
                return self._serve(got, config, idx, overrides, repeat)
        return self._plan_new(kinds, config, run)

    def _plan_new(self, kinds: list, config: dict[str, Any], run: Callable[[dict[str, Any]], Any]) -> Any:
        self.planned += 1
        # planning changes sections in place (a setting nobody reads back at its default):
        # the class's shared ones are copied first, and the copies become the plan's own
        watched = _Reads({k: (marshal.loads(marshal.dumps(v)) if isinstance(v, (dict, list)) else v)
                          for k, v in config.items()})
        error: Optional[BaseException] = None
        plan = None
        try:
            plan = run(watched)
        except Exception as exc:  # a refusal (ConfigError, InfeasiblePoint...): served to the class as raised
            error = exc
        if not watched.everything:
            # the top-level values read (a section read is fixed by the class: its fingerprint)
            names = tuple(sorted(k for k in watched.read
                                 if k in config and not isinstance(config[k], (dict, list))))
            served = _Served(plan=plan, error=error,
                             keep=tuple(k for k in config if k not in watched.read and k not in watched.written))
            values = tuple(_typed(dict.get(config, k, _MISSING)) for k in names)
            for have, by_values in kinds:
                if have == names:
                    by_values[values] = served
                    break
            else:
                kinds.append((names, {values: served}))
        if error is not None:
            raise error
        plan.config = dict(dict.items(plan.config))  # the plan's own (the served points' sections)
        # the point's own PointPlan and top level: the kept plan stays as planned whatever a
        # caller then sets on the point (design.py gives a relabelled point a new section)
        return dataclasses.replace(plan, config=dict(plan.config))

    @staticmethod
    def _serve(got: _Served, config: dict[str, Any], idx: int, overrides: Sequence[str], repeat: int) -> Any:
        if got.error is not None:
            raise got.error.with_traceback(None)  # the class's refusal, raised again for this point
        mine = dict(got.plan.config)
        for k in got.keep:  # values planning never read: the point's own (seed=3); its sections are the plan's
            v = config[k]
            if not isinstance(v, (dict, list)):
                mine[k] = v
        # the plan's fields with the point's own (dataclasses.replace's result, without its
        # per-field work: a tenth of serving), and its redacted config from the plan's (_like)
        fields = {k: v for k, v in got.plan.__dict__.items() if not k.startswith("_")}
        fields.update(idx=idx, overrides=list(overrides), repeat=repeat, config=mine, _like=got.plan)
        served = object.__new__(type(got.plan))
        served.__dict__.update(fields)
        return served

    def _class_key(self, config: dict[str, Any], fingerprints: Optional[dict[str, Optional[bytes]]],
                   overrides: Sequence[str], typed: Optional[Sequence[str]]) -> Optional[tuple]:
        """What fixes a class (module docstring); None when a section has no fingerprint."""
        if fingerprints is None:
            return None
        keys = tuple(config)
        known = self._sections.get((id(fingerprints), keys))  # the composer shares one a derived composition
        if known is None or known[0] is not fingerprints:
            sections = tuple(sorted(fingerprints.items()))
            if None in (fp for _, fp in sections) or any(
                    isinstance(v, (dict, list)) and k not in fingerprints for k, v in config.items()):
                sections = None  # a section without a fingerprint: planned in full
            known = self._sections[(id(fingerprints), keys)] = (fingerprints, sections)
        sections = known[1]
        if sections is None:
            return None
        lines = []
        for line in overrides:
            prefix, name = self._line_name(line)
            # a line that sets a top-level value is the point's value (read or not); any other
            # line (a section's option, a key inside a section, an addition) is kept whole
            keyed = name is not None and name in config and not isinstance(config[name], (dict, list))
            lines.append((prefix, name) if keyed else line)
        return (keys, sections, tuple(lines), None if typed is None else tuple(str(t) for t in typed))

    def _line_name(self, line: Any) -> tuple[str, Optional[str]]:
        """An override line's ``+``/``~`` prefix and its key when the key is top-level (no
        dot; None otherwise), worked out once a line."""
        got = self._lines.get(line)
        if got is None:
            text = str(line)
            rest = text.lstrip("+~")
            name = rest.split("=", 1)[0].split("@", 1)[0]
            got = self._lines[line] = (text[: len(text) - len(rest)], None if "." in name else name)
        return got
