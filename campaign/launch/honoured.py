"""Settings a point's trainer would not read, refused before anything is stored (issue #40).

A launch that accepted ``trainer.momentum=0.5`` under AdamW, or ``trainer.precision=bf16``
for a trainer that computes in fp32, would store a result silently different from the
one asked for. Each trainer declares what it does not read (``TrainerDef.unused``, and
``COMMON_UNUSED`` for rules every trainer shares: trainers/spec.py); a point whose
config SETS such a key, where the rule's condition holds, is refused in one line naming
why and the fix. Set means: its value differs from its default (the schema's for a
common key, the trainer declaration's for a ``trainer.params`` field), whether the
command line or a preset set it. A key at its default asks for what a trainer that
ignores it does anyway (fp32, no accumulation, no workers, ZeRO stage 0), so it passes:
every AdamW launch carries momentum's default 0.9. One exception: the dataset a trainer's
own conf picks (``TrainerDef.dataset``, when the point names none) brings its preset's
values, which the trainer asked for, not the user (ADE20K's 4 loader workers, which the
launch's synthetic stand-in of it does not read in SwinV2's lean loop): a ``dataset.*``
key of such a point is set only when an override names it.

Torch-free: the declarations are.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
from typing import Any, Mapping, Sequence

from campaign.catalogue.config import DatasetSpec, ExperimentSpec, TrainerSpec
from campaign.catalogue.dataset_label import names_dataset
from campaign.common.errors import ConfigError
from trainers.spec import COMMON_KEYS, COMMON_UNUSED, TrainerDef, Unused

_SECTIONS = {"trainer": TrainerSpec, "experiment": ExperimentSpec, "dataset": DatasetSpec}
_MISSING = object()
MISSING = _MISSING  # what ``lookup`` gives for a key a config lacks (campaign.launch.design reads it too)


def _plain(value: Any) -> Any:
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    return value


def common_default(key: str) -> Any:
    """The schema's default of one of ``COMMON_KEYS`` (``trainer.momentum`` -> 0.9); a list
    default comes as a new list."""
    value = _common_default(key)
    return list(value) if isinstance(value, list) else value


@functools.lru_cache(maxsize=None)
def _common_default(key: str) -> Any:
    section, name = key.split(".", 1)
    for f in dataclasses.fields(_SECTIONS[section]):
        if f.name == name:
            return _plain(f.default)
    raise KeyError(key)


def default_of(spec: TrainerDef, key: str) -> Any:
    """What ``key`` is when nobody sets it: a common key's schema default, a param's declared one."""
    if key.startswith("trainer.params."):
        return spec.defaults()[key[len("trainer.params."):]]
    return common_default(key)


def lookup(config: Mapping[str, Any], key: str) -> Any:
    """The value at a dotted ``key`` of a plain config; ``_MISSING`` when it has none."""
    node: Any = config
    for part in key.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return _MISSING
        node = node[part]
    return node


def _show(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_show(v) for v in value) + "]"
    return str(_plain(value))


def _matches(config: Mapping[str, Any], rule: Unused) -> bool:
    return all(_plain(lookup(config, k)) in [_plain(v) for v in values] for k, values in rule.when.items())


def rules_of(spec: TrainerDef) -> tuple[Unused, ...]:
    """The trainer's own rules, then the common ones (the first that holds is said)."""
    return tuple(spec.unused) + COMMON_UNUSED


def check_declared(spec: TrainerDef) -> None:
    """Refuse a declaration whose rules name a key the point has not (a typo would never refuse)."""
    params = set(spec.defaults())
    known = set(COMMON_KEYS) | {f"trainer.params.{p}" for p in params} | {"trainer.name", "dataset.name"}
    for rule in spec.unused:
        for key in (rule.key, *rule.when):
            if key not in known:
                raise ValueError(f"trainer={spec.name}: Unused rule names {key!r}, which is neither one of "
                                 f"COMMON_KEYS nor a trainer.params field ({', '.join(sorted(params))})")


def named_keys(overrides: Sequence[str]) -> set[str]:
    """The keys a point's overrides set (``+``/``++``/``~`` and ``@package`` stripped)."""
    return {str(line).lstrip("+~").split("=", 1)[0].split("@", 1)[0] for line in overrides or ()}


@dataclasses.dataclass(frozen=True)
class Finding:
    """A key a point sets that its trainer does not read there (one ``Unused`` rule that holds)."""

    key: str  # the dotted key
    value: Any  # its value in the point
    where: str  # the condition, as the point has it: "trainer.params.mode=inference"
    rule: Unused  # the rule that holds

    def line(self) -> str:
        """The refusal, ``<key>=<value> does nothing with <where> (<why>); <fix>``."""
        return f"{self.key}={_show(self.value)} does nothing with {self.where} ({self.rule.why}); {self.rule.fix}"


def unused_settings(config: Mapping[str, Any], spec: TrainerDef, overrides: Sequence[str] = ()) -> list[Finding]:
    """Every key the point sets that its trainer does not read under its config, once each
    (the first rule that holds); the arguments as ``check_honoured``'s."""
    named = named_keys(overrides)
    trainers_dataset = bool(spec.dataset) and not names_dataset(overrides)
    out: dict[str, Finding] = {}
    for rule in rules_of(spec):
        value = lookup(config, rule.key)
        if rule.key in out or value is _MISSING or _plain(value) == default_of(spec, rule.key) or not _matches(config, rule):
            continue
        if trainers_dataset and rule.key.startswith("dataset.") and rule.key not in named:
            continue
        where = " and ".join(f"{k}={_show(lookup(config, k))}" for k in rule.when) or f"trainer={spec.name}"
        out[rule.key] = Finding(rule.key, value, where, rule)
    return list(out.values())


def check_honoured(config: Mapping[str, Any], spec: TrainerDef, overrides: Sequence[str] = ()) -> None:
    """Refuse a point that sets a key its trainer does not read under its config.

    ``config``: the point's resolved config with ``trainer.params`` completed from the
    declaration and its ``dataset`` section as the launch made it (plan_point);
    ``overrides``: the point's (the module docstring's exception)."""
    found = unused_settings(config, spec, overrides)
    if found:
        raise ConfigError(found[0].line())
