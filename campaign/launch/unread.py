"""A setting a point's trainer does not read, judged by where its value came from (issue #47).

``campaign/launch/honoured.py`` finds the keys a point sets that its trainer ignores there
(``unused_settings``). What the launch then does depends on who set the value:

- **the command line** (a key the user typed): it applies to the points that read it; a
  point that does not is planned at the key's default and remembers it
  (``PointPlan.untouched``), the dry run says which points it does not touch
  (campaign/launch/design.py ``untouched_lines``), and the launch is refused only when no
  point reads it (``check_read_somewhere``);
- **a study preset** (its grid, ``hydra.sweeper``, or its own body): refused in one line
  that names the preset as the value's source and what to type instead (the key at its
  default, which replaces the preset's);
- **a config group's own default** (conf/dataset/ade20k.yaml's 4 loader workers, for a
  variant that reads none): dropped, the point planned at the key's default, with a note.

Torch-free.
"""

from __future__ import annotations

import functools
from typing import AbstractSet, Any, Optional, Sequence

from campaign.common.errors import ConfigError
from campaign.launch.honoured import Finding, _show, default_of, named_keys, unused_settings
from trainers.spec import TrainerDef


@functools.lru_cache(maxsize=None)
def _preset(name: str) -> tuple[Any, tuple[str, ...]]:
    """A study preset's YAML (its ``_global_`` body) and the presets it includes."""
    from importlib import resources

    import yaml

    try:
        text = resources.files("campaign_conf").joinpath("study", f"{name}.yaml").read_text()
        body = yaml.safe_load(text) or {}
    except (OSError, yaml.YAMLError, ModuleNotFoundError):
        return {}, ()
    parents = tuple(d for d in body.get("defaults") or () if isinstance(d, str) and d != "_self_")
    return body, parents


def preset_sets(name: Optional[str], key: str) -> bool:
    """Whether study preset ``name`` (or a preset it includes) sets ``key`` in its body."""
    if not name:
        return False
    body, parents = _preset(name)
    node: Any = body
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            node = None
            break
        node = node[part]
    return node is not None or any(preset_sets(p, key) for p in parents)


def origin(finding: Finding, config: dict[str, Any], overrides: Sequence[str], typed: Optional[AbstractSet[str]]) -> str:
    """Where the value came from: ``typed`` (the command line), ``sweep`` (a preset's grid),
    ``preset`` (a preset's body) or ``default`` (its config group's option)."""
    named = named_keys(overrides)
    if finding.key in (typed if typed is not None else named):
        return "typed"
    if finding.key in named:
        return "sweep"
    if preset_sets((config.get("study") or {}).get("name"), finding.key):
        return "preset"
    return "default"


def _reset(config: dict[str, Any], key: str, value: Any) -> None:
    node = config
    parts = key.split(".")
    for part in parts[:-1]:
        node = node[part]
    node[parts[-1]] = value


def settle(config: dict[str, Any], spec: TrainerDef, overrides: Sequence[str],
           typed: Optional[AbstractSet[str]]) -> tuple[list[tuple[str, str, str]], list[str]]:
    """Apply the module docstring's rules to one point's ``config`` (changed in place: a key
    not read there back at its default); ``typed``: the keys the command line set (None:
    every override of the point). Returns (the typed keys it does not read, as
    ``(key=value, why, refusal)``, the notes of defaults dropped); raises ``ConfigError``
    for a preset's value."""
    untouched: list[tuple[str, str, str]] = []
    dropped: list[str] = []
    for f in unused_settings(config, spec, overrides):
        said = f"{f.key}={_show(f.value)}"
        default = default_of(spec, f.key)
        source = origin(f, config, overrides, typed)
        if source == "typed":
            untouched.append((said, f"with {f.where} do not read it ({f.rule.why})", f.line()))
        elif source == "default":
            group = f.key.split(".", 1)[0]
            picked = [o.split("=", 1)[1] for o in overrides if str(o).lstrip("+~").startswith(f"{group}=")]
            name = picked[-1] if picked else (config.get(group) or {}).get("name")
            dropped.append(f"{said} is {group}={name}'s default, which nothing reads with {f.where} "
                           f"({f.rule.why}): dropped")
        else:
            study = (config.get("study") or {}).get("name")
            where = "its grid, hydra.sweeper" if source == "sweep" else f"conf/study/{study}.yaml"
            fix = f.rule.fix[len("drop it or "):] if f.rule.fix.startswith("drop it or ") else f.rule.fix
            fix = fix[len("drop it, or "):] if fix.startswith("drop it, or ") else fix
            raise ConfigError(f"{said} does nothing with {f.where} ({f.rule.why}); {said} is study={study}'s "
                              f"({where}), not the command line's: add {f.key}={_show(default)} to replace it, or {fix}")
        _reset(config, f.key, default)
    return untouched, dropped


def check_read_somewhere(points: Sequence[Any]) -> None:
    """Refuse a command-line key that no point reads (each point remembers the ones it did
    not, ``PointPlan.untouched``): the first point's refusal, as a lone point would get it."""
    if not points:
        return
    common = None
    for p in points:
        mine = {u[0]: u[2] for u in getattr(p, "untouched", ()) or ()}
        common = mine if common is None else {k: v for k, v in common.items() if k in mine}
        if not common:
            return
    raise ConfigError(next(iter(common.values())) + ("" if len(points) == 1 else
                                                     f" (no point of the {len(points):,} reads it)"))
