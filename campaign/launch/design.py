"""A study preset's design against its points: what the dry run shows before the table, and
what a user's override did to it (issue #47).

The design is data beside the preset (``study.design``, campaign/catalogue/design.py). Here:

- ``design_lines``: each factor with its values, point count and the figures it feeds, then
  campaign's own choices; printed by the dry run before its table;
- ``override_lines``: an override from the command line that replaces a factor's values
  (``experiment.global_batch=512 replaces the batch-size factor (64..1,024; Figs 2, 4):
  they will have one point``) or a setting the text fixes, said in one line each;
- ``relabel``: points that an override turned into another kind (a strong-scaling point
  given a share of the data per GPU) are relabelled (``vit_strong+dataset_fraction_per_gpu=0.2``),
  never left under their old name, and said in one line;
- ``untouched_lines``: a key that some points do not read applies to the others; the line
  names those it does not touch (``PointPlan.untouched``, set by plan_point).

Pure functions of the points' resolved configs and the command line's overrides.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping, Optional, Sequence

from campaign.catalogue.config import GROUPS
from campaign.launch.honoured import MISSING, lookup

# the command line's overrides that are no setting of a point
_NOT_SETTINGS = ("study", "dry_run", "hydra")


def norm(value: Any) -> str:
    """A config value as the command line writes it (``null``, ``true``, ``1024``)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    text = str(value)
    return {"None": "null", "True": "true", "False": "false"}.get(text, text)


def value_at(config: Mapping[str, Any], key: str) -> Any:
    """A point's value of ``key``: a config group's option name, else the dotted key's value."""
    if key in GROUPS:
        return (config.get(key) or {}).get("name", MISSING)
    return lookup(config, key)


def typed_settings(overrides: Iterable[str]) -> dict[str, list[str]]:
    """The command line's settings: key -> its values as typed (a sweep's several), the
    preset's pick (``study=``), dry-run flags and Hydra's own keys left out."""
    out: dict[str, list[str]] = {}
    for line in overrides or ():
        key, eq, value = str(line).lstrip("+~").partition("=")
        key = key.split("@", 1)[0]
        if not eq or key.split(".", 1)[0] in _NOT_SETTINGS:
            continue
        out[key] = [v.strip() for v in value.split(",")] if "," in value and "[" not in value else [value.strip()]
    return out


def design_of(points: Sequence[Any]) -> Optional[Mapping[str, Any]]:
    """The points' study design (``study.design``), or None when they have none."""
    if not points:
        return None
    return ((points[0].config.get("study") or {}).get("design")) or None


def _matches(config: Mapping[str, Any], where: Mapping[str, Any]) -> bool:
    return all(norm(value_at(config, k)) == norm(v) for k, v in (where or {}).items())


def factor_points(design: Mapping[str, Any], factor: Mapping[str, Any], points: Sequence[Any],
                  typed: Mapping[str, list[str]]) -> list[Any]:
    """The points that vary ``factor``: those of its ``where``, at every other factor's
    default (one factor at a time), a default the command line replaced with one value
    taken as that value."""
    mine = {factor["key"], *(factor.get("crossed") or ())}
    defaults = {k: norm(v) for k, v in (design.get("defaults") or {}).items() if k not in mine}
    defaults.update({k: vs[0] for k, vs in typed.items() if k in defaults and len(vs) == 1})
    defaults = {k: v for k, v in defaults.items() if k not in (factor.get("where") or {})}
    return [p for p in points if _matches(p.config, factor.get("where") or {}) and _matches(p.config, defaults)]


def _num(text: str) -> Optional[float]:
    try:
        return float(text)
    except ValueError:
        return None


def shown_values(values: Sequence[Any]) -> str:
    """Numbers as their range (``64..1,024``; two as ``16, 64``), names as a list."""
    texts = [norm(v) for v in values]
    nums = [_num(t) for t in texts]
    if len(texts) > 2 and all(n is not None for n in nums):
        lo, hi = min(nums), max(nums)  # type: ignore[type-var]
        return f"{lo:,.10g}..{hi:,.10g}"
    return ", ".join(texts)


def feeds_of(factors: Sequence[Mapping[str, Any]]) -> str:
    """``Figs 2, 4`` from the factors' feeds (``Fig 2``, ``Fig 4``), in order, once each."""
    feeds = list(dict.fromkeys(f for factor in factors for f in (factor.get("feeds") or ())))
    figs = [f[4:] for f in feeds if f.startswith("Fig ") and not f.startswith("Figs ")]
    rest = [f for f in feeds if not (f.startswith("Fig ") and not f.startswith("Figs "))]
    out = ([("Fig " if len(figs) == 1 else "Figs ") + ", ".join(figs)] if figs else []) + rest
    return "; ".join(out)


def figures_of(config: Mapping[str, Any]) -> str:
    """The study's figures one point feeds (``Fig 1``): its design's factors it is a point of
    (their ``where``, a value of theirs, every other factor at its default); '' without."""
    design = (config.get("study") or {}).get("design") or {}
    mine = []
    for f in (design.get("factors") or {}).values():
        if not f or not _matches(config, f.get("where") or {}):
            continue
        if norm(value_at(config, f["key"])) not in [norm(v) for v in f.get("values") or ()]:
            continue
        skip = {f["key"], *(f.get("crossed") or ()), *(f.get("where") or {})}
        if _matches(config, {k: v for k, v in (design.get("defaults") or {}).items() if k not in skip}):
            mine.append(f)
    return feeds_of(mine)


