"""Tables of the results store, schema version ``SCHEMA_VERSION``.

campaign 1--n point 1--n attempt 1--n rank_timing / iteration / profile / breakdown / progress
A point is one sweep point (platform x gpus x ... x repeat); an attempt is one run of
it: each submission of the point (launch, ``campaign resume``, an automatic retry) opens
one, and each requeue of that job (SLURM's, or a checkpointed job's own) one more. A
store of an older version is upgraded in place by the first command that writes to it
(``sql/migrate.py``); ``status`` and ``harvest`` read every version in ``READABLE``.
"""

from sqlalchemy import (
    JSON,
    Boolean,
    Column,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
)

SCHEMA_VERSION = 6  # 2: attempts of resubmissions (origin, overrides, submitted_at, node_list); 3: progress
# (heartbeats); 4: point.signature (campaign/common/signing.py); 5: evaluation (experiment.validation);
# 6: point.job_signature (campaign cancel signals only a job id its launcher signed)
PROGRESS_SINCE = 3  # the version that added the progress table (status reads heartbeats from there on)
SIGNED_SINCE = 4  # the version that added point.signature (a resubmission refuses a point without one)
EVALUATION_SINCE = 5  # the version that added the evaluation table (harvest reads none before it)
JOB_SIGNED_SINCE = 6  # the version that added point.job_signature (cancel signals no job id without one)

metadata = MetaData()

meta = Table(
    "meta",
    metadata,
    Column("key", String(64), primary_key=True),
    Column("value", Text, nullable=False),
)

campaign = Table(
    "campaign",
    metadata,
    Column("id", String(64), primary_key=True),  # e.g. 20261121-105700-3f2a
    Column("name", String(255)),
    Column("created_at", Float, nullable=False),  # unix time
    Column("command", Text),  # the launch command line
    Column("overrides", JSON),  # the sweep's overrides as given
    Column("results_dir", Text),
    Column("host", String(255)),
    Column("user", String(255)),
)

point = Table(
    "point",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("campaign_id", String(64), ForeignKey("campaign.id", ondelete="CASCADE"), nullable=False),
    Column("idx", Integer, nullable=False),  # position in the sweep
    Column("platform", String(64), nullable=False),
    Column("trainer", String(64), nullable=False),
    Column("experiment", String(64), nullable=False),
    Column("dataset", String(64), nullable=False),
    Column("gpus", Integer, nullable=False),
    Column("nodes", Integer, nullable=False),
    Column("repeat", Integer, nullable=False, default=0),
    Column("batch_per_gpu", Integer),
    Column("iterations", Integer),
    Column("overrides", JSON),  # this point's overrides
    Column("config", JSON),  # the fully resolved config
    Column("executor", String(16), nullable=False),  # local | slurm
    Column("job_id", String(64)),
    Column("job_folder", Text),
    Column("log_path", Text),
    Column("state", String(16), nullable=False),  # registered pending running completed failed cancelled timeout ...
    Column("reason", Text),  # why a point failed / is pending
    Column("submitted_at", Float),
    Column("started_at", Float),
    Column("ended_at", Float),
    # version 4 (sql/migrate.py): the launcher's HMAC of what a resubmission trusts (campaign/common/signing.py);
    # NULL: registered before version 4, or by hand
    Column("signature", String(64)),
    # version 6: the submitter's HMAC of the job it recorded (job_id, job_folder, executor; campaign/common/signing.py);
    # NULL: submitted before version 6, or written by hand: campaign cancel never signals that job
    Column("job_signature", String(64)),
    UniqueConstraint("campaign_id", "idx", name="uq_point_campaign_idx"),
)
Index("ix_point_campaign_state", point.c.campaign_id, point.c.state)
Index("ix_point_job", point.c.job_id)

attempt = Table(
    "attempt",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("point_id", Integer, ForeignKey("point.id", ondelete="CASCADE"), nullable=False),
    Column("attempt_no", Integer, nullable=False),  # 0, 1, ... over the point's submissions and requeues
    Column("job_id", String(64)),
    Column("state", String(16), nullable=False),  # registered pending running requeued completed failed ...
    Column("reason", Text),
    Column("world_size", Integer),
    Column("started_at", Float),
    Column("ended_at", Float),
    Column("provenance", JSON),  # host(s), torch/cuda versions, devices, image, ...
    # version 2 (sql/migrate.py):
    Column("origin", String(16)),  # launch | resume | retry (max_retries) | requeue (the job's own); NULL: before v2
    Column("overrides", JSON),  # the overrides `campaign resume` applied to this submission only
    Column("submitted_at", Float),  # when this submission reached its scheduler
    Column("node_list", Text),  # where it ran, as the scheduler said (recorded when its end is recorded)
    UniqueConstraint("point_id", "attempt_no", name="uq_attempt_point_no"),
)
Index("ix_attempt_point", attempt.c.point_id)

