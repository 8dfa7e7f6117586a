"""From the store's rows to the point frame every harvested table starts from.

One row per completed point (SQL aggregates over ranks, query.py), with its series
``dataset`` (its name and crop from its stored config, a study's stand-in saying whose
shapes it keeps: campaign.catalogue.dataset_label), ``variant`` (the overrides that differ between the campaign's points, as one label; the
``varying`` struct holds them one field per override, campaign.common.varying), its ``image``
(the container image its harvested attempt ran in: the sha256's first 12 hex digits,
the path where no sha256 was recorded, null without a container) and, for a sampled
run, the projection to its full schedule (projection.py), and its ``global_batch`` (the
images one iteration takes over all GPUs: global_batches). The tables
themselves: views.py (time to solution, throughput), utilisation.py.
"""

from __future__ import annotations

from typing import Optional, Sequence

import polars as pl

from campaign.harvest.epochs import epoch_columns
from campaign.harvest.projection import project_points
from campaign.harvest.query import breakdown_query, completed_points_query, job_iterations_query
from campaign.harvest.views import SERIES, scaling_table, throughput_table  # noqa: F401  (public names)
from campaign.catalogue.dataset_label import dataset_label
from campaign.common.bounded import STORED, BoundError, loads
from campaign.common.varying import label, typed, varying
from campaign.store.budget import fetch_all

IMAGE_SHORT = 12  # hex digits of the sha256 that name an image (as `docker images` shows it)
# the axes harvest has columns for; a swept dataset=A,B is the dataset column, worded with its crop
_SWEEP_KEYS = ("platform", "gpus", "nodes", "repeats", "trainer", "experiment", "dataset")
VARYING = "varying"  # the point frame's struct column: one field per varying override (campaign.common.varying)


def variants(all_overrides: Sequence[object]) -> list[str]:
    """Per point, the overrides that differ between the campaign's points: what makes
    its series (e.g. ``trainer.optimizer=adamw``). Settings shared by every point, and
    the axes harvest has columns for, are left out."""
    _, values = varying(all_overrides, skip=_SWEEP_KEYS)
    return [label(v) for v in values]


def varying_columns(all_overrides: Sequence[object]) -> tuple[list[str], list[pl.Series]]:
    """The varying overrides' names and, per name, its values over the points (numbers
    where every value is one: campaign.common.varying.typed)."""
    names, values = varying(all_overrides, skip=_SWEEP_KEYS)
    return names, [pl.Series(n, typed([v[n] for v in values]), strict=False) for n in names]


def _stored(value: object) -> object:
    """A JSON column's value as the driver gave it (text on SQLite, parsed on PostgreSQL),
    parsed within campaign.common.bounded's bounds; None where it is not readable JSON."""
    if isinstance(value, (str, bytes)):
        try:
            return loads(value, "stored JSON", budget=STORED)
        except BoundError:
            return None
    return value


def dataset_labels(configs: Sequence[object], all_overrides: Sequence[object], names: Sequence[object]) -> list[str]:
    """Per point, its dataset in words from its stored config (campaign.catalogue.dataset_label:
    ``ade20k 512px 150 classes``, ``synthetic 512px 150 classes (ade20k's shapes)``); the
    store's dataset name where the config holds no readable dataset section."""
    out = []
    for config, overrides, name in zip(configs, all_overrides, names):
        config, overrides = _stored(config), _stored(overrides)
        if isinstance(config, dict) and isinstance(config.get("dataset"), dict):
            out.append(dataset_label(config, overrides if isinstance(overrides, list) else ()))
        else:
            out.append(str(name or ""))
    return out


def global_batches(configs: Sequence[object], batch_per_gpu: Sequence[object], gpus: Sequence[object]) -> list:
    """Per point, the images one iteration takes over all its GPUs: a strong-scaling point's
    ``experiment.global_batch`` from its stored config (one process scattering it as
    nn.DataParallel does splits 1,024 over 3 GPUs as 342, 342, 340, and the store's
    ``batch_per_gpu`` is the largest share, 342: x 3 would say 1,026), else
    ``batch_per_gpu x gpus`` (an even split, or a batch per GPU)."""
    out = []
    for config, batch, n in zip(configs, batch_per_gpu, gpus):
        exp = config.get("experiment") if isinstance(config, dict) else None
        gb = exp.get("global_batch") if isinstance(exp, dict) and exp.get("scaling") == "strong" else None
        if isinstance(gb, int) and not isinstance(gb, bool) and gb > 0:
            out.append(gb)
        else:
            out.append(batch * n if batch is not None and n is not None else None)
    return out


