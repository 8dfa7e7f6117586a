"""Typed configuration: the dataclasses behind every Hydra config group.

``conf/`` only picks and overrides; the fields, their types and their meaning live
here. ``CampaignConfig`` is registered in Hydra's ConfigStore as ``campaign_schema``
and ``conf/config.yaml`` starts from it, so every group option is checked against
its dataclass (an unknown key or a wrong type is refused at compose time).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from omegaconf import MISSING, OmegaConf

from campaign.catalogue.design import DesignSpec
from campaign.catalogue.gpus import cpu_count  # this machine's facts live there; the ${cpus:} resolver is it
from trainers.spec import Device, Optimizer, Precision

GROUPS = ("platform", "experiment", "trainer", "dataset", "store", "container")


class Executor(str, enum.Enum):
    """``platform.executor``: who runs a point's job."""

    slurm = "slurm"  # sbatch through submitit
    local = "local"  # processes on this machine


class DistBackend(str, enum.Enum):
    """``platform.dist_backend``: torch.distributed's backend."""

    nccl = "nccl"  # GPUs
    gloo = "gloo"  # CPUs


class CommHook(str, enum.Enum):
    """``experiment.comm_hook``: what times DDP's gradient all-reduce (docs/breakdown.md)."""

    auto = "auto"  # C++ on CPU where it builds and loads on every rank (trainers.comm_cpp), else Python
    cpp = "cpp"  # the C++ hook or the job fails saying why (CPU models only)
    python = "python"  # the Python hook (trainers.comm.AllReduceTimer): CPU and CUDA


class Scaling(str, enum.Enum):
    """``experiment.scaling``: how batch and iterations follow the GPU count."""

    weak = "weak"  # fixed images per GPU, base_iterations/N iterations
    strong = "strong"  # fixed global batch split over the GPUs
    fixed = "fixed"  # the same iterations for every N


@dataclass
class PlatformSpec:
    name: str = MISSING  # the option name, e.g. "a100_nvlink_80"
    description: str = ""  # one line shown by `campaign status` and harvest
    executor: Executor = Executor.slurm  # slurm (sbatch through submitit) or local (processes on this machine)
    partition: Optional[str] = None  # SLURM partition the jobs go to
    gpus_per_node: int = 1  # GPUs (ranks) one node holds; more needs nodes>1
    max_nodes: int = 1  # nodes a job may span on this platform
    device: Device = Device.cuda  # cuda or cpu: what a rank computes on
    dist_backend: DistBackend = DistBackend.nccl  # torch.distributed backend: nccl on GPUs, gloo on CPUs
    gpu_model: str = ""  # vendor model name, e.g. "NVIDIA A100-SXM4-80GB"
    gpu_memory_gb: float = 0.0  # memory per GPU
    compute_capability: Optional[float] = None  # the GPUs' CUDA compute capability (V100 7.0, A100 8.0, H100 9.0): checked against the torch build (campaign/launch/arch.py), except on a SLURM partition whose nodes carry emulated_gpu; None (null: the manual override for emulated GPUs): not checked
    memory_bandwidth_gbs: float = 0.0  # GPU memory bandwidth (datasheet)
    interconnect: str = ""  # GPU-GPU link within a node, e.g. "NVLINK 3.0"
    interconnect_bandwidth_gbs: float = 0.0  # GPU-GPU bandwidth within a node, both directions together (datasheet, the study's Table 1: NVLink 3.0 600); bounds and busbw fractions use one direction, half of it
    fabric_bandwidth_gbs: float = 0.0  # inter-node bandwidth per GPU (the fabric's, GB/s); harvest's model bounds inter-node communication with it (0: unknown)
    cpu: str = ""  # host CPU model
    cpus_per_node: int = 0  # CPU cores per node
    node_memory_gb: float = 0.0  # host RAM per node
    constraint: Optional[str] = None  # sbatch --constraint, e.g. picks 80 GB vs 40 GB A100 nodes
    cpus_per_task: Optional[int] = None  # CPU cores per rank (default: cpus_per_node // gpus_per_node)
    mem_per_gpu_gb: Optional[float] = None  # host memory per rank requested from SLURM
    account: Optional[str] = None  # sbatch --account
    qos: Optional[str] = None  # sbatch --qos
    time_limit_min: int = 60  # wall-clock limit of a job (minutes, > 0)
    dist_timeout_min: float = 10.0  # torch.distributed timeout: a collective (or rendezvous) waiting longer fails the job
    exclusive: bool = False  # one job at a time on a node, so points never share cores (local: a file lock)
    extra_sbatch: List[str] = field(default_factory=list)  # raw extra "#SBATCH" arguments, e.g. "--exclusive"
    max_submit: Optional[int] = None  # at most this many of a campaign's points of this platform in the scheduler at once; the rest wait (campaign resume submits them)
    max_running: Optional[int] = None  # SLURM: at most this many points of one job array run at once (--array=...%k; None: 256)
    peak_tflops: Dict[str, float] = field(default_factory=dict)  # peak dense TFLOP/s per precision (datasheet)


