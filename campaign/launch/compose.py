"""Fast composition of many sweep points.

Each distinct combination of config-group choices (platform=..., trainer=...) is
composed once by Hydra. A point's plain value overrides (gpus=2, seed=3,
experiment.images_per_gpu=16) are checked and converted once per distinct override,
with Hydra's own semantics on a copy of that composition; each point then costs a
copy of the *resolved* plain config and a few assignments. A point whose overrides
touch a value that interpolations depend on (results_dir, ...), or that the cache
cannot serve (package renames, +/~ overrides), is composed and resolved in full.

Public Hydra and OmegaConf APIs only: the config loader's ``load_sweep_config`` and
``list_groups``, Hydra's override parser, ``OmegaConf.update`` (what Hydra applies a
plain override with) and item assignment for a leaf's conversion.
"""

from __future__ import annotations

import copy
import marshal
import re
from typing import Any, Optional, Sequence

from omegaconf import DictConfig, ListConfig, OmegaConf, open_dict

from campaign.common.memo import fingerprint

_INTERP = re.compile(r"\$\{([^}:]+)\}")
# a subset of Hydra's override grammar: a dotted key of IDs (no package, no group path), a
# decimal integer as Hydra's INT reads it (no '_', no leading zero: '012' is a string there)
_PLAIN_INT = re.compile(r"(?P<key>[A-Za-z_][\w\-]*(?:\.[A-Za-z_][\w\-]*)*)=(?P<value>-?(?:0|[1-9][0-9]*))\Z")
# value types a schema's leaf keeps as they are when one of them is kept: an OmegaConf node
# converts by type (IntegerNode takes every int unchanged, StringNode every str, AnyNode all)
_KEPT_TYPES = (int, float, bool, str)


class _Base:
    """One composed combination of group choices: the DictConfig, its resolved plain
    form, and the keys that interpolations read (overriding those needs a full resolve)."""

    def __init__(self, cfg: DictConfig):
        self.cfg = cfg
        self.plain = OmegaConf.to_container(cfg, resolve=True, throw_on_missing=True, enum_to_str=True)
        # each section's fingerprint (campaign/common/memo.py), shared by the points that leave it as it is
        self.fingerprints = {k: fingerprint(v) for k, v in self.plain.items() if isinstance(v, (dict, list))}
        # in-section value lines -> (their composition, its fingerprints): PointComposer._derived
        self.derived: dict[tuple[str, ...], tuple[dict[str, Any], dict[str, Optional[bytes]]]] = {}
        raw = OmegaConf.to_container(cfg, resolve=False)
        self.interpolated: set[str] = set()
        self._scan(raw)
        self.values: dict[str, Any] = {}  # override line -> converted value (or the exception)
        self._depends: dict[str, bool] = {}  # key -> whether an interpolation reads it
        # (key, value type) whose values the schema keeps as they are (see PointComposer._leaf)
        self.as_given: set[tuple[str, type]] = set()

    def _scan(self, node: Any) -> None:
        if isinstance(node, dict):
            for v in node.values():
                self._scan(v)
        elif isinstance(node, list):
            for v in node:
                self._scan(v)
        elif isinstance(node, str):
            self.interpolated.update(m.strip() for m in _INTERP.findall(node))

    def depends_on(self, key: str) -> bool:
        got = self._depends.get(key)
        if got is None:
            got = self._depends[key] = any(k == key or k.startswith(key + ".") or key.startswith(k + ".")
                                           for k in self.interpolated)
        return got


