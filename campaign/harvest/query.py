"""SQL side of the harvest (SQLAlchemy Core, every value bound): one row per
completed point (its latest completed attempt) with the rank aggregates computed by
the database, and the rows the derived tables need beside it (engine breakdown
phases, the timed iterations of sampled runs).

The container image a point's harvested attempt ran in comes from the attempt's
provenance JSON through SQLAlchemy's portable JSON paths (``JSON_EXTRACT`` on SQLite,
``->``/``->>`` on PostgreSQL): ``image_sha256`` and ``image_path``, NULL without a
container (or without an image file to hash). Every such path reads a value only where
its column holds JSON the database reads (``json_ok``): SQLite keeps any text in a JSON
column, and one value its ``JSON_EXTRACT`` refuses (not JSON, nested past SQLite's limit:
a store others write) would end the whole query; such a value reads as NULL. Before
that, its length (``json_size``) is checked against ``sql_max_chars`` (campaign.common.bounded):
a longer value reaches no JSON function, and reads as NULL too (a 180 MB one took SQLite
1.48 GB to parse, issue #48); campaign.harvest.door finds such values, so that
harvest leaves their points out, saying so."""

from __future__ import annotations

from typing import Optional, Sequence

from sqlalchemy import Boolean, Integer, String, and_, bindparam, case, false, func, null, or_, select
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.functions import FunctionElement

from campaign.common.bounded import sql_max_chars
from campaign_sql.schema import attempt, breakdown, iteration, point, profile, rank_timing

POINT_FILTERS = ("platform", "trainer", "experiment", "gpus", "nodes", "dataset")
FILTERS = POINT_FILTERS + ("image",)
# Not a user's filter (parse_where refuses it): the points whose effective state is
# completed (campaign.observe.state), which harvest alone reads, so that it counts what status shows.
POINT_IDS = "point_id"
NO_IMAGE = "none"  # ``--where image=none``: the points that ran without a container image



class json_ok(FunctionElement):
    """True where a JSON column's text is JSON the database's JSON functions read:
    ``json_valid`` on SQLite; always on PostgreSQL, whose json type is checked on write."""

    type = Boolean()
    inherit_cache = True
    name = "json_ok"


@compiles(json_ok)
def _json_ok(element, compiler, **kw) -> str:
    return "(1 = 1)"


@compiles(json_ok, "sqlite")
def _json_ok_sqlite(element, compiler, **kw) -> str:
    return f"json_valid({compiler.process(element.clauses, **kw)})"


class json_size(FunctionElement):
    """A JSON column's stored length, measured without parsing it: SQLite's ``length``
    (characters of text, bytes of a blob), PostgreSQL's ``octet_length`` of its text."""

    type = Integer()
    inherit_cache = True
    name = "json_size"


@compiles(json_size)
def _json_size(element, compiler, **kw) -> str:
    return f"length({compiler.process(element.clauses, **kw)})"


@compiles(json_size, "postgresql")
def _json_size_postgresql(element, compiler, **kw) -> str:
    return f"octet_length(CAST({compiler.process(element.clauses, **kw)} AS TEXT))"


# the longest value a JSON function may parse, taken when the statement runs (the
# command's budget, CAMPAIGN_JSON_MAX_MEMORY_MB)
JSON_MAX = bindparam("json_max_chars", callable_=sql_max_chars, type_=Integer())


class json_kind(FunctionElement):
    """Whether the value at ``keys`` in a JSON column is of ``kind`` (``number`` or
    ``string``): SQLite's ``json_type``, PostgreSQL's ``json_typeof``. A nested object
    where a figure belongs would otherwise read as its text, or as 0 once cast to a number.
    The keys are campaign's own constants, rendered as literals: not cached (the cache
    key of a statement leaves literals' values out)."""

    type = Boolean()
    inherit_cache = False
    name = "json_kind"

    def __init__(self, column, keys: tuple[str, ...], kind: str):
        super().__init__(column)
        self.keys, self.kind = keys, kind


@compiles(json_kind)
def _json_kind_sqlite(element, compiler, **kw) -> str:
    path = "$" + "".join(f'."{k}"' for k in element.keys)
    types = "('integer', 'real')" if element.kind == "number" else "('text')"
    return (f"(json_type({compiler.process(element.clauses, **kw)}, "
            f"{compiler.render_literal_value(path, String())}) IN {types})")


