"""A fitted scaling model per series: t(N), its knee, and the communication bound (docs/model.md).

The quantity is the time per image of the training set, t(N) = time to solution / images of
the schedule (views.py's T(N) over ``global_batch x iterations``; a sampled run's
projected T(N), projection.py): strong and weak scaling share it. The family:

    t(N) = a + b/N + c*log2(N) + d*r(N)

a serial part, b work that divides, c tree-like communication (a cost per doubling), d
ring-like communication. A ring all-reduce costs 2(N-1)/N x bytes / bandwidth per
*iteration*, and an iteration processes the global batch, so per image it is
r(N) = (N-1)/N x g(1)/g(N) (g: images per iteration; g(1) = one GPU's batch): (N-1)/N^2
at a fixed batch per GPU. At a fixed global batch r(N) = (N-1)/N = 1 - 1/N, which no data
can tell from a and b: the fit then keeps the fewer terms and says so. (The literal
d*(N-1)/N of issue #24 is that collinear case for every schedule.)

Coefficients are >= 0: a non-negative least squares on relative residuals, solved exactly
by enumerating the terms' subsets (four terms: fifteen tiny solves). The terms are chosen
by the data: the smallest subset whose relative RMS error is within the points' noise
(``tolerance``) of the best fit; among equally good subsets of that size the family's
order (a, b, c, d) decides. Intervals (95 %) come from a bootstrap over repeats (each
N's repeats resampled), or, with one repeat, over a sampled window's interval
(projection.py's time_lo_s/time_hi_s, as a normal spread); one unsampled repeat has none.

A row's ``time_s`` and ``gpu_hours`` are t(N) times the images *that N's* run trains: the
same at every N under weak and strong scaling; under a fixed schedule (the same iterations
at a fixed batch per GPU) they grow with N, and a predicted N trains the largest measured
N's images per GPU times N.

Measured points keep their own row with the fit's error; predictions at 2x and 4x the
largest N are rows of ``kind`` = predicted. Points on more than one node are a series of
their own (``span`` inter-node): a node boundary adds a level of interconnect the model
cannot foresee from intra-node points.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Callable, Optional, Sequence

import numpy as np
import polars as pl

from campaign.harvest.views import SAME_WORK_TOLERANCE, global_batch, with_optional

TERMS = ("a", "b", "c", "d")
SERIES = ["platform", "trainer", "experiment", "dataset", "variant", "image", "span"]
EFFICIENCY_FLOOR = 0.8  # the knee: the largest N whose efficiency stays at or above this
MIN_DISTINCT_N = 3
MIN_TOLERANCE = 0.002  # relative RMS error a fit may exceed the best by, at the least (rounding of timers)
NOISE_FACTOR = 2.0  # ... or this many times the points' relative noise, where larger
BOOTSTRAP = 200  # resamples per series
PREDICT_FACTORS = (2, 4)  # predictions at these multiples of the largest N measured
SEED = 20240  # the bootstrap's generator: the same store gives the same table
Z95 = 1.959964
_T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228}

COLUMNS = SERIES + [
    "gpus", "kind", "repeats", "t_image_s", "fit_t_image_s", "fit_lo_s", "fit_hi_s", "error", "speedup",
    "speedup_lo", "speedup_hi", "efficiency", "efficiency_lo", "efficiency_hi", "time_s", "time_lo_s", "time_hi_s",
    "gpu_hours", "terms", "a", "a_lo", "a_hi", "b", "b_lo", "b_hi", "c", "c_lo", "c_hi", "d", "d_lo", "d_hi",
    "rel_rms", "knee_gpus", "fastest_gpus", "cheapest_gpus", "comm_ms", "comm_bound_ms", "comm_over_bound", "note"]


@dataclass(frozen=True)
class Fit:
    coef: dict  # term -> value (0 for a term left out)
    terms: tuple  # the terms kept
    rel_rms: float  # relative RMS error over the points


def columns(n: np.ndarray, ring_scale: np.ndarray) -> np.ndarray:
    """The family's four columns at GPU counts ``n`` (ring_scale: g(1)/g(N) per point)."""
    n = np.asarray(n, dtype=float)
    return np.column_stack([np.ones_like(n), 1.0 / n, np.log2(n), (n - 1.0) / n * ring_scale])