def image_label() -> pl.Expr:
    """``image`` from ``image_sha256`` and ``image_path``: short sha, else path, else null."""
    return pl.coalesce(pl.col("image_sha256").str.slice(0, IMAGE_SHORT), pl.col("image_path")).alias("image")


def _polars_type(sql_type) -> Optional[pl.DataType]:
    """The polars type of a selected column's SQL type; None: let polars infer it from the
    values (aggregates such as avg() carry no type, JSON and Boolean come as the driver gives them)."""
    from sqlalchemy import Float, Integer, String

    for sql, polars_type in ((Integer, pl.Int64), (Float, pl.Float64), (String, pl.Utf8)):
        if isinstance(sql_type, sql):
            return polars_type
    return None


def _frame(conn, query, schema_overrides: Optional[dict] = None) -> pl.DataFrame:
    """The rows of ``query`` as a frame, built by polars from the driver's tuples (no row
    objects, no dicts: a million iteration rows cost what fetching them costs), typed from
    the selected columns' SQL types (``schema_overrides`` first), the rest inferred."""
    types = {c.key: t for c in query.selected_columns if (t := _polars_type(c.type)) is not None}
    types.update(schema_overrides or {})
    result = conn.execute(query)
    cols = list(result.keys())
    rows = fetch_all(conn, result)  # plain tuples, under the store's budget and Ctrl-C (campaign.store.budget)
    if not rows:
        return pl.DataFrame(schema={c: types.get(c, pl.Null) for c in cols})
    return pl.DataFrame(rows, schema=cols, orient="row", schema_overrides={c: t for c, t in types.items() if c in cols},
                        infer_schema_length=None)


def point_frame(store, campaign_ids: Sequence[str], where: Optional[dict] = None) -> pl.DataFrame:
    """One row per completed point, with ``dataset`` (worded), ``variant``, ``image`` and
    sampled runs projected."""
    with store.engine.connect() as conn:
        df = _frame(conn, completed_points_query(campaign_ids, where),
                    {"overrides": pl.Object, "config": pl.Object, "image_sha256": pl.Utf8, "image_path": pl.Utf8})
        if df.height == 0:
            return df.drop("config").with_columns(pl.lit("").alias("variant"), pl.lit(None, dtype=pl.Utf8).alias("image"))
        sampled = df.filter(pl.col("timed_iterations") < pl.col("iterations"))["attempt_id"].to_list()
        iters = _frame(conn, job_iterations_query(sampled)) if sampled else None
    overrides = df["overrides"].to_list()
    names, columns = varying_columns(overrides)
    configs = [_stored(c) for c in df["config"].to_list()]  # parsed once, read twice
    datasets = dataset_labels(configs, overrides, df["dataset"].to_list())
    batches = global_batches(configs, df["batch_per_gpu"].to_list(), df["gpus"].to_list())
    df = df.drop("overrides", "config").with_columns(pl.Series("variant", variants(overrides), dtype=pl.Utf8),
                                                     pl.Series("dataset", datasets, dtype=pl.Utf8), image_label(),
                                                     pl.Series("global_batch", batches, dtype=pl.Int64),
                                                     *epoch_columns(configs, batches, df["iterations"].to_list()))
    if names:  # one struct column, so that the tables' group-bys leave it alone (run.py puts it back as columns)
        df = df.with_columns(pl.DataFrame(columns).to_struct(VARYING))
    return project_points(df, iters)


def engine_phases(store, attempt_ids: Sequence[int]) -> pl.DataFrame:
    """The engine-reported phases (breakdown rows) of these attempts, averaged over ranks."""
    with store.engine.connect() as conn:
        return _frame(conn, breakdown_query(list(attempt_ids)))