@compiles(json_kind, "postgresql")
def _json_kind_postgresql(element, compiler, **kw) -> str:
    path = "".join(f" -> {compiler.render_literal_value(k, String())}" for k in element.keys)
    return f"(json_typeof({compiler.process(element.clauses, **kw)}{path}) = '{element.kind}')"


def guarded(column, path, keys: tuple[str, ...] = (), kind: Optional[str] = None):
    """``path`` (a JSON path into ``column``: ``keys``) where ``column`` holds readable JSON
    of at most ``JSON_MAX`` characters (and, given ``kind``, the value there is of that
    kind: ``json_kind``), else NULL. CASE tries its branches in order: a longer value's
    length is all the database reads of it, never its JSON."""
    whens = [(json_size(column) > JSON_MAX, null()), (~json_ok(column), null())]
    if kind is not None:
        whens.append((~json_kind(column, keys, kind), null()))
    return case(*whens, else_=path)


def within_bound(column):
    """``column`` itself where it is at most ``JSON_MAX`` characters long, else NULL (a
    value fetched whole, then parsed within bounds by campaign.common.bounded)."""
    return case((json_size(column) > JSON_MAX, null()), else_=column)


def extra(key: str, kind: str = "float"):
    """A rank's figure ``key`` beyond the columns (trainers/job.py, docs/breakdown.md), as
    ``kind`` (float, integer, string), guarded."""
    return guarded(rank_timing.c.extra, getattr(rank_timing.c.extra[key], f"as_{kind}")(), (key,),
                   "string" if kind == "string" else "number")


IMAGE_SHA256 = guarded(attempt.c.provenance, attempt.c.provenance["container"]["image_sha256"].as_string(),
                       ("container", "image_sha256"), "string")
IMAGE_PATH = guarded(attempt.c.provenance, attempt.c.provenance["container"]["image"].as_string(),
                     ("container", "image"), "string")


def _image_filter(values: Sequence[str]):
    """An attempt ran in one of these images: a sha256 prefix (hex, any case) or the image's
    path, exactly; ``none``: no image. Values are bound (LIKE's wildcards escaped)."""
    terms = []
    for v in values:
        if v.lower() == NO_IMAGE:
            terms.append(and_(IMAGE_SHA256.is_(None), IMAGE_PATH.is_(None)))
        else:
            terms += [IMAGE_SHA256.startswith(v.lower(), autoescape=True), IMAGE_PATH == v]
    return or_(*terms)


def _share(col):
    """Per rank: ``col`` over the rank's timed window (NULL where either is absent or the window is empty)."""
    return col / func.nullif(rank_timing.c.wall_s, 0.0)


def _latest_attempts(campaign_ids: Sequence[str], where: Optional[dict]):
    """CTE ``latest``: attempt_id, point_id of each selected point's latest completed attempt.

    The campaign and ``where`` filters come first, so every later step (rank and profile
    aggregates) reads only these attempts' rows: the query costs what the campaign holds,
    not what the whole store holds."""
    points = select(point.c.id).where(point.c.campaign_id.in_(list(campaign_ids)))
    where = dict(where or {})
    images = where.pop("image", None)
    ids = where.pop(POINT_IDS, None)
    if ids is not None:
        points = points.where(point.c.id.in_(list(ids)))
    for key, values in where.items():
        if key not in POINT_FILTERS:
            raise KeyError(key)
        points = points.where(getattr(point.c, key).in_(list(values)))
    last = (
        select(attempt.c.point_id, func.max(attempt.c.attempt_no).label("attempt_no"))
        .where(attempt.c.state == "completed", attempt.c.point_id.in_(points))
        .group_by(attempt.c.point_id)
        .subquery("last_completed")
    )
    latest = (
        select(attempt.c.id.label("attempt_id"), attempt.c.point_id, IMAGE_SHA256.label("image_sha256"),
               IMAGE_PATH.label("image_path"))
        .join_from(attempt, last, and_(attempt.c.point_id == last.c.point_id, attempt.c.attempt_no == last.c.attempt_no))
    )
    if images:  # the image of the attempt harvest reads, not of any earlier one
        latest = latest.where(_image_filter(list(images)))
    return latest.cte("latest")


def point_indices_query(campaign_id: str, where: dict):
    """The campaign's points (their ``idx``) that ``where``'s point filters select, in any
    state: the tables built from the store rather than the completed points (attempts,
    convergence) are narrowed by these."""
    q = select(point.c.idx).where(point.c.campaign_id == campaign_id)
    for key, values in where.items():
        if key not in POINT_FILTERS:
            raise KeyError(key)
        q = q.where(getattr(point.c, key).in_(list(values)))
    return q