@dataclass
class ExperimentSpec:
    name: str = MISSING  # the option name, e.g. "weak_scaling"
    scaling: Scaling = Scaling.weak  # weak: fixed images per GPU, base_iterations/N; strong: fixed global batch; fixed: same iterations for every N
    images_per_gpu: Optional[int] = 8  # per-rank batch ("weak"/"fixed")
    global_batch: Optional[int] = None  # whole-job batch split over the ranks ("strong")
    base_iterations: int = 160000  # iterations on 1 GPU; weak scaling runs base_iterations/N
    iterations: Optional[int] = None  # explicit iteration count for every N (overrides the derivation)
    warmup_iterations: int = 5  # iterations run before the timed window and reported apart
    profile_iterations: int = 0  # iterations profiled after the timed window (0: no profiler)
    grad_accum: int = 1  # micro-batches per optimizer step
    dataset_fraction_per_gpu: Optional[float] = None  # weak scaling by dataset share: each point trains on min(1, this x gpus) of the training set (overrides dataset.fraction)
    sample_iterations: Optional[int] = None  # a sampled run: at most this many timed iterations; harvest projects the full run from them
    sample_halfwidth: float = 0.01  # a sampled run stops once its rate's 95 % interval is this narrow (relative); 0: a fixed window of sample_iterations
    sample_max_warmup: int = 200  # a sampled run's warm-up ends when its iteration times settle, at the latest after this many
    epochs: Optional[int] = None  # train this many epochs of the point's training share: warm-up + timed iterations = epochs x the loader's iterations per epoch (not with iterations)
    time_comm: bool = True  # time DDP's gradient all-reduce bucket by bucket (a comm hook, docs/breakdown.md); false: communication stays inside backward, not split out
    comm_hook: CommHook = CommHook.auto  # which hook times it: auto (C++ on CPU where it builds, else Python), cpp, python
    validation: bool = False  # evaluate the test split after every epoch, outside the timed window (vit, frozen_backbone; off for timing runs)
    validation_images: Optional[int] = None  # with validation: evaluate the test split's first this many images, not all of them (None: the whole split; the evaluation row's images says how many)
    checkpoint: bool = False  # checkpoint on SLURM's signal (preemption, time limit) and requeue; resume from it (off for timing runs)
    checkpoint_every: int = 0  # with checkpoint: also every this many iterations (0: only on the signal)
    until_time_limit: bool = False  # true: a point may run into its time limit on purpose (it ends timeout); the launch does not refuse it


@dataclass
class TrainerSpec:
    name: str = MISSING  # the trainer's name, as its declaration says (trainers/spec.py), e.g. "synthetic"
    module: Optional[str] = None  # torch-free module declaring it (TRAINER = TrainerDef(...)); None: trainers.specs.<name>
    optimizer: Optimizer = Optimizer.sgd  # sgd or adamw
    lr: float = 0.01  # learning rate
    momentum: float = 0.9  # SGD momentum
    weight_decay: float = 0.0  # optimizer weight decay
    precision: Precision = Precision.fp32  # fp32, fp16 or bf16 (autocast on GPU)
    params: Dict[str, Any] = field(default_factory=dict)  # trainer-specific knobs, typed by the trainer's declaration


@dataclass
class DatasetSpec:
    name: str = "synthetic"  # "synthetic" or a real on-disk dataset ("mnist", "cifar10", "ade20k", ...)
    root: Optional[str] = None  # folder holding the dataset in its standard on-disk format
    image_size: int = 32  # side of the (square) images fed to the model
    channels: int = 3  # image channels
    num_classes: int = 10  # label range
    num_workers: int = 0  # DataLoader worker processes per rank
    fraction: Optional[float] = None  # share of the training set to use (weak scaling by dataset share)
    length: Optional[int] = None  # samples of the synthetic dataset (default 10,000)


@dataclass
class StoreSpec:
    url: str = MISSING  # SQLAlchemy URL of the results store, e.g. sqlite:///results/campaign.db
    busy_timeout_s: float = 30.0  # how long a writer waits on a locked database before spooling
    heartbeat_s: float = 10.0  # seconds between a running rank's progress rows (campaign status: i/n, rate, ETA); 0: none


@dataclass
class ContainerSpec:
    runtime: str = "none"  # "none", "singularity" or "apptainer"
    image: Optional[str] = None  # path of the .sif image (the default for every platform)
    images: Dict[str, str] = field(default_factory=dict)  # platform name, or compute capability ("7.0"), -> the .sif its points run in instead of image
    binds: List[str] = field(default_factory=list)  # extra bind mounts, "src[:dst[:opts]]"
    env: Dict[str, str] = field(default_factory=dict)  # extra environment variables set inside