def _solve(x: np.ndarray, y: np.ndarray, subset: Sequence[int]) -> Optional[tuple[np.ndarray, float]]:
    """Least squares of y on relative residuals over the columns ``subset``; None where a
    coefficient comes out negative or the columns are not independent (no feasible fit)."""
    w = 1.0 / y
    xs = x[:, subset] * w[:, None]
    beta, _, rank, _ = np.linalg.lstsq(xs, np.ones_like(y), rcond=None)
    if rank < len(subset):
        return None
    if (beta < -1e-12 * np.abs(beta).max()).any():
        return None
    beta = np.clip(beta, 0.0, None)
    rel = x[:, subset] @ beta / y - 1.0
    return beta, float(np.sqrt(np.mean(rel ** 2)))


def fit_terms(x: np.ndarray, y: np.ndarray, subset: Sequence[int]) -> tuple[np.ndarray, float]:
    """Non-negative least squares of y over the columns ``subset`` (exact: the best feasible
    sub-subset); coefficients over all four columns."""
    best = None
    for k in range(1, len(subset) + 1):
        for sub in itertools.combinations(subset, k):
            got = _solve(x, y, sub)
            if got is not None and (best is None or got[1] < best[2] - 1e-15):
                best = (sub, got[0], got[1])
    coef = np.zeros(x.shape[1])
    if best is None:
        return coef, math.inf
    coef[list(best[0])] = best[1]
    return coef, best[2]


def select(x: np.ndarray, y: np.ndarray, tolerance: float) -> Fit:
    """The smallest subset of terms whose fit is within ``tolerance`` (relative RMS) of the
    best non-negative fit; among such subsets of one size, the family's order first."""
    distinct = len(set(np.round(x[:, 1], 12)))
    found = []
    for k in range(1, min(len(TERMS), distinct) + 1):
        for sub in itertools.combinations(range(len(TERMS)), k):
            got = _solve(x, y, sub)
            if got is not None:
                found.append((k, sub, got[0], got[1]))
    best = min(f[3] for f in found)
    k, sub, beta, rms = next(f for f in found if f[3] <= best + tolerance)  # sizes ascending, then term order
    coef = dict.fromkeys(TERMS, 0.0)
    coef.update({TERMS[i]: float(b) for i, b in zip(sub, beta)})
    return Fit(coef, tuple(TERMS[i] for i in sub), rms)


def _t_quantile(df: int) -> float:
    """Student's t 97.5 % quantile at ``df`` degrees of freedom: the table to 10, then the
    Cornish-Fisher expansion about the normal's (within 2e-4 from 11 on; the normal's own
    1.96 would make 11 to 30 repeats' intervals up to 11 % too narrow)."""
    if df < 1:
        return Z95
    if df in _T975:
        return _T975[df]
    z = Z95
    return (z + (z ** 3 + z) / (4 * df) + (5 * z ** 5 + 16 * z ** 3 + 3 * z) / (96 * df ** 2)
            + (3 * z ** 7 + 19 * z ** 5 + 17 * z ** 3 - 15 * z) / (384 * df ** 3))


def fabric_gbs(platform: str) -> Optional[float]:
    """The platform catalogue's inter-node bandwidth (``fabric_bandwidth_gbs``, GB/s per
    GPU) of ``platform``; None where the catalogue has no such platform or states none."""
    from importlib import resources

    import yaml

    try:
        text = resources.files("campaign_conf").joinpath("platform", f"{platform}.yaml").read_text()
        value = (yaml.safe_load(text) or {}).get("fabric_bandwidth_gbs")
    except (FileNotFoundError, ModuleNotFoundError, OSError, yaml.YAMLError, AttributeError):
        return None
    return float(value) if value else None


def _per_point(points: pl.DataFrame) -> pl.DataFrame:
    extra = {"comm_s": pl.Float64, "allreduce_bytes_per_iter": pl.Float64,
             "interconnect_bandwidth_gbs": pl.Float64, "nodes": pl.Int64}
    p = with_optional(with_optional(points), extra)
    return p.with_columns(
        (global_batch() * pl.col("iterations")).alias("images_planned"),
        global_batch(),
        pl.when(pl.col("nodes") > 1).then(pl.lit("inter-node")).otherwise(pl.lit("intra-node")).alias("span"),
        (pl.col("comm_s") / pl.col("timed_iterations")).alias("comm_per_iter_s"),
        # a window's 95 % half-width as a relative normal spread of the point's time
        ((pl.col("time_hi_s") - pl.col("time_lo_s")) / 2.0 / Z95 / pl.col("time_s")).alias("window_rel_sd"),
    ).with_columns((pl.col("time_s") / pl.col("images_planned")).alias("t_image_s"))


def model_table(points: pl.DataFrame) -> pl.DataFrame:
    """The registered table: fit_model at the default efficiency floor (0.8)."""
    return fit_model(points)