def _hardware_aggregates() -> list:
    """How hard a job's ranks drove the hardware (hardware.py): per rank, averaged or the largest."""
    def agg_extra(key: str, agg=func.avg):
        return agg(extra(key)).label(key)

    return [
        func.max(rank_timing.c.peak_memory_bytes).label("peak_memory_bytes"),
        func.max(rank_timing.c.trainable_params).label("trainable_params"),
        func.max(extra("peak_memory_source", "string")).label("peak_memory_source"),
        func.max(extra("precision", "string")).label("precision"),
        func.max(extra("math", "string")).label("math"),
        agg_extra("achieved_tflops"), agg_extra("peak_tflops", func.max), agg_extra("mfu"),
        agg_extra("allreduce_bytes_per_iter", func.max), agg_extra("allreduce_busbw_gbs"),
        agg_extra("interconnect_bandwidth_gbs", func.max),  # the busbw fraction: hardware.py derives it
        agg_extra("exposed_comm_s"), agg_extra("sync_bytes_per_epoch", func.max),
        agg_extra("warmup_peak_memory_bytes", func.max),
    ]


def _run_aggregates() -> list:
    """What a run paid besides its timed window, and a sampled run's own figures
    (trainers/startup.py, trainers/sampling.py; projection.py): the slowest rank's."""
    return [
        func.max(extra("startup_s")).label("startup_s"),
        func.max(extra("sample_transient_s")).label("sample_transient_s"),
        func.max(extra("sample_transient_iterations", "integer")).label("sample_transient_iterations"),
        func.max(extra("sample_check_s")).label("sample_check_s"),
    ]


def _top_op(key: str):
    """A number of a rank's ``profile.top_ops`` (trainers/loop.py), guarded."""
    return guarded(profile.c.top_ops, profile.c.top_ops[key].as_float())