# One row per rank and attempt: the timed window's summary.
rank_timing = Table(
    "rank_timing",
    metadata,
    Column("attempt_id", Integer, ForeignKey("attempt.id", ondelete="CASCADE"), primary_key=True),
    Column("rank", Integer, primary_key=True),
    Column("host", String(255)),
    Column("device", String(255)),
    Column("warmup_iterations", Integer),
    Column("warmup_s", Float),  # time of the warm-up iterations, reported apart
    Column("iterations", Integer),  # timed iterations
    Column("wall_s", Float),  # start of the first timed iteration to the end of the last
    Column("iter_mean_s", Float),
    Column("iter_median_s", Float),
    Column("iter_p95_s", Float),
    Column("images", Integer),  # images this rank processed in the timed window
    Column("images_per_s", Float),
    Column("final_loss", Float),
    Column("data_wait_s", Float),  # summed over the timed window
    Column("compute_s", Float),
    Column("comm_s", Float),
    Column("peak_memory_bytes", Float),
    Column("flops_per_iter", Float),
    Column("trainable_params", Integer),
    Column("extra", JSON),
)

# One row per rank and iteration (warm-up included, flagged).
iteration = Table(
    "iteration",
    metadata,
    Column("attempt_id", Integer, ForeignKey("attempt.id", ondelete="CASCADE"), primary_key=True),
    Column("rank", Integer, primary_key=True),
    Column("iter", Integer, primary_key=True),
    Column("warmup", Boolean, nullable=False),
    Column("iter_s", Float, nullable=False),
    Column("loss", Float),
    Column("data_s", Float),
    Column("forward_s", Float),
    Column("backward_s", Float),
    Column("step_s", Float),
    Column("comm_s", Float),
)
# campaign harvest's job iterations (campaign/harvest/query.py, job_iterations_query): per
# attempt, the timed iterations in order with each rank's iter_s, read from this index
# alone; the primary key (attempt_id, rank, iter) would need a table lookup per row and a
# sort to group the ranks of an iteration. Costs the writer one more index entry per row
# (~15 % more time per batched row, benchmarks/README.md). A store made before it has the
# same schema version and harvests the same, slower; CREATE INDEX (sql/schema.sql) adds it.
Index("ix_iteration_job", iteration.c.attempt_id, iteration.c.warmup, iteration.c.iter, iteration.c.iter_s)

# Profiler window (after the timed window): CPU / device time and utilisation.
profile = Table(
    "profile",
    metadata,
    Column("attempt_id", Integer, ForeignKey("attempt.id", ondelete="CASCADE"), primary_key=True),
    Column("rank", Integer, primary_key=True),
    Column("iterations", Integer),
    Column("total_s", Float),  # wall time of the profiled iterations
    Column("cpu_s", Float),  # self CPU time of all operators
    Column("device_s", Float),  # self device (GPU) time of all kernels
    Column("cpu_util", Float),  # cpu_s / total_s
    Column("gpu_util", Float),  # device_s / total_s (NULL on CPU)
    Column("comm_s", Float),  # communication kernels / collectives
    Column("exposed_comm_s", Float),  # communication not overlapped with compute
    Column("top_ops", JSON),
)

# Named phases reported by an engine itself (e.g. DeepSpeed's wall_clock_breakdown).
breakdown = Table(
    "breakdown",
    metadata,
    Column("attempt_id", Integer, ForeignKey("attempt.id", ondelete="CASCADE"), primary_key=True),
    Column("rank", Integer, primary_key=True),
    Column("phase", String(64), primary_key=True),
    Column("total_s", Float),
    Column("mean_s", Float),
    Column("median_s", Float),
    Column("p95_s", Float),
    Column("count", Integer),
)

# Heartbeats of running ranks (trainers/heartbeat.py): one row per rank at the start of
# its loop, then every store.heartbeat_s seconds while it trains, written by a thread
# of the job (off the timed path: it reads the rank's iteration counter, never the
# device). campaign status derives each running point's progress, rate and ETA from
# them. Schema version 3 (migrate.py adds it to an older store).
progress = Table(
    "progress",
    metadata,
    Column("attempt_id", Integer, ForeignKey("attempt.id", ondelete="CASCADE"), primary_key=True),
    Column("rank", Integer, primary_key=True),
    Column("seq", Integer, primary_key=True),  # 0, 1, 2, ... per rank: the rank's n-th heartbeat
    Column("at", Float, nullable=False),  # unix time of the reading
    Column("iteration", Integer, nullable=False),  # iterations the rank had finished then (warm-up included)
    Column("total", Integer, nullable=False),  # iterations the rank runs (warm-up included)
    Column("warmup", Integer, nullable=False),  # of which warm-up
)

# Evaluation passes (experiment.validation=true, trainers/evaluate.py): one row per epoch
# and split, the whole split's figures (every rank's shard reduced, count-weighted) written
# by rank 0, run between iterations outside the timed window. Schema version 5.
evaluation = Table(
    "evaluation",
    metadata,
    Column("attempt_id", Integer, ForeignKey("attempt.id", ondelete="CASCADE"), primary_key=True),
    Column("epoch", Integer, primary_key=True),  # the training epoch just ended (0-based)
    Column("split", String(16), primary_key=True),  # "test"
    Column("loss", Float),  # mean loss per image over the split (the trainer's loss function)
    Column("accuracy", Float),  # share of the split's images classified right, in [0, 1]
    Column("images", Integer),  # images evaluated: the whole split
    Column("seconds", Float),  # wall time of the pass (slowest rank), not in the training time
)

FINAL_STATES = ("completed", "failed", "cancelled", "timeout", "out_of_memory", "node_fail", "preempted", "boot_fail", "deadline", "rejected", "lost")
# ``waiting``: registered, held back until the scheduler has room for it (campaign resume,
# or campaign status --wait --submit, submits it then).
ACTIVE_STATES = ("registered", "waiting", "pending", "running", "requeued")