class PointComposer:
    def __init__(self, loader: Any, master: DictConfig):
        from hydra.core.override_parser.overrides_parser import OverridesParser

        self.loader = loader
        self.master = master
        self.parser = OverridesParser.create(config_loader=loader)
        self._parsed: dict[str, Any] = {}
        self._bases: dict[tuple[str, ...], _Base] = {}
        self._is_group: dict[str, bool] = {}
        self._group_names: dict[str, set[str]] = {}
        self.full_composes = 0

    def _parse(self, line: str):
        got = self._parsed.get(line)
        if got is None:
            got = self._parsed[line] = self._plain_int(line) or self.parser.parse_overrides([line])[0]
        return got

    def _plain_int(self, line: str) -> Any:
        """``key=123`` (a dotted key, a decimal integer: what ``seed=range(0,1250)`` sweeps)
        as the Override Hydra's parser makes of it, without the parser (a millisecond a
        line); None for anything else."""
        m = _PLAIN_INT.match(line)
        if m is None:
            return None
        from hydra.core.override_parser.types import Override, OverrideType, ValueType

        return Override(type=OverrideType.CHANGE, key_or_group=m["key"], value_type=ValueType.ELEMENT,
                        _value=int(m["value"]), input_line=line, config_loader=self.loader)

    def _group(self, ov: Any) -> bool:
        """Whether the override picks a config group option (composed by Hydra) rather than
        setting a value."""
        key = ov.key_or_group
        if key not in self._is_group:
            parent, _, name = key.rpartition("/")
            self._is_group[key] = (
                ov.package is not None
                or key.startswith("hydra")
                or name in self._groups(parent)
            )
        return self._is_group[key]

    def _groups(self, parent: str) -> set[str]:
        if parent not in self._group_names:
            self._group_names[parent] = set(self.loader.list_groups(parent))
        return self._group_names[parent]

    def _load(self, overrides: Sequence[str]) -> DictConfig:
        cfg = self.loader.load_sweep_config(self.master, list(overrides))
        with open_dict(cfg):
            cfg.pop("hydra", None)  # Hydra's own node: most of the tree, none of the point
        self.full_composes += 1
        return cfg

    def _base(self, groups: tuple[str, ...]) -> _Base:
        base = self._bases.get(groups)
        if base is None:
            base = self._bases[groups] = _Base(self._load(groups))
        return base

    @staticmethod
    def _apply(cfg: DictConfig, overrides: Sequence[Any]) -> None:
        """Plain ``key=value`` overrides, as Hydra applies them (``OmegaConf.update`` with
        merge), with Hydra's messages for a key the config lacks or a value it refuses."""
        from hydra.errors import ConfigCompositionException
        from omegaconf.errors import ConfigAttributeError, ConfigKeyError, OmegaConfBaseException

        for ov in overrides:
            try:
                try:
                    OmegaConf.update(cfg, ov.key_or_group, ov.value(), merge=True)
                except (ConfigAttributeError, ConfigKeyError) as ex:
                    raise ConfigCompositionException(
                        f"Could not override '{ov.key_or_group}'.\nTo append to your config use +{ov.input_line}"
                    ) from ex
            except OmegaConfBaseException as ex:
                raise ConfigCompositionException(f"Error merging override {ov.input_line}") from ex

    def _value(self, base: _Base, ov: Any) -> Any:
        """The override's value as the schema converts it (checked once per distinct override)."""
        line = ov.input_line
        if line not in base.values:
            value = ov.value()
            if (ov.key_or_group, type(value)) in base.as_given and _plain_scalar(value):
                return value
            leaf = self._leaf(base, ov)
            if leaf is not None:
                base.values[line] = leaf
                return leaf[0]
            cfg = copy.deepcopy(base.cfg)
            try:
                self._apply(cfg, [ov])
                base.values[line] = OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)
            except Exception as exc:  # raised again for every point that uses it
                base.values[line] = exc
        got = base.values[line]
        if isinstance(got, Exception):
            raise got
        if isinstance(got, tuple):  # a leaf's converted value
            return got[0]
        node = got
        for part in ov.key_or_group.split("."):
            node = node[part]
        return node

    @staticmethod
    def _leaf(base: _Base, ov: Any) -> tuple[Any] | None:
        """Validate and convert a scalar override against the existing leaf it sets, by
        assigning it there (OmegaConf converts and checks on assignment, as for Hydra's
        override) and putting the old value back: no copy of the whole config. None when
        the override does not set an existing plain leaf (the general path handles it)."""
        import enum

        from omegaconf.errors import ValidationError

        value = ov.value()
        if isinstance(value, (dict, list)):
            return None
        parent_key, _, last = ov.key_or_group.rpartition(".")
        parent = OmegaConf.select(base.cfg, parent_key) if parent_key else base.cfg
        if not isinstance(parent, DictConfig) or last not in parent:
            return None
        if OmegaConf.is_missing(parent, last) or OmegaConf.is_interpolation(parent, last):
            return None
        old = parent[last]
        if isinstance(old, (DictConfig, ListConfig)):
            return None
        try:
            parent[last] = value
            converted = parent[last]
        except ValidationError as exc:
            from campaign.common.errors import ConfigError

            msg = str(exc).splitlines()[0].replace("$VALUE_TYPE", type(value).__name__).replace("$VALUE", str(value))
            raise ConfigError(f"{ov.input_line}: {msg}") from None
        finally:
            parent[last] = old
        if type(converted) is type(value) and converted == value and _plain_scalar(value):
            # kept as given: so is every value of its type at this leaf (_KEPT_TYPES), unchecked
            base.as_given.add((ov.key_or_group, type(value)))
        return (converted.name if isinstance(converted, enum.Enum) else converted,)

    def compose(self, overrides: Sequence[str]) -> dict[str, Any]:
        """The point's resolved config as a plain dict (without Hydra's node), its own to change."""
        config, fingerprints = self.compose_shared(overrides)
        return config if fingerprints is None else plain_copy(config)

    def compose_shared(self, overrides: Sequence[str]) -> tuple[dict[str, Any], Optional[dict[str, Optional[bytes]]]]:
        """``compose``'s config with the sections the point's overrides leave as they are
        shared with every other point of its group choices (the caller must not change
        them; those its overrides set are copied along the keys' paths), and each
        section's fingerprint (campaign/common/memo.py: the class of a plan,
        campaign/launch/planmemo.py); (its own config, None) where the point was composed in full."""
        parsed = [self._parse(o) for o in overrides]
        picks: list[str] = []  # the group choices' lines
        values: list[Any] = []  # the value overrides
        for o in parsed:
            if self._group(o):
                picks.append(o.input_line)
            else:
                values.append(o)
        base = self._base(tuple(picks))
        simple = all(not (o.is_add() or o.is_force_add() or o.is_delete()) and not base.depends_on(o.key_or_group)
                     for o in values)
        if not simple:  # the general path: Hydra's semantics, then a full resolve
            if all(not (o.is_add() or o.is_force_add() or o.is_delete()) for o in values):
                cfg = copy.deepcopy(base.cfg)
                self._apply(cfg, values)
            else:  # +key / ++key / ~key: Hydra composes the point in full
                cfg = self._load([o.input_line for o in parsed])
            return OmegaConf.to_container(cfg, resolve=True, throw_on_missing=True, enum_to_str=True), None
        # values inside sections (platform.cpus_per_task=1) make a derived composition, shared
        # by the points that set the same ones; top-level values (gpus=2, seed=3) are the point's
        inner = [o for o in values if "." in o.key_or_group]
        tops = [o for o in values if "." not in o.key_or_group]
        whole = {t.key_or_group for t in tops}
        if any(o.key_or_group.split(".", 1)[0] in whole for o in inner):
            inner, tops = values, []  # a section set whole and inside: in the order given, this point's own
        plain, fingerprints = self._derived(base, inner)
        plain = dict(plain)
        for o in tops:
            key, value = o.key_or_group, self._value(base, o)
            if isinstance(value, (dict, list)):
                plain[key] = plain_copy(value)
                fingerprints = dict(fingerprints)
                fingerprints[key] = fingerprint(plain[key])
            else:
                plain[key] = value  # a scalar is not shared
                if key in fingerprints:
                    fingerprints = {k: v for k, v in fingerprints.items() if k != key}
        return plain, fingerprints

    def _derived(self, base: _Base, inner: Sequence[Any]) -> tuple[dict[str, Any], dict[str, Optional[bytes]]]:
        """``base``'s plain config with ``inner``'s values set (each section on their paths
        copied, the rest shared) and its sections' fingerprints, made once per distinct set of
        lines; never changed after (the points that share it copy its top level only)."""
        key = tuple(o.input_line for o in inner)
        got = base.derived.get(key)
        if got is not None:
            return got
        plain = dict(base.plain)
        copied: set[str] = set()  # the paths this composition has its own copies of
        fingerprints = dict(base.fingerprints)
        for o in inner:
            *path, last = o.key_or_group.split(".")
            node, where = plain, ""
            for part in path:
                where += "." + part
                child = node[part]
                if where not in copied:
                    child = node[part] = copy.copy(child)
                    copied.add(where)
                node = child
            value = self._value(base, o)
            node[last] = plain_copy(value) if isinstance(value, (dict, list)) else value
            top = path[0] if path else last
            fingerprints.pop(top, None)
            if isinstance(plain[top], (dict, list)):
                fingerprints[top] = fingerprint(plain[top])
        if len(base.derived) >= 4096:  # a sweep of many distinct inner values: kept for the latest
            base.derived.clear()
        got = base.derived[key] = (plain, fingerprints)
        return got


def _plain_scalar(value: Any) -> bool:
    """A value an OmegaConf leaf of its type keeps unchanged: an int, float, bool, or a str
    that is no interpolation and not ``???`` (missing)."""
    return type(value) in _KEPT_TYPES and not (type(value) is str and ("$" in value or value == "???"))


def plain_copy(value: Any) -> Any:
    """A deep copy of a plain config (dicts, lists, strings, numbers, booleans, None), as
    ``copy.deepcopy`` makes it, in a fraction of its time: ``marshal`` copies those types
    exactly (a 10,000-point launch copied its base config 10,000 times). Anything else
    marshal refuses goes through ``copy.deepcopy``."""
    try:
        return marshal.loads(marshal.dumps(value))
    except ValueError:
        return copy.deepcopy(value)