def fit_model(points: pl.DataFrame, efficiency_floor: float = EFFICIENCY_FLOOR) -> pl.DataFrame:
    """Per series: the fitted model's rows, one per measured GPU count (with the fit's error
    and the communication bound) and one per prediction (2x, 4x the largest N)."""
    if points.height == 0:
        return pl.DataFrame()
    p = _per_point(points).filter(pl.col("t_image_s").is_not_null() & (pl.col("t_image_s") > 0))
    rows: list[dict] = []
    for key, g in p.group_by(SERIES, maintain_order=True):
        rows += series_rows(dict(zip(SERIES, key)), g, efficiency_floor)
    if not rows:
        return pl.DataFrame()
    schema = {c: pl.Utf8 for c in SERIES + ["kind", "terms", "note"]}
    schema.update({c: pl.Int64 for c in ("gpus", "repeats", "knee_gpus", "fastest_gpus", "cheapest_gpus")})
    out = pl.DataFrame(rows, schema={c: schema.get(c, pl.Float64) for c in COLUMNS}, orient="row")
    return out.sort(SERIES + ["gpus"], nulls_last=True)


def _comm(g: pl.DataFrame, span: str, platform: str) -> tuple[Optional[float], Optional[float]]:
    """Measured communication per iteration and its ring all-reduce bound, seconds."""
    n = int(g["gpus"][0])
    measured = g["comm_per_iter_s"].median()
    size = g["allreduce_bytes_per_iter"].median()
    # one direction's bandwidth bounds a ring: the fabric's figure is per direction (400 Gb/s
    # NDR: 50 GB/s each way); the interconnect's is both directions together (NVLink 3.0's
    # 600 GB/s is 300 each way; the reference study's Table 1), so half of it
    stated = g["interconnect_bandwidth_gbs"].max()
    bw = fabric_gbs(platform) if span == "inter-node" else (stated / 2 if stated else None)
    if n < 2 or not size or not bw:
        return measured, None
    return measured, 2.0 * (n - 1) / n * size / (bw * 1e9)


