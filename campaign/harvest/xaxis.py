"""What a harvest figure puts on its x axis (``campaign harvest --plots DIR --x KEY``) and,
from that, what makes one of its series.

The x axis is GPUs by default; ``--x`` names another swept variable: ``nodes`` or any
varying override (a column of the harvested tables, e.g. ``experiment.global_batch`` or
``trainer.params.backbone``; a unique last part such as ``backbone`` names it too). The
DataParallel study plots time against batch size and backbone; the ViT study's Fig 14
plots 1..32 nodes x 1 GPU as one line.

A series is what the points of one line share: the tables' series key (views.SERIES)
less what the axis sweeps. Against GPUs, ``nodes`` leaves the key, so N nodes x 1 GPU is
one line; only where a series holds two placements of one GPU count (1x4 and 2x2) do its
lines split, by nodes or by GPUs per node, whichever draws fewer lines (1 node and 2
nodes as intra- vs inter-node lines; GPUs per node on a tie; the placement table and
figure compare placements at equal GPU counts). Against
``nodes`` the lines are GPUs per node; against an override they are the other varying
overrides, GPU counts and nodes (a label names only those that differ).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import polars as pl

from campaign.common.errors import ConfigError

GPUS = "gpus"
NODES = "nodes"
PER_NODE = "gpus_per_node"  # a helper column: gpus // nodes
BASE = ["platform", "trainer", "experiment", "dataset"]  # what every series keeps apart, whatever the axis
AXIS_LABELS = {GPUS: "GPUs (N)", NODES: "nodes"}


def varying_names(df: pl.DataFrame) -> list[str]:
    """The varying overrides' columns of a table (run.with_varying puts them between
    ``variant`` and ``image``)."""
    if "variant" not in df.columns or "image" not in df.columns:
        return []
    cols = df.columns
    return cols[cols.index("variant") + 1:cols.index("image")]


def x_choices(df: pl.DataFrame) -> list[str]:
    """What ``--x`` may name for this table: gpus, nodes and its varying overrides."""
    return [GPUS, NODES] + varying_names(df)


def resolve_x(key: Optional[str], df: pl.DataFrame) -> str:
    """The column ``key`` names (an exact name, or the one varying override ending in
    ``.key``); a key naming none, or several, is refused in one line naming the choices."""
    if key is None or key == GPUS:
        return GPUS
    choices = x_choices(df)
    if key in choices:
        return key
    tails = [c for c in choices if c.endswith(f".{key}")]
    if len(tails) == 1:
        return tails[0]
    what = f"names {len(tails)} of them" if tails else "is not a varying key of this campaign"
    raise ConfigError(f"--x {key!r} {what}; varying keys: {', '.join(choices)}")


@dataclass(frozen=True)
class XAxis:
    """One figure's x axis: the column, its values in axis order, and the series key."""

    key: str
    values: tuple  # the values on the axis, sorted (numbers) or in order of appearance (names)
    numeric: bool  # numbers: drawn at their value; names: one slot each
    series: tuple[str, ...]  # the columns whose values make one line

    @property
    def is_gpus(self) -> bool:
        return self.key == GPUS

    @property
    def label(self) -> str:
        return AXIS_LABELS.get(self.key, self.key)

    def position(self, value: Any) -> float:
        """Where ``value`` sits on the axis."""
        return value if self.numeric else self.values.index(value)

    def positions(self, values) -> list:
        return [self.position(v) for v in values]


def _numeric(values: list) -> bool:
    return bool(values) and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)


def axis_frame(df: pl.DataFrame, key: str = GPUS) -> tuple[pl.DataFrame, XAxis]:
    """``df`` with the helper columns its series need, and the axis ``key`` draws
    (module docstring: what makes a series on each axis)."""
    if NODES not in df.columns:
        df = df.with_columns(pl.lit(1, dtype=pl.Int64).alias(NODES))
    df = df.with_columns((pl.col(GPUS) // pl.col(NODES).fill_null(1)).alias(PER_NODE))
    names = varying_names(df)
    if key == GPUS:
        series = BASE + ["variant", "image"]
        present = [c for c in series if c in df.columns]
        if df.height and df.select(present + [GPUS]).unique().height < df.select(present + [GPUS, NODES]).unique().height:
            # two placements of one GPU count in a series: split it by nodes (1 node, 2 nodes: intra
            # vs inter-node lines) or by GPUs per node (N nodes x 1 GPU: one line, the ViT study's
            # Fig 14), whichever draws fewer lines; GPUs per node on a tie
            by_nodes = df.select(present + [NODES]).unique().height
            by_per_node = df.select(present + [PER_NODE]).unique().height
            series.append(NODES if by_nodes < by_per_node else PER_NODE)
    elif key == NODES:
        series = BASE + ["variant", "image", PER_NODE]
    else:
        series = BASE + [n for n in names if n != key] + ["image", GPUS, NODES]
    series = [c for c in series if c in df.columns]
    present = [v for v in df[key].unique(maintain_order=True).to_list() if v is not None] if df.height else []
    numeric = _numeric(present)
    values = tuple(sorted(present) if numeric else sorted(present, key=str))
    return df, XAxis(key=key, values=values, numeric=numeric, series=tuple(series))


def draw_axis(ax, axis: XAxis) -> None:
    """Ticks at every value measured: log 2 for GPU and node counts and for positive
    numbers spanning 4x or more (batch sizes), linear for other numbers, one slot per name."""
    vals = list(axis.values)
    if axis.numeric:
        log = axis.key in (GPUS, NODES) or (vals and min(vals) > 0 and max(vals) >= 4 * min(vals))
        if log:
            ax.set_xscale("log", base=2)
        ax.set_xticks(vals)
        ax.set_xticklabels([str(v) for v in vals])
        ax.minorticks_off()
        if vals and log:
            ax.set_xlim(min(vals) / 1.25, max(vals) * 1.25)
    else:
        ax.set_xticks(range(len(vals)))
        ax.set_xticklabels([str(v) for v in vals])
        ax.set_xlim(-0.5, len(vals) - 0.5)
    ax.set_xlabel(axis.label)
    ax.grid(True, alpha=0.3)
