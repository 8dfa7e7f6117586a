"""How hard each point drove the hardware, per series and GPU count (medians over repeats).

mfu                  model FLOPs utilisation: achieved model TFLOP/s of a rank (FLOPs of one
                     iteration, counted once, x timed iterations / timed window) over the
                     platform's peak for the math the job ran (``math``: bf16/fp16 autocast,
                     tf32 or fp32 as cuBLAS's and cuDNN's TF32 switches were; trainers/flops.py);
                     averaged over ranks. ``precision`` is the trainer's configured one
allreduce_mb_per_iter gradient bytes one rank all-reduces per iteration (the DDP hook's)
busbw_gbs            the all-reduce's bus bandwidth 2(n-1)/n x bytes / time in flight
                     (nccl-tests' convention), and ``busbw_fraction``: its share of ONE
                     direction of the platform's stated GPU-GPU bandwidth (``interconnect_gbs``,
                     both directions together as datasheets and the study's Table 1 state it:
                     NVLink 3.0 600 GB/s, 300 each way), so 1.0 is the link's own speed
exposed_comm_ms      all-reduce time per iteration that no backward compute hid
sync_gb_per_epoch    synchronisation per epoch as it happens: every iteration moves every
                     trainable parameter's gradient once, N / (images per iteration) iterations
                     (the job's N/(b k) with b its images per GPU), x bytes per element
sync_gb_per_epoch_text the DataParallel study's formula as its text writes it (its Sec. on data
                     transfer, Appendix 6a): N/(B x k) x trainable parameters with B its batch
                     size, the global batch it hands DataParallel: the physical count / k
peak_memory_gb       the timed window's peak (largest over ranks). GPU: max_memory_allocated,
                     kept across any reset of CUDA's peak counter during the run
                     (trainers/memory.py); CPU ranks: the process's max RSS
warmup_peak_memory_gb the warm-up's peak, apart (cuDNN autotuning, allocator growth)

The figures are the jobs' own (rank_timing.extra, docs/breakdown.md); what a job did
not record stays absent (a 1-rank point moves no gradient; a platform that states no
peak has no MFU), never zero, and ``note`` says why.
"""

from __future__ import annotations

import polars as pl

from campaign.harvest.views import KEYS, with_optional

_COLUMNS = {
    "precision": pl.Utf8, "math": pl.Utf8, "achieved_tflops": pl.Float64, "peak_tflops": pl.Float64, "mfu": pl.Float64,
    "trainable_params": pl.Int64, "allreduce_bytes_per_iter": pl.Float64, "allreduce_busbw_gbs": pl.Float64,
    "interconnect_bandwidth_gbs": pl.Float64, "exposed_comm_s": pl.Float64,
    "sync_bytes_per_epoch": pl.Float64, "peak_memory_bytes": pl.Float64, "peak_memory_source": pl.Utf8,
    "warmup_peak_memory_bytes": pl.Float64,
    "timed_iterations": pl.Int64,
}
COLUMNS = KEYS + ["repeats", "precision", "math", "achieved_tflops", "peak_tflops", "mfu", "trainable_params",
                  "allreduce_mb_per_iter", "busbw_gbs", "interconnect_gbs", "busbw_fraction", "exposed_comm_ms",
                  "sync_gb_per_epoch", "sync_gb_per_epoch_text", "peak_memory_gb", "warmup_peak_memory_gb", "note"]


def hardware_table(points: pl.DataFrame) -> pl.DataFrame:
    if points.height == 0:
        return pl.DataFrame()
    p = with_optional(with_optional(points), _COLUMNS).with_columns(
        (pl.col("exposed_comm_s") / pl.col("timed_iterations")).alias("exposed_comm_s_per_iter"))
    out = (
        p.group_by(KEYS)
        .agg(
            pl.len().alias("repeats"),
            pl.col("precision").drop_nulls().first(),
            pl.col("math").drop_nulls().first(),
            pl.col("achieved_tflops").median(),
            pl.col("peak_tflops").median(),
            pl.col("mfu").median(),
            pl.col("trainable_params").max(),
            (pl.col("allreduce_bytes_per_iter").median() / 1e6).alias("allreduce_mb_per_iter"),
            pl.col("allreduce_busbw_gbs").median().alias("busbw_gbs"),
            pl.col("interconnect_bandwidth_gbs").max().alias("interconnect_gbs"),
            (pl.col("exposed_comm_s_per_iter").median() * 1e3).alias("exposed_comm_ms"),
            (pl.col("sync_bytes_per_epoch").median() / 1e9).alias("sync_gb_per_epoch"),
            (pl.col("peak_memory_bytes").max() / 1e9).alias("peak_memory_gb"),
            (pl.col("warmup_peak_memory_bytes").max() / 1e9).alias("warmup_peak_memory_gb"),
            pl.col("peak_memory_source").drop_nulls().first(),
        )
        # the text's B is the global batch, so its N/(B k) is k times fewer iterations than run
        # of one direction of the stated (both-directions) interconnect: derived here, so rows a job
        # stored before 2026-11-26 (busbw over both directions) read the same as new ones
        .with_columns((pl.col("sync_gb_per_epoch") / pl.col("gpus")).alias("sync_gb_per_epoch_text"),
                      (pl.col("busbw_gbs") / (pl.col("interconnect_gbs") / 2)).alias("busbw_fraction"))
        .with_columns(_note())
        .sort(KEYS)
    )
    return out.select(COLUMNS)


def _note() -> pl.Expr:
    parts = [
        pl.when(pl.col("mfu").is_null() & pl.col("achieved_tflops").is_not_null())
        .then(pl.lit("no MFU: the platform states no peak for this math")),
        pl.when(pl.col("achieved_tflops").is_null()).then(pl.lit("no FLOPs counted (no warm-up iteration?)")),
        pl.when(pl.col("allreduce_mb_per_iter").is_null() & (pl.col("gpus") > 1))
        .then(pl.lit("all-reduce not timed by the hook (engine's own communication)")),
        pl.when(pl.col("peak_memory_source") == "max_rss").then(pl.lit("memory: max RSS of the rank's process")),
    ]
    return (pl.concat_str([x.fill_null("") for x in parts], separator="; ")
            .str.replace_all(r"(; )+", "; ").str.strip_chars("; ").alias("note"))