def series_rows(key: dict, g: pl.DataFrame, efficiency_floor: float = EFFICIENCY_FLOOR) -> list[dict]:
    """The model table's rows of one series (``g``: its points, with t_image_s)."""
    by_n = {int(n): grp for (n,), grp in g.group_by(["gpus"])}
    ns = np.array(sorted(by_n), dtype=float)
    # one GPU's share of the smallest N's global batch (1,024 over 3 is 341.3, not the largest share 342)
    base_batch = float(g.filter(pl.col("gpus") == int(ns[0]))["global_batch"].median()) / ns[0]
    reps = [by_n[int(n)]["t_image_s"].to_numpy() for n in ns]
    batch = np.array([by_n[int(n)]["global_batch"].median() for n in ns], dtype=float)
    y = np.array([r.mean() for r in reps])
    images_of = _images_of({int(n): float(grp["images_planned"].median()) for n, grp in by_n.items()})
    inter = " (inter-node: fitted apart, a node boundary adds a level of interconnect the model cannot foresee)" \
        if key["span"] == "inter-node" else ""
    measured = []
    for i, n in enumerate(ns):
        comm, bound = _comm(by_n[int(n)], key["span"], key["platform"])
        measured.append(dict(key, gpus=int(n), kind="measured", repeats=len(reps[i]), t_image_s=float(y[i]),
                             comm_ms=_ms(comm), comm_bound_ms=_ms(bound),
                             comm_over_bound=comm / bound if comm is not None and bound else None))
    if len(ns) < MIN_DISTINCT_N:
        counts = ", ".join(str(int(n)) for n in ns)
        note = (f"only {len(ns)} GPU count(s) ({counts}): fewer than {MIN_DISTINCT_N}, no fit "
                f"(launch at least three, e.g. gpus=1,2,4){inter}")
        return [dict(key, gpus=None, kind="no fit", repeats=sum(len(r) for r in reps), note=note)]
    ring = base_batch / batch  # g(1)/g(N), g(1) one GPU's batch at the smallest N's per-GPU batch
    x = columns(ns, ring)
    noise = _noise(by_n, ns, y)
    fit = select(x, y, max(NOISE_FACTOR * noise, MIN_TOLERANCE))
    sub = [TERMS.index(t) for t in fit.terms]
    beta = np.array([fit.coef[t] for t in TERMS])
    n_max = int(ns.max())
    grid = np.array(sorted(set(ns.tolist()) | {float(n_max * f) for f in PREDICT_FACTORS}))
    fixed = _fixed_global(batch)
    per_gpu = batch[-1] / ns[-1]  # the largest N's batch per GPU, kept for the predictions
    ring_grid = np.array([ring[list(ns).index(n)] if n in ns else base_batch / (fixed or per_gpu * n) for n in grid])
    xg = columns(grid, ring_grid)
    boot = _bootstrap(x, reps, by_n, ns, sub)
    t_grid = xg @ beta
    t1 = float(columns(np.array([1.0]), np.array([1.0]))[0] @ beta)  # the ring term is 0 at N=1
    speedup = t1 / t_grid
    eff = speedup / grid
    interval = _intervals(boot, xg, t_grid, t1, grid, reps)
    knee = [int(n) for n, e in zip(grid, eff) if e >= efficiency_floor]
    fastest = int(grid[np.argmin(t_grid)])
    cheapest = int(grid[np.argmin(t_grid * grid)])
    coef = _coef_intervals(boot, beta, reps)
    common = dict(terms="+".join(fit.terms), rel_rms=fit.rel_rms, knee_gpus=max(knee) if knee else None,
                  fastest_gpus=fastest, cheapest_gpus=cheapest, **coef)
    ring_note = "" if "d" in fit.terms or fixed is None else \
        "; ring term d not separable from a and b at a fixed global batch"
    out = []
    for j, n in enumerate(grid):
        row = dict(key, gpus=int(n), kind="predicted", repeats=None, t_image_s=None) if n not in ns else \
            measured[list(ns).index(n)]
        images = images_of(int(n))
        row = dict(row, **common, fit_t_image_s=float(t_grid[j]), speedup=float(speedup[j]),
                   efficiency=float(eff[j]), time_s=float(t_grid[j] * images),
                   gpu_hours=float(t_grid[j] * images * n / 3600.0))
        if j in interval:
            f_lo, f_hi, s_lo, s_hi, e_lo, e_hi = interval[j]
            row.update(fit_lo_s=f_lo, fit_hi_s=f_hi, speedup_lo=s_lo, speedup_hi=s_hi, efficiency_lo=e_lo,
                       efficiency_hi=e_hi, time_lo_s=f_lo * images, time_hi_s=f_hi * images)
        if row["kind"] == "measured":
            row["error"] = float(t_grid[j] / row["t_image_s"] - 1.0)
        row["note"] = (f"terms {'+'.join(fit.terms)}" + ("; prediction" if row["kind"] == "predicted" else "")
                       + ("" if j in interval else "; no interval: one repeat and no sampled window")
                       + ring_note + inter)
        out.append(row)
    return out


def _images_of(planned: dict[int, float]) -> Callable[[int], float]:
    """The images a run at N GPUs trains: its own measured plan at a measured N; at a
    predicted N the same as every measured N where they all train the same images (weak and
    strong scaling), else (a fixed schedule: the same iterations at a fixed batch per GPU,
    work growing with N) the largest N's images per GPU times N. One median over the series
    would give every N one N's work: time_s and gpu_hours wrong by N_i/N_j."""
    values = list(planned.values())
    same = all(abs(v - values[0]) <= SAME_WORK_TOLERANCE * values[0] for v in values)
    n_max = max(planned)
    per_gpu = planned[n_max] / n_max
    return lambda n: planned.get(n, values[0] if same else per_gpu * n)


def _fixed_global(batch: np.ndarray) -> Optional[float]:
    """The global batch where every N has the same one (strong scaling), else None."""
    return float(batch[0]) if np.allclose(batch, batch[0]) and len(batch) > 1 else None


def _ms(s: Optional[float]) -> Optional[float]:
    return None if s is None else s * 1e3


def _noise(by_n: dict, ns: np.ndarray, y: np.ndarray) -> float:
    """The points' pooled relative noise: the spread of each N's mean over repeats, or a
    sampled window's interval where one repeat ran; 0 where neither says anything."""
    parts = []
    for n, mean in zip(ns, y):
        grp = by_n[int(n)]
        vals = grp["t_image_s"].to_numpy()
        if len(vals) > 1:
            parts.append((vals.std(ddof=1) / math.sqrt(len(vals)) / mean) ** 2)
        elif grp["window_rel_sd"].drop_nulls().len():
            parts.append(float(grp["window_rel_sd"].drop_nulls()[0]) ** 2)
    return math.sqrt(sum(parts) / len(parts)) if parts else 0.0