def completed_points_query(campaign_ids: Sequence[str], where: Optional[dict] = None):
    """Select one row per completed point; ``where`` values are bound, never pasted."""
    latest = _latest_attempts(campaign_ids, where)
    hardware = _hardware_aggregates() + _run_aggregates()
    ranks = (
        select(
            rank_timing.c.attempt_id,
            func.max(rank_timing.c.wall_s).label("time_s"),  # the job's time: its slowest rank
            func.max(rank_timing.c.warmup_s).label("warmup_s"),
            func.sum(rank_timing.c.images).label("images"),
            func.max(rank_timing.c.iterations).label("timed_iterations"),
            func.avg(rank_timing.c.iter_mean_s).label("iter_mean_s"),
            func.avg(rank_timing.c.iter_median_s).label("iter_median_s"),
            func.max(rank_timing.c.iter_p95_s).label("iter_p95_s"),
            func.avg(rank_timing.c.data_wait_s).label("data_wait_s"),
            func.avg(rank_timing.c.compute_s).label("compute_s"),
            func.avg(rank_timing.c.comm_s).label("comm_s"),
            func.avg(_share(rank_timing.c.data_wait_s)).label("data_wait_share"),
            func.avg(_share(rank_timing.c.compute_s)).label("compute_share"),
            func.avg(_share(rank_timing.c.comm_s)).label("comm_share"),
            func.max(rank_timing.c.final_loss).label("final_loss"),
            func.count().label("ranks"),
            *hardware,
        )
        .where(rank_timing.c.attempt_id.in_(select(latest.c.attempt_id)))
        .group_by(rank_timing.c.attempt_id)
        .subquery("ranks")
    )
    prof = (
        select(
            profile.c.attempt_id,
            func.avg(profile.c.gpu_util).label("gpu_util"),
            func.avg(profile.c.cpu_util).label("cpu_util"),
            func.avg(profile.c.total_s).label("profile_total_s"),
            func.avg(profile.c.cpu_s).label("profile_cpu_s"),
            func.avg(profile.c.device_s).label("profile_device_s"),
            func.avg(profile.c.comm_s).label("profile_comm_s"),
            func.avg(profile.c.exposed_comm_s).label("profile_exposed_comm_s"),
            func.max(profile.c.iterations).label("profile_iterations"),
            # the profiler's totals, sums (campaign_trace/totals.py): the study's eq. 3.3 terms
            func.avg(_top_op("cpu_time_total_s")).label("profile_cpu_total_s"),
            func.avg(_top_op("device_time_total_s")).label("profile_device_total_s"),
            # the profiler window's warning and trace files (trainers/loop.py: profile.top_ops)
            func.max(guarded(profile.c.top_ops, profile.c.top_ops["warning"].as_string(), ("warning",),
                             "string")).label("profile_warning"),
            func.aggregate_strings(guarded(profile.c.top_ops, profile.c.top_ops["trace_file"].as_string(),
                                           ("trace_file",), "string"), "\n").label("trace_files"),
        )
        .where(profile.c.attempt_id.in_(select(latest.c.attempt_id)))
        .group_by(profile.c.attempt_id)
        .subquery("prof")
    )
    q = (
        select(
            point.c.campaign_id, point.c.id.label("point_id"), latest.c.attempt_id, point.c.idx,
            point.c.platform, point.c.trainer, point.c.experiment, point.c.dataset, point.c.gpus, point.c.nodes,
            point.c.repeat, point.c.batch_per_gpu, point.c.iterations, point.c.overrides,
            point.c.config,  # its dataset section worded as the series' dataset (derive.py), then dropped
            latest.c.image_sha256, latest.c.image_path,
            ranks.c.time_s, ranks.c.warmup_s, ranks.c.images, ranks.c.timed_iterations, ranks.c.iter_mean_s,
            ranks.c.iter_median_s, ranks.c.iter_p95_s, ranks.c.data_wait_s, ranks.c.compute_s, ranks.c.comm_s,
            ranks.c.data_wait_share, ranks.c.compute_share, ranks.c.comm_share, ranks.c.final_loss, ranks.c.ranks,
            *[ranks.c[h.name] for h in hardware],
            prof.c.gpu_util, prof.c.cpu_util, prof.c.profile_total_s, prof.c.profile_cpu_s, prof.c.profile_device_s,
            prof.c.profile_comm_s, prof.c.profile_exposed_comm_s, prof.c.profile_iterations,
            prof.c.profile_warning, prof.c.trace_files, prof.c.profile_cpu_total_s, prof.c.profile_device_total_s,
        )
        .select_from(
            latest.join(point, point.c.id == latest.c.point_id)
            .join(ranks, ranks.c.attempt_id == latest.c.attempt_id)
            .outerjoin(prof, prof.c.attempt_id == latest.c.attempt_id)
        )
        .order_by(point.c.idx)
    )
    return q


def breakdown_query(attempt_ids: Sequence[int]):
    """The ``breakdown`` rows (per-phase statistics over the timed iterations: the job's
    own phases and any engine's) per attempt and phase, averaged over ranks; ``share``
    is each rank's phase total over its own timed window."""
    return (
        select(
            breakdown.c.attempt_id,
            breakdown.c.phase,
            func.avg(breakdown.c.total_s).label("total_s"),
            func.max(breakdown.c.total_s).label("max_total_s"),  # the slowest rank's (an epoch's end: a barrier)
            func.avg(breakdown.c.mean_s).label("mean_s"),
            func.max(breakdown.c.p95_s).label("p95_s"),
            func.max(breakdown.c.count).label("count"),
            func.avg(_share(breakdown.c.total_s)).label("share"),
        )
        .select_from(breakdown.outerjoin(rank_timing, and_(rank_timing.c.attempt_id == breakdown.c.attempt_id,
                                                           rank_timing.c.rank == breakdown.c.rank)))
        .where(breakdown.c.attempt_id.in_(list(attempt_ids)))
        .group_by(breakdown.c.attempt_id, breakdown.c.phase)
        .order_by(breakdown.c.attempt_id, breakdown.c.phase)
    )


def job_iterations_query(attempt_ids: Sequence[int]):
    """Timed (not warm-up) iterations of each attempt, as the job saw them: the slowest
    rank's time at each iteration (DDP ranks wait for each other every step), one
    ``attempt_id, iter_s`` row per iteration, in order. Read from the index
    ``ix_iteration_job`` alone (sql/schema.py): no table lookup, no sort."""
    return (
        select(iteration.c.attempt_id, func.max(iteration.c.iter_s).label("iter_s"))
        .where(and_(iteration.c.attempt_id.in_(list(attempt_ids)), iteration.c.warmup == false()))
        .group_by(iteration.c.attempt_id, iteration.c.iter)
        .order_by(iteration.c.attempt_id, iteration.c.iter)
    )