def _points(n: int) -> str:
    return "one point" if n == 1 else f"{n:,} points"


def design_lines(points: Sequence[Any], overrides: Sequence[str] = ()) -> list[str]:
    """The study's design as the dry run shows it before its points: each factor (its values,
    its points, the figures it feeds), then campaign's own choices; [] without a design."""
    design = design_of(points)
    if not design:
        return []
    typed = typed_settings(overrides)
    name = points[0].config["study"]["name"]
    lines = [f"design of study={name} (conf/study/{name}.yaml, study.design):"]
    factors = [f for f in (design.get("factors") or {}).values() if f]
    width = max((len(f["key"]) for f in factors), default=0)
    for f in factors:
        mine = factor_points(design, f, points, typed)
        values = list(dict.fromkeys(norm(value_at(p.config, f["key"])) for p in mine))
        whose = " ".join(f"{k}={norm(v)}" for k, v in (f.get("where") or {}).items())
        feeds = feeds_of([f]) or "-"
        lines.append(f"  factor {f['key']:<{width}}  {f['name']}: {', '.join(values) or '(none)'}; "
                     f"{_points(len(mine))}{' with ' + whose if whose else ''}; {feeds}"
                     + ("; campaign's addition" if f.get("campaign") else ""))
    fixed = list((design.get("fixed") or {}).values())
    if fixed:
        lines.append(f"  fixed by the text: " + ", ".join(f"{x['key']}={x['value']} ({x['source']})" for x in fixed))
    for c in (design.get("choices") or {}).values():
        lines.append(f"  campaign's choice: {c['key']}={c['value']} ({c['why']})")
    return lines


def override_lines(points: Sequence[Any], overrides: Sequence[str]) -> list[str]:
    """One line per command-line override that replaces a factor's values or a setting the
    study's text fixes (module docstring); [] without a design."""
    design = design_of(points)
    if not design:
        return []
    typed = typed_settings(overrides)
    lines = []
    factors = [f for f in (design.get("factors") or {}).values() if f]
    for key, values in typed.items():
        mine = [f for f in factors if f["key"] == key]
        if mine:
            stated = list(dict.fromkeys(v for f in mine for v in f.get("values") or ()))
            counts = [len({norm(value_at(p.config, key)) for p in factor_points(design, f, points, typed)})
                      for f in mine]
            said = _points(counts[0]) if len(set(counts)) == 1 else " and ".join(_points(n) for n in counts)
            lines.append(f"{key}={','.join(values)} replaces the {mine[0]['name']} factor ({shown_values(stated)}; "
                         f"{feeds_of(mine) or 'no figure'}): they will have {said}")
        for fx in (design.get("fixed") or {}).values():
            if fx["key"] == key and [norm(fx["value"])] != values:
                extra = f"; {fx['changed']}" if fx.get("changed") else ""
                lines.append(f"{key}={','.join(values)} replaces the study's {key}={fx['value']} "
                             f"({fx['source']}: \"{fx['quote']}\"){extra}")
    return lines


def relabel(points: Sequence[Any], overrides: Sequence[str]) -> list[str]:
    """Relabel the points an override turned into another kind (``KindSpec``): their
    experiment's name gains the key and value (``vit_strong+dataset_fraction_per_gpu=0.2``),
    so that nothing stored or harvested calls them what they are not; one line per kind."""
    design = design_of(points)
    if not design:
        return []
    typed = typed_settings(overrides)
    lines = []
    for kind in (design.get("kinds") or {}).values():
        for key in kind.get("unset") or ():
            if key not in typed:
                continue
            turned = [p for p in points if _matches(p.config, kind.get("where") or {})
                      and value_at(p.config, key) not in (None, MISSING)]
            if not turned:
                continue
            labels = []
            for p in turned:  # a new section: a point's sections may be shared with others (planmemo.py)
                exp = p.config["experiment"]
                p.config["experiment"] = exp = dict(exp, name=f"{exp['name']}+{key.rsplit('.', 1)[-1]}="
                                                             f"{norm(value_at(p.config, key))}")
                labels.append(exp["name"])
            was = ", ".join(f"{k}={norm(v)}" for k, v in (kind.get("where") or {}).items())
            feeds = feeds_of([kind])
            lines.append(f"{key}={','.join(typed[key])} turns the {kind['name']} points ({was}"
                         f"{'; ' + feeds if feeds else ''}) into {kind['becomes']}: {_points(len(turned))} "
                         f"relabelled {', '.join(dict.fromkeys(labels))}")
    return lines


def untouched_lines(points: Sequence[Any]) -> list[str]:
    """``trainer.lr=0.001 applies to 27 of the 35 points; the 8 with trainer.params.mode=inference
    do not read it (...)``: a command-line key some points do not read (``PointPlan.untouched``)."""
    said: dict[str, list[Any]] = {}
    for p in points:
        for key, why, _ in getattr(p, "untouched", ()) or ():
            said.setdefault(key, []).append((p, why))
    lines = []
    for key, hit in said.items():
        whys = list(dict.fromkeys(why for _, why in hit))
        lines.append(f"{key} applies to {len(points) - len(hit):,} of the {len(points):,} points; "
                     f"the {len(hit):,} {'; '.join(whys)}")
    return lines