def fit_terms_batch(x: np.ndarray, ys: np.ndarray, subset: Sequence[int]) -> np.ndarray:
    """fit_terms for many y at once (``ys``: resamples x points), vectorised over the
    resamples: each sub-subset of ``subset`` solved by batched least squares on relative
    residuals, the best feasible (non-negative) one kept per resample; coefficients over
    all four columns (0 where no sub-subset is feasible)."""
    out = np.zeros((ys.shape[0], x.shape[1]))
    best = np.full(ys.shape[0], np.inf)
    w = 1.0 / ys  # resamples x points
    for k in range(1, len(subset) + 1):
        for sub in itertools.combinations(subset, k):
            cols = x[:, sub]
            if np.linalg.matrix_rank(cols) < k:  # row weights never change the rank: once per subset
                continue
            xs = cols[None, :, :] * w[:, :, None]  # resamples x points x k
            beta = np.einsum("bkp,bp->bk", np.linalg.pinv(xs), np.ones_like(ys))
            tol = 1e-12 * np.abs(beta).max(axis=1, keepdims=True)
            feasible = ~(beta < -tol).any(axis=1)
            beta = np.clip(beta, 0.0, None)
            rms = np.sqrt(np.mean((np.einsum("pk,bk->bp", cols, beta) * w - 1.0) ** 2, axis=1))
            take = feasible & (rms < best - 1e-15)
            best[take] = rms[take]
            out[np.ix_(take, list(sub))] = beta[take]
            out[np.ix_(take, [i for i in subset if i not in sub])] = 0.0
    return out


def _bootstrap(x, reps, by_n, ns, sub) -> Optional[np.ndarray]:
    """Coefficient resamples (BOOTSTRAP x 4) refitted on the selected terms, all resamples
    at once (fit_terms_batch); None where the points carry no spread to resample."""
    rng = np.random.default_rng(SEED)
    sds = [by_n[int(n)]["window_rel_sd"].drop_nulls() for n in ns]
    if all(len(r) == 1 for r in reps) and not all(len(s) for s in sds):
        return None
    ys = np.empty((BOOTSTRAP, len(reps)))
    for j, (r, s) in enumerate(zip(reps, sds)):
        if len(r) > 1:  # each N's repeats resampled with replacement, their mean
            ys[:, j] = r[rng.integers(0, len(r), size=(BOOTSTRAP, len(r)))].mean(axis=1)
        elif len(s):  # one repeat: its sampled window's interval as a normal spread
            ys[:, j] = r[0] * (1.0 + rng.normal(0.0, float(s[0]), size=BOOTSTRAP))
        else:  # one unsampled repeat beside repeated N: nothing to resample, the value as measured
            ys[:, j] = r[0]
    return fit_terms_batch(x, np.clip(ys, 1e-300, None), sub)


def _inflation(reps) -> tuple[float, float]:
    """Small-sample correction of the bootstrap's spread: resampling r repeats shrinks it by
    sqrt((r-1)/r), and its quantiles are a normal's where Student's t applies."""
    r = min(len(x) for x in reps)
    if r <= 1:
        return 1.0, Z95
    return math.sqrt(r / (r - 1.0)), _t_quantile(r - 1)


def _spread(samples: np.ndarray, estimate: np.ndarray, scale: float, q: float) -> tuple[np.ndarray, np.ndarray]:
    sd = samples.std(axis=0, ddof=1) * scale
    return np.clip(estimate - q * sd, 0.0, None), estimate + q * sd


def _intervals(boot, xg, t_grid, t1, grid, reps) -> dict:
    """Per grid index: the 95 % intervals of the fitted t, speedup and efficiency."""
    if boot is None:
        return {}
    scale, q = _inflation(reps)
    ts = boot @ xg.T  # resamples x grid
    t1s = boot @ columns(np.array([1.0]), np.array([1.0]))[0]
    f_lo, f_hi = _spread(ts, t_grid, scale, q)
    s_lo, s_hi = _spread(t1s[:, None] / ts, t1 / t_grid, scale, q)
    return {j: (float(f_lo[j]), float(f_hi[j]), float(s_lo[j]), float(s_hi[j]), float(s_lo[j] / n),
                float(s_hi[j] / n)) for j, n in enumerate(grid)}


def _coef_intervals(boot, beta, reps) -> dict:
    out = {}
    scale, q = _inflation(reps)
    for i, t in enumerate(TERMS):
        out[t] = float(beta[i])
        if boot is None:
            out[f"{t}_lo"] = out[f"{t}_hi"] = None
        else:
            sd = float(boot[:, i].std(ddof=1)) * scale
            out[f"{t}_lo"], out[f"{t}_hi"] = max(beta[i] - q * sd, 0.0), beta[i] + q * sd
    return out