@dataclass
class StudySpec:
    # Set by a study preset (conf/study/<name>.yaml, `study=NAME`); a point launched without one leaves it empty.
    name: Optional[str] = None  # the preset's name, e.g. "swinv2_thesis"
    title: str = ""  # the published study, in words (its author, kind and year)
    text: str = ""  # its full text's file name (the project's shared reference folder)
    reference: Optional[str] = None  # the published figures harvest and the report lay beside the campaign's (campaign/harvest/reference_data)
    reads_files: bool = False  # the study read its dataset from files: no synthetic stand-in when dataset.root is missing (refused instead)
    standin: Optional[str] = None  # the launch writes a stand-in of this size (tests, small, full; campaign datagen) at dataset.root when none is there
    not_gathered: str = ""  # why the study has no point where a platform cannot hold it (said with the refusal)
    not_gathered_on: List[str] = field(default_factory=list)  # the platforms that sentence is about (others: no quote)
    design: Optional[DesignSpec] = None  # its factors, fixed settings and campaign's choices (campaign/catalogue/design.py)


@dataclass
class CampaignConfig:
    platform: PlatformSpec = MISSING  # where the point runs
    experiment: ExperimentSpec = MISSING  # how iterations and batch scale with gpus
    trainer: TrainerSpec = MISSING  # what trains
    dataset: DatasetSpec = MISSING  # what it trains on
    store: StoreSpec = MISSING  # where timing rows go
    container: ContainerSpec = MISSING  # what the job's Python runs in
    study: StudySpec = field(default_factory=StudySpec)  # the published study whose preset made the point (study=NAME)
    gpus: int = 1  # GPUs (= DDP ranks) of the point, over all its nodes
    nodes: int = 1  # nodes the point spans; gpus must divide evenly over them
    repeats: int = 1  # run each point this many times (harvest reports median and spread)
    seed: int = 0  # random seed of model init and data
    name: Optional[str] = None  # campaign name shown by status (default: the campaign id)
    dry_run: str = "false"  # print what would be submitted, submit nothing: true (a table), scripts (+ sbatch scripts and commands), json
    max_gpu_hours: Optional[float] = None  # refuse a launch whose estimated GPU-hours exceed this (campaign/observe/estimate.py)
    max_retries: int = 0  # resubmit a point that ends in a retry_on state up to this many times (campaign launch --max-retries K)
    retry_on: List[str] = field(default_factory=lambda: ["node_fail", "preempted", "boot_fail"])  # states max_retries resubmits
    results_dir: str = "results"  # folder of the default store, job folders and logs
    max_points: int = 10000  # refuse a campaign of more points (sweep points x repeats) than this, before building them
    max_repeats: int = 100  # refuse repeats above this
    max_iterations: int = 10**9  # refuse an experiment.*iterations value above this


def cpu_peak_tflops() -> float:
    """A stated fp32 peak for this machine: cores x 2.5 GHz x 32 FLOP/cycle (AVX2, 2 FMA units).

    Only an estimate; the local platform's ``peak_tflops.fp32`` overrides it.
    """
    return round(cpu_count() * 2.5e9 * 32 / 1e12, 4)


def is_campaign_config(cfg: Any) -> bool:
    """Whether a composed config is a campaign's (every group of ``CampaignConfig``), not
    another Hydra app's: the launcher plugin runs the two differently."""
    try:
        return all(key in cfg for key in GROUPS) and "gpus" in cfg
    except TypeError:
        return False


def register() -> None:
    """Register the schemas and the ``${cpus:}`` resolver (idempotent). Each is looked up
    where it lives, not remembered here: Hydra's singletons can be put back to a state
    from before (``Singleton.set_state``, as its test fixtures and job entry do)."""
    from hydra.core.config_store import ConfigStore

    cs = ConfigStore.instance()
    if "campaign_schema.yaml" not in cs.list(""):
        cs.store(name="campaign_schema", node=CampaignConfig)
    # The launcher and sweeper plugins are found by Hydra's own scan of hydra_plugins
    # (pyproject.toml lists the namespace so an editable install shows it too).
    if not OmegaConf.has_resolver("cpus"):
        OmegaConf.register_new_resolver("cpus", cpu_count)
    if not OmegaConf.has_resolver("cpu_peak_tflops"):
        OmegaConf.register_new_resolver("cpu_peak_tflops", cpu_peak_tflops)
    if not OmegaConf.has_resolver("local_gpu"):
        from campaign.catalogue.gpus import local_gpu_fact

        OmegaConf.register_new_resolver("local_gpu", local_gpu_fact)
