"""A study's published tables and figures as data (STYLE.md rule 18): one declaration per
study, beside its preset (``conf/study/figures/<preset>.yaml``), typed here.

Each item is one table or figure of the study's text: its ``number`` as the text numbers it
(``fig04``, ``fig01a``, ``tab03``), ``kind``, ``caption``, the quantity's ``definition`` (the
study's equation or sentence) and ``source`` (where it stands in the text: the section and the
sentence, quoted), how it is drawn (``draw``: which harvested quantity, ``x``, ``series``,
``where`` filters on a point's columns or dotted settings, ``y`` panels with their units as
published), or why it is not made (``unmade``: the text gives no numbers, it is outside the
preset's grid, or it measures nothing). ``campaign figures`` (campaign/harvest/declared_run.py)
draws every item with one renderer (declared_draw.py). A reduced twin (``twin``: its preset's
``study.name``) reads the same items with ``twin_where`` in place of the same keys of ``where``
(its defaults are not the study's). Stdlib and PyYAML only: no polars, no matplotlib.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional

from campaign.common.errors import ConfigError

FOLDER = ("study", "figures")  # under the campaign_conf package (conf/ in the repository)
KINDS = ("figure", "table")
# how an item is drawn, each by declared_draw.py: a line per series of a harvested table's
# column(s) (line), the study's computation/communication stack (stack), one phase of it as
# lines (phase), the platform comparison's grouped bars (comparison), loss or accuracy per
# iteration or epoch (convergence), the columns of a table as rows (table)
DRAWS = ("line", "stack", "phase", "comparison", "convergence", "table")
LINE_TABLES = ("scaling", "utilisation", "throughput")
# a convergence item's x and y: loss at each iteration, loss per epoch (with the epochs to its
# threshold), test accuracy per epoch, loss and test accuracy per epoch side by side
VIEWS = ("iterations", "epochs", "accuracy", "loss_accuracy")
IDEALS = ("gpus", "one")  # a panel's dashed ideal: S = N, or 1
# why an item is not made (index.json's status); "made" and "no_points" are found, not declared
STATUS = {
    "made": "made",
    "no_points": "no points for it in these campaigns",
    "no_numbers": "the text gives no numbers",
    "outside_grid": "outside the preset's grid",
    "not_measured": "nothing measured (a diagram or a specification)",
}
DECLARED_STATUS = ("no_numbers", "outside_grid", "not_measured")


@dataclass(frozen=True)
class Source:
    """Where an item stands in the study's text."""

    where: str  # the section (and table or equation) it stands in, e.g. "section 4.2, Table 3"
    quote: str  # the text's own sentence, verbatim (tests find it in the text)


@dataclass(frozen=True)
class Panel:
    """One y axis of a line figure: a harvested column in the study's unit."""

    column: str  # the harvested table's column (time_s, speedup, gpu_util_study, ...)
    label: str  # the y axis label, with its unit as published
    title: str = ""  # the panel's title ("" : the item's caption)
    multiply: float = 1.0  # stored value x multiply / divide = the published unit (100: a share in %)
    divide: float = 1.0  # (3600: seconds in hours)
    ideal: Optional[str] = None  # the dashed ideal: gpus (S = N) or one (efficiency 1), else none

    def scaled(self, value: Optional[float]) -> Optional[float]:
        """A stored value in the published unit (None stays None)."""
        return None if value is None else value * self.multiply / self.divide


@dataclass(frozen=True)
class Unmade:
    """Why an item is not made from any campaign of the preset."""

    status: str  # one of DECLARED_STATUS
    why: str  # one line: what the text or the grid lacks, and what gives it instead


@dataclass(frozen=True)
class Item:
    """One published table or figure."""

    number: str  # the study's own numbering: fig04, fig01a, tab03 (the output files' stem)
    kind: str  # figure or table
    caption: str  # the text's caption (or its panel's)
    definition: str  # the quantity as the study defines it (its equation or sentence)
    source: Source  # where the definition stands in the text
    draw: Optional[str] = None  # one of DRAWS (None: unmade)
    table: str = "scaling"  # a line or table item's harvested table (LINE_TABLES)
    x: str = "gpus"  # the x axis: gpus, or a varying setting (experiment.global_batch), epoch, iteration
    series: tuple[str, ...] = ()  # what makes one line or bar group, as published (the legend names what varies)
    units: str = ""  # the units as published
    where: Mapping[str, tuple] = field(default_factory=dict)  # filters: a point column or dotted setting -> values
    twin_where: Mapping[str, tuple] = field(default_factory=dict)  # the twin's values of some of those keys
    y: tuple[Panel, ...] = ()  # a line item's panels, side by side
    columns: tuple[str, ...] = ()  # a table item's columns
    phase: Optional[str] = None  # a phase item's breakdown row (study.compute, study.comm_sync)
    view: Optional[str] = None  # a convergence item's view (VIEWS)
    unmade: Optional[Unmade] = None  # why it is not made (then no draw)

    def filters(self, twin: bool) -> dict[str, list]:
        """The ``--where`` filters of this item: the twin's values in place of the study's."""
        out = {k: list(v) for k, v in self.where.items()}
        if twin:
            out.update({k: list(v) for k, v in self.twin_where.items()})
        return out


@dataclass(frozen=True)
class StudyFigures:
    """A study's declared tables and figures."""

    study: str  # the preset's study.name (conf/study/<study>.yaml)
    text: str  # the study's text (study.text: the preset and its twin share it)
    items: tuple[Item, ...]
    twin: Optional[str] = None  # the reduced twin's study.name

    def item(self, number: str) -> Item:
        return next(i for i in self.items if i.number == number)


def _fields(cls) -> set[str]:
    return {f.name for f in dataclasses.fields(cls)}


def _typed(cls, raw: Any, at: str, **converted):
    """``cls(**raw)``, unknown or missing fields refused in one line naming the valid ones."""
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{at}: expected a mapping of {', '.join(sorted(_fields(cls)))}")
    unknown = sorted(set(raw) - _fields(cls))
    if unknown:
        raise ConfigError(f"{at}: unknown field(s) {', '.join(unknown)}; valid: {', '.join(sorted(_fields(cls)))}")
    try:
        return cls(**{**raw, **converted})
    except TypeError as exc:
        raise ConfigError(f"{at}: {exc}") from None


def _filters(raw: Any, where: str) -> dict[str, tuple]:
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{where}: expected KEY: [VALUES]")
    return {str(k): tuple(v if isinstance(v, list) else [v]) for k, v in raw.items()}


def parse_item(raw: Mapping, where: str) -> Item:
    """One item of a declaration, checked: a known kind and draw, a source, and either a
    draw or an unmade reason."""
    raw = dict(raw)
    at = f"{where} {raw.get('number', '?')}"
    item = _typed(Item, raw, at,
                  source=_typed(Source, raw.get("source"), f"{at} source"),
                  series=tuple(raw.get("series") or ()), columns=tuple(raw.get("columns") or ()),
                  where=_filters(raw.get("where") or {}, f"{at} where"),
                  twin_where=_filters(raw.get("twin_where") or {}, f"{at} twin_where"),
                  y=tuple(_typed(Panel, p, f"{at} y") for p in raw.get("y") or ()),
                  unmade=_typed(Unmade, raw["unmade"], f"{at} unmade") if raw.get("unmade") else None)
    if item.kind not in KINDS:
        raise ConfigError(f"{at}: kind {item.kind!r}; available: {', '.join(KINDS)}")
    if (item.draw is None) == (item.unmade is None):
        raise ConfigError(f"{at}: give either draw (one of {', '.join(DRAWS)}) or unmade (why it is not made)")
    if item.unmade is not None and item.unmade.status not in DECLARED_STATUS:
        raise ConfigError(f"{at}: unmade status {item.unmade.status!r}; available: {', '.join(DECLARED_STATUS)}")
    if item.draw is not None and item.draw not in DRAWS:
        raise ConfigError(f"{at}: draw {item.draw!r}; available: {', '.join(DRAWS)}")
    if item.draw in ("line", "table") and item.table not in LINE_TABLES:
        raise ConfigError(f"{at}: table {item.table!r}; available: {', '.join(LINE_TABLES)}")
    if item.draw == "line" and not item.y:
        raise ConfigError(f"{at}: a line item needs y (its panels)")
    if item.draw == "convergence" and item.view not in VIEWS:
        raise ConfigError(f"{at}: view {item.view!r}; available: {', '.join(VIEWS)}")
    if item.draw == "phase" and not item.phase:
        raise ConfigError(f"{at}: a phase item needs phase (its breakdown row)")
    if any(p.ideal not in (None, *IDEALS) for p in item.y):
        raise ConfigError(f"{at}: ideal takes {', '.join(IDEALS)}")
    return item


def parse(raw: Mapping, where: str) -> StudyFigures:
    """A declaration file's content, typed (``where``: its name, for messages)."""
    if not isinstance(raw, Mapping) or not isinstance(raw.get("items"), list):
        raise ConfigError(f"{where}: expected study, text and items")
    items = tuple(parse_item(i, where) for i in raw["items"])
    numbers = [i.number for i in items]
    twice = sorted({n for n in numbers if numbers.count(n) > 1})
    if twice:
        raise ConfigError(f"{where}: number(s) declared twice: {', '.join(twice)}")
    return StudyFigures(study=str(raw["study"]), text=str(raw["text"]), items=items, twin=raw.get("twin"))


def _folder():
    """conf/study/figures of this source tree where campaign runs from one (its conf/ beside the
    package, pyproject.toml above both), else the installed campaign_conf package's."""
    from importlib import resources
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    if (root / "pyproject.toml").is_file() and root.joinpath("conf", *FOLDER).is_dir():
        return root.joinpath("conf", *FOLDER)
    return resources.files("campaign_conf").joinpath(*FOLDER)


def declarations() -> dict[str, StudyFigures]:
    """Every declared study, by its preset name (conf/study/figures/*.yaml)."""
    import yaml

    folder = _folder()
    out = {}
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".yaml"):
            figures = parse(yaml.safe_load(entry.read_text()), f"conf/study/figures/{entry.name}")
            out[figures.study] = figures
    return out


def for_text(text: Optional[str]) -> Optional[StudyFigures]:
    """The declaration of the study whose text is ``text`` (a point's ``study.text``), or None."""
    if not text:
        return None
    return next((d for d in declarations().values() if d.text == text), None)
