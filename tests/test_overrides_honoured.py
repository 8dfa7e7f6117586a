"""Issue #40, "Overrides accepted and ignored": every key a user can set, for every built-in
trainer, is either refused at launch in one line or changes what the job builds.

The walk: for each trainer x each key (``trainers.spec.COMMON_KEYS`` and every field of its
``trainer.params``), a point is composed and planned in-process (Hydra, ``plan_point``) with
the key set; a refused one must be refused by its declaration (``TrainerDef.unused``), a
planned one must differ from its reference point in the config the job receives AND in the
job object the trainer's own code builds from it on this CPU (``PROBES``: optimizer defaults,
autocast dtype, loader workers, model shapes, the sleep law's phases ...). SwinV2's facts
come from the builder functions its trainer passes to MMEngine (model_config,
optim_wrapper_config, param_scheduler_config, dataloader_config), not a whole Runner; the
few keys with only a plan-level proof are listed in ``PLAN_ONLY``.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from campaign.common.errors import CampaignError, ConfigError
from campaign.launch.honoured import check_declared, lookup
from campaign.launch.plan import job_plan, plan_point
from trainers import registry
from trainers.spec import COMMON_KEYS

try:
    from tests.conftest import hydra_version_base_kept
except ImportError:  # tests/ on sys.path as a rootdir folder rather than a package
    from conftest import hydra_version_base_kept
from conftest import Workspace  # pytest's own conftest module: its fork server is the one pytest stops

# The trainers' code, imported at collection as their own tests do: import-time side effects
# (cv2's environment variables, mmseg's registries) are not a test's doing.
try:
    import torch  # noqa: F401
    import torchvision  # noqa: F401
    import timm  # noqa: F401

    from trainers.mmseg import compat as _compat

    _compat.apply()
    import trainers.frozen_backbone  # noqa: F401
    import trainers.mmseg.data  # noqa: F401
    import trainers.mmseg.model  # noqa: F401
    import trainers.sleep  # noqa: F401
    import trainers.synthetic  # noqa: F401
    import trainers.vit  # noqa: F401

    TRAINING = True
except ImportError:  # campaign without its train extra: the launch-side tests still run
    TRAINING = False
needs_training = pytest.mark.skipif(not TRAINING, reason="needs campaign[train] (torch, torchvision, timm, mmseg)")

REPO = Path(__file__).resolve().parents[1]
TRAINERS = ("synthetic", "frozen_backbone", "vit", "swinv2_upernet", "sleep")

# Each trainer's walk starts from a tiny point whose own settings are honoured.
BASE = {
    "synthetic": ["trainer=synthetic", "trainer.params.width=4", "trainer.params.depth=2", "dataset.image_size=8"],
    "frozen_backbone": ["trainer=frozen_backbone", "trainer.params.backbone=squeezenet1_0",
                        "trainer.params.image_size=32", "dataset.length=32"],  # the study's head: linear
    "vit": ["trainer=vit", "trainer.params.model=vit_tiny", "dataset.length=32"],
    "swinv2_upernet": ["trainer=swinv2_upernet", "trainer.params.variant=micro", "dataset.image_size=64"],
    "sleep": ["trainer=sleep", "gpus=2"],  # two ranks: the law's communication terms are not 0
}
WEIGHTS = "@weights@"  # replaced by a state-dict file of the trainer's own network

# (trainer, key, value, context overrides, expected): the key set to value on BASE + context,
# compared with BASE + context. Every (trainer, key) appears at least once; a rule's
# condition is walked both ways where the trainer has another way.
COMMON = {"trainer.lr": "0.5", "trainer.momentum": "0.5", "trainer.weight_decay": "0.125",
          "trainer.precision": "bf16", "experiment.grad_accum": "2", "dataset.num_workers": "1"}
REFUSED = {  # (trainer, key): what the launch refuses with the trainer's default settings
    ("synthetic", "trainer.precision"), ("synthetic", "experiment.grad_accum"), ("synthetic", "dataset.num_workers"),
    ("frozen_backbone", "trainer.precision"), ("frozen_backbone", "trainer.params.hidden"),
    ("frozen_backbone", "trainer.params.dropout"), ("frozen_backbone", "trainer.params.procs_per_node"),
    ("frozen_backbone", "trainer.params.procs_split"),
    ("vit", "trainer.momentum"), ("vit", "trainer.params.zero_stage"),
    ("swinv2_upernet", "trainer.momentum"), ("swinv2_upernet", "dataset.num_workers"),
    ("sleep", "trainer.params.fail_at_iteration"), ("sleep", "trainer.params.stall_s"),
    ("sleep", "trainer.params.noise_seed"),
} | {("sleep", key) for key in COMMON_KEYS}
PARAMS = {
    "synthetic": {"width": "6", "depth": "3", "inject_data_delay_s": "0.001", "inject_comm_delay_s": "0.001"},
    "frozen_backbone": {"backbone": "resnet18", "classifier": "mlp", "hidden": "8", "dropout": "0.25",
                        "weights": WEIGHTS, "image_size": "40", "engine": "vanilla", "mode": "inference",
                        "loss_threshold": "1.5", "study_timing": "true", "stop_at_threshold": "true",
                        "procs_per_node": "2", "procs_split": "split"},
    "vit": {"model": "vit_base_patch16_224", "image_size": "64", "weights": WEIGHTS, "engine": "deepspeed",
            "zero_stage": "2"},
    "swinv2_upernet": {"variant": "tiny", "window_size": "4", "pretrained": "/nowhere/swin.pth", "aux_head": "false",
                       "drop_path_rate": "0.1", "head_channels": "32", "betas": "[0.8,0.99]",
                       "warmup_iters": "3", "warmup_ratio": "0.5", "poly_power": "2.0", "min_lr": "1e-6",
                       "log_interval": "7", "loop": "stock"},
    "sleep": {"a_s": "0.02", "b_s": "0.002", "c_s": "0.003", "d_s": "0.001", "noise": "0.1", "noise_seed": "3",
              "fail_rank": "1", "fail_at_iteration": "2", "stall_rank": "1", "stall_s": "0.5"},
}
# trainer.params fields the launch fills from another (a user's value is replaced): weights_file
# is the file trainer.params.weights names, weights_sha256 its digest at launch (campaign/launch/weights.py;
# tests/test_weights.py, tests/test_trust_door.py)
DERIVED = {"frozen_backbone": ("weights_file", "weights_sha256"), "vit": ("weights_sha256",),  # + the file's digest
           "swinv2_upernet": ("weights_file", "weights_sha256")}  # what trainer.params.pretrained resolved to
CONTEXT = {  # (trainer, key): what the walk sets first for the key to mean something
    ("frozen_backbone", "trainer.params.mode"): ["trainer.params.engine=vanilla"],  # inference: single-process only
    ("frozen_backbone", "trainer.params.stop_at_threshold"): ["trainer.params.loss_threshold=1.5"],  # it needs one
    # the poly decay starts after the warm-up (1,500 iterations by default): a run shorter decays nothing
    ("swinv2_upernet", "trainer.params.poly_power"): ["trainer.params.warmup_iters=3"],
    ("swinv2_upernet", "trainer.params.min_lr"): ["trainer.params.warmup_iters=3"],
}
# Each conditional rule's key where the condition does not hold: honoured.
CONDITIONS = [
    ("vit", "trainer.momentum", "0.5", ["trainer.optimizer=sgd"]),
    ("swinv2_upernet", "trainer.momentum", "0.5", ["trainer.optimizer=sgd"]),
    ("vit", "trainer.params.zero_stage", "2", ["trainer.params.engine=deepspeed"]),
    ("frozen_backbone", "trainer.params.hidden", "8", ["trainer.params.classifier=mlp"]),
    ("frozen_backbone", "trainer.params.dropout", "0.25", ["trainer.params.classifier=mlp"]),
    ("frozen_backbone", "trainer.params.procs_per_node", "2", ["trainer.params.engine=vanilla"]),
    ("frozen_backbone", "trainer.params.procs_split", "split",
     ["trainer.params.engine=vanilla", "trainer.params.procs_per_node=2"]),
    ("swinv2_upernet", "dataset.num_workers", "1", ["trainer.params.loop=stock"]),
    ("sleep", "trainer.params.fail_at_iteration", "2", ["trainer.params.fail_rank=1"]),
    ("sleep", "trainer.params.stall_s", "0.5", ["trainer.params.stall_rank=1"]),
    ("sleep", "trainer.params.noise_seed", "3", ["trainer.params.noise=0.1"]),
]
# ... and where it holds: refused (the walk above holds the unconditional ones and the defaults')
CONDITIONS_REFUSED = [
    ("swinv2_upernet", "trainer.params.betas", "[0.8,0.99]", ["trainer.optimizer=sgd"]),
    ("swinv2_upernet", "trainer.params.warmup_ratio", "0.5", ["trainer.params.warmup_iters=0"]),
    ("frozen_backbone", "trainer.params.hidden", "8", ["trainer.params.classifier=linear"]),
] + [("frozen_backbone", key, value, ["trainer.params.engine=vanilla", "trainer.params.mode=inference"])
     for key, value in (("trainer.optimizer", "adamw"), ("trainer.lr", "0.5"), ("trainer.momentum", "0.5"),
                        ("trainer.weight_decay", "0.125"), ("experiment.grad_accum", "2"),
                        ("trainer.params.loss_threshold", "1.5"))]
# Keys whose effect is proven at the plan level only (the job's config differs; the trainer's
# code that reads it is not run here), and why.
PLAN_ONLY = {
    ("vit", "trainer.params.engine"): "engine=deepspeed: DeepSpeed's initialize is seconds (tests/test_vit.py runs it)",
    ("vit", "trainer.params.zero_stage"): "read by DeepSpeed's config (engine=deepspeed): as above",
    ("frozen_backbone", "trainer.params.procs_per_node"): "the processes a job starts (resources.tasks_per_node): "
                                                          "tests/test_procs_per_node.py runs two",
    ("frozen_backbone", "trainer.params.procs_split"): "with procs_per_node=2 (two ranks): tests/test_procs_split.py "
                                                       "and tests/test_procs_per_node.py build both readings",
}


def _default_optimizer(trainer: str) -> str:
    return "adamw" if trainer in ("vit", "swinv2_upernet") else "sgd"


def cases() -> list[tuple[str, str, str, list[str], str]]:
    out = []
    for trainer in TRAINERS:
        values = dict(COMMON, **{"trainer.optimizer": "sgd" if _default_optimizer(trainer) == "adamw" else "adamw"})
        values.update({f"trainer.params.{k}": v for k, v in PARAMS[trainer].items()})
        for key, value in values.items():
            expect = "refused" if (trainer, key) in REFUSED else "honoured"
            out.append((trainer, key, value, CONTEXT.get((trainer, key), []), expect))
    out += [(t, k, v, c, "honoured") for t, k, v, c in CONDITIONS]
    out += [(t, k, v, c, "refused") for t, k, v, c in CONDITIONS_REFUSED]
    return out


CASES = cases()


def test_the_walk_covers_every_key_of_every_trainer():
    for trainer in TRAINERS:
        spec = registry.spec_of(trainer)
        derived = set(DERIVED.get(trainer, ()))  # the launch's own, from another key (never the user's)
        assert set(PARAMS[trainer]) == set(spec.defaults()) - derived, f"{trainer}: walk every trainer.params field"
        walked = {k for t, k, *_ in CASES if t == trainer}
        assert walked == set(COMMON_KEYS) | {f"trainer.params.{p}" for p in set(spec.defaults()) - derived}
        check_declared(spec)  # its rules name keys that exist
        for rule in spec.unused:  # a conditional rule's key is walked where it holds and where it does not
            if rule.when:
                assert {(trainer, rule.key, e) for e in ("refused", "honoured")} <= {(t, k, e) for t, k, _, _, e in CASES}


# ---------------------------------------------------------------------------- composing and planning


@pytest.fixture(scope="module")
def compose():
    from hydra import compose as hydra_compose, initialize_config_module

    from campaign.catalogue.config import register

    register()
    with hydra_version_base_kept(), initialize_config_module("campaign_conf", version_base="1.3"):
        yield lambda overrides: hydra_compose("config", overrides=list(overrides))


@pytest.fixture(scope="module")
def weights(tmp_path_factory):
    """A state-dict file per trainer with ``weights``: its network's, from another seed."""
    import torch

    from trainers.models.classifier import _builder
    from trainers.vit import build_vit

    folder = tmp_path_factory.mktemp("weights")
    torch.manual_seed(123)
    torch.save(_builder("squeezenet1_0")().state_dict(), folder / "squeezenet.pth")
    torch.save(build_vit("vit_tiny", num_classes=10).state_dict(), folder / "vit_tiny.pth")
    return {"frozen_backbone": str(folder / "squeezenet.pth"), "vit": str(folder / "vit_tiny.pth")}


def plan(compose, trainer: str, overrides: list[str]):
    overrides = [f"++{o}" if o.startswith("trainer.params.") else o for o in overrides]  # the yaml may not list it
    line = ["platform=local", "experiment=smoke", *BASE[trainer], *overrides]
    return plan_point(compose(line), 0, line)


# ---------------------------------------------------------------------------- what each trainer built


def _optimizer_facts(opt) -> dict:
    d = opt.defaults
    return {"trainer.optimizer": type(opt).__name__, "trainer.lr": d["lr"], "trainer.momentum": d.get("momentum"),
            "trainer.weight_decay": d["weight_decay"]}


def _ctx(world_size: int = 1):
    import torch

    from trainers.dist import DistContext

    return DistContext(rank=0, world_size=world_size, local_rank=0, local_world_size=world_size, num_nodes=1,
                       device=torch.device("cpu"), backend="none", emulated=False, host="test")


def probe_synthetic(cfg: dict, jp: dict) -> dict:
    from torch import nn

    from trainers.synthetic import SyntheticTrainer

    t = SyntheticTrainer(_ctx(), cfg, jp)
    convs = [m for m in t.model.modules() if isinstance(m, nn.Conv2d)]
    return {**_optimizer_facts(t.optimizer), "trainer.params.width": convs[0].out_channels,
            "trainer.params.depth": len(convs), "trainer.params.inject_data_delay_s": t.inject_data_delay_s,
            "trainer.params.inject_comm_delay_s": t.inject_comm_delay_s}  # the job's comm timer reads it (job.py)


def probe_frozen_backbone(cfg: dict, jp: dict) -> dict:
    from torch import nn

    from trainers.frozen_backbone import FrozenBackboneTrainer

    t = FrozenBackboneTrainer(_ctx(), cfg, jp)
    try:
        module = getattr(t.model, "module", t.model)
        head = [m for m in module.head.modules() if isinstance(m, (nn.Linear, nn.Dropout))]
        facts = _optimizer_facts(t.optimizer) if t.optimizer is not None else {"trainer.optimizer": None}
        return {**facts, "experiment.grad_accum": t.images_per_step, "dataset.num_workers": t.loader.num_workers,
                "trainer.params.backbone": sum(p.numel() for p in module.parameters()),
                "trainer.params.classifier": [type(m).__name__ for m in head],
                "trainer.params.hidden": [getattr(m, "out_features", None) for m in head],
                "trainer.params.dropout": [getattr(m, "p", None) for m in head],
                "trainer.params.weights": float(next(module.parameters()).detach().sum()),
                "trainer.params.image_size": tuple(t.loader.dataset[0][0].shape),
                "trainer.params.engine": type(t.model).__name__, "trainer.params.mode": t.optimizer is None,
                "trainer.params.loss_threshold": t.summary_extra().get("loss_threshold"),
                "trainer.params.study_timing": t.study is not None,
                "trainer.params.stop_at_threshold": t.stop_rule is not None}
    finally:
        t.close()


def probe_vit(cfg: dict, jp: dict) -> dict:
    from trainers.vit import ViTTrainer

    t = ViTTrainer(_ctx(), cfg, jp)
    return {**_optimizer_facts(t.optimizer), "trainer.precision": str(t.autocast_dtype),
            "experiment.grad_accum": (t.accum, t.images_per_step), "dataset.num_workers": t.loader.num_workers,
            "trainer.params.model": sum(p.numel() for p in t.model.parameters()),
            "trainer.params.image_size": tuple(t.model.patch_embed.img_size),
            "trainer.params.weights": float(t.model.pos_embed.detach().sum())}


def probe_swinv2_upernet(cfg: dict, jp: dict) -> dict:
    """What the trainer hands MMEngine's Runner (trainers/mmseg/trainer.py), from the same builders."""
    import torch

    from trainers.mmseg import compat
    from trainers.mmseg.data import dataloader_config
    from trainers.mmseg.model import model_config, optim_wrapper_config, param_scheduler_config, params_of

    compat.apply()  # what the trainer does first: mmseg importable without mmcv's compiled ops
    tcfg, p = cfg["trainer"], params_of(cfg["trainer"])
    cuda = torch.device("cuda")  # the wrapper a GPU rank gets (a CPU rank stays fp32): a pure function of it
    model = model_config(cfg, torch.device("cpu"), 1)
    optim = optim_wrapper_config(tcfg, cuda, int(jp["grad_accum"]))
    opt = optim["optimizer"]
    loader = dataloader_config(cfg["dataset"], batch_size=jp["batch_per_gpu"], seed=0, rank=0,
                               premade=p["loop"] != "stock")
    schedule = param_scheduler_config(tcfg, jp["warmup"] + jp["iterations"])  # the trainer's max_iters
    facts = {"trainer.optimizer": opt["type"], "trainer.lr": opt["lr"], "trainer.momentum": opt.get("momentum"),
             "trainer.weight_decay": opt["weight_decay"], "trainer.params.betas": opt.get("betas"),
             "trainer.precision": optim["type"], "experiment.grad_accum": optim["accumulative_counts"],
             "dataset.num_workers": loader["num_workers"], "trainer.params.loop": (loader["num_workers"], p["loop"]),
             "trainer.params.log_interval": p["log_interval"]}  # the LoggerHook's and the lean loop's interval
    for key in ("variant", "window_size", "pretrained", "aux_head", "drop_path_rate", "head_channels"):
        facts[f"trainer.params.{key}"] = repr(model)
    for key in ("warmup_iters", "warmup_ratio", "poly_power", "min_lr"):
        facts[f"trainer.params.{key}"] = repr(schedule)
    return facts


def probe_sleep(cfg: dict, jp: dict) -> dict:
    from trainers.sleep import SleepTrainer

    t = SleepTrainer(_ctx(int(cfg["gpus"])), cfg, jp)
    law = tuple(t.phases)
    return {**{f"trainer.params.{k}": law for k in ("a_s", "b_s", "c_s", "d_s", "noise", "noise_seed")},
            "trainer.params.fail_rank": t.fail_rank, "trainer.params.fail_at_iteration": t.fail_at_iteration,
            "trainer.params.stall_rank": t.stall_rank, "trainer.params.stall_s": t.stall_s}


PROBES = {"synthetic": probe_synthetic, "frozen_backbone": probe_frozen_backbone, "vit": probe_vit,
          "swinv2_upernet": probe_swinv2_upernet, "sleep": probe_sleep}


def probe(trainer: str, cfg: dict, jp: dict) -> dict:
    """The trainer's facts; its loader's workers (dataset.num_workers) shut down, and the
    SIGCHLD handler torch's DataLoader installs for them put back."""
    import gc
    import signal

    saved = signal.getsignal(signal.SIGCHLD)
    try:
        return PROBES[trainer](cfg, jp)
    finally:
        gc.collect()
        signal.signal(signal.SIGCHLD, saved)


@pytest.fixture(scope="module", autouse=True)
def _the_imports_out_of_the_collectors_sight():
    """The objects that were there before the walk (the trainers' imports: torch, mmseg, timm,
    Hydra; ~500K) frozen (``gc.freeze``) while it runs: probe()'s ``gc.collect()`` after each
    trainer then looks at what came after, not at them all again (~0.3 CPU-s a collection,
    a quarter of the walk's CPU); put back (``gc.unfreeze``) for the modules after."""
    import gc

    gc.collect()
    gc.freeze()
    yield
    gc.unfreeze()


_REFERENCES: dict = {}  # a context's reference point is probed once for all the keys walked on it
_REFERENCE_PLANS: dict = {}  # ... and composed and planned once (a copy handed to each case)


def _reference_plan(compose, trainer: str, context: list[str]):
    import copy

    key = (trainer, tuple(context))
    if key not in _REFERENCE_PLANS:
        _REFERENCE_PLANS[key] = plan(compose, trainer, context)
    return copy.deepcopy(_REFERENCE_PLANS[key])


def _reference_probe(trainer: str, ref) -> dict:
    import json

    key = (trainer, json.dumps(ref.config, sort_keys=True, default=str), json.dumps(job_plan(ref), sort_keys=True,
                                                                                    default=str))
    if key not in _REFERENCES:
        _REFERENCES[key] = probe(trainer, ref.config, job_plan(ref))
    return _REFERENCES[key]


def _ids(case) -> str:
    trainer, key, value, context, expect = case
    return f"{trainer}-{key}={value}" + ("-" + "-".join(context) if context else "")


@pytest.mark.slow
@needs_training
@pytest.mark.parametrize("case", CASES, ids=[_ids(c) for c in CASES])
def test_every_key_is_refused_or_changes_what_runs(case, compose, request):
    trainer, key, value, context, expect = case
    value = request.getfixturevalue("weights")[trainer] if value == WEIGHTS else value
    setting = f"{key}={value}"
    if expect == "refused":
        with pytest.raises(ConfigError) as err:
            plan(compose, trainer, [*context, setting])
        message = str(err.value)
        assert "\n" not in message and message.startswith(f"{key}=") and " does nothing with " in message, message
        assert message.split("); ")[-1].startswith(("drop it", "set ")), message  # names the fix
        return
    ref = _reference_plan(compose, trainer, context)
    point = plan(compose, trainer, [*context, setting])
    # what the job receives differs at the key (its config or its schedule)
    assert lookup(point.config, key) != lookup(ref.config, key) or job_plan(point) != job_plan(ref)
    if (trainer, key) in PLAN_ONLY:
        return
    got, was = probe(trainer, point.config, job_plan(point)), _reference_probe(trainer, ref)
    assert key in got, f"{trainer}: no probe shows {key}"
    assert got[key] != was[key], f"{trainer}: {setting} changed nothing the job built ({got[key]!r})"


# ---------------------------------------------------------------------------- built-in conf files


EXPERIMENTS = sorted(p.stem for p in (REPO / "conf" / "experiment").glob("*.yaml"))
STUDIES = sorted(p.stem for p in (REPO / "conf" / "study").glob("*.yaml"))


@pytest.mark.slow
def test_no_built_in_preset_sets_what_its_trainer_ignores(compose):
    """Every built-in experiment x trainer, and every study preset, plans without a refusal
    of an ignored setting (other refusals, e.g. a global batch over 3 ranks, are the point's own)."""
    planned = 0
    points = [["platform=a100", f"experiment={e}", f"trainer={t}", "gpus=4"] for e in EXPERIMENTS for t in TRAINERS]
    points += [["platform=a100", f"study={s}", "gpus=4"] for s in STUDIES]
    for overrides in points:
        try:
            plan_point(compose(overrides), 0, overrides)
            planned += 1
        except CampaignError as exc:
            assert " does nothing with " not in str(exc), f"{' '.join(overrides)}: {exc}"
    assert planned >= len(EXPERIMENTS) * len(TRAINERS) - 3, planned


def test_a_refusal_on_the_command_line_is_one_line_and_stores_nothing(tmp_path):
    res = Workspace(tmp_path).launch("platform=local", f"results_dir={tmp_path / 'res'}", "trainer=vit",
                                     "trainer.momentum=0.5")  # forked from the preloaded server: tests/forkserver.py
    assert res.returncode == 2, res.stdout + res.stderr
    assert res.stderr.strip().splitlines() == [
        "error: trainer.momentum=0.5 does nothing with trainer.optimizer=adamw (AdamW has no momentum; its betas "
        "are trainer.params.betas where the trainer has them); drop it or use trainer.optimizer=sgd"]
    assert not (tmp_path / "res" / "campaign.db").exists()


def test_a_key_at_its_default_is_not_set():
    """momentum's default 0.9 under AdamW, fp32 for a fp32 trainer, ZeRO 0 under DDP: what an
    ignoring trainer does anyway; passed, from the command line too."""
    from campaign.launch.honoured import check_honoured

    spec = registry.spec_of("vit")
    config = {"trainer": {"name": "vit", "optimizer": "adamw", "momentum": 0.9, "precision": "fp32",
                          "params": dict(spec.defaults())}, "experiment": {"grad_accum": 1},
              "dataset": {"name": "synthetic", "num_workers": 0}}
    check_honoured(config, spec)
    sleep = registry.spec_of("sleep")
    check_honoured(dict(config, trainer={"name": "sleep", "optimizer": "sgd", "lr": 0.01, "momentum": 0.9,
                                         "weight_decay": 0.0, "precision": "fp32",
                                         "params": sleep.defaults()}), sleep)
    assert dataclasses.is_dataclass(spec.params)


# ---------------------------------------------------------------------------- grad_accum in frozen_backbone


def _frozen(accum: int, batch: int, engine: str = "ddp", distributed: bool = False):
    from trainers.dist import DistContext
    from trainers.frozen_backbone import FrozenBackboneTrainer

    cfg = {"gpus": 1, "experiment": {}, "dataset": {"name": "synthetic", "num_classes": 10, "length": 64},
           "trainer": {"name": "frozen_backbone", "optimizer": "sgd", "lr": 0.1, "momentum": 0.9,
                       "params": {"backbone": "squeezenet1_0", "classifier": "linear", "image_size": 32,
                                  "engine": engine, "mode": "train"}}}
    ctx = DistContext(rank=0, world_size=1, local_rank=0, local_world_size=1, num_nodes=1,
                      device=torch.device("cpu"), backend="gloo" if distributed else "none", emulated=False, host="t")
    return FrozenBackboneTrainer(ctx, cfg, {"batch_per_gpu": batch, "iterations": 4, "warmup": 0, "seed": 0,
                                            "grad_accum": accum})


def _counted(trainer) -> list[int]:
    """Images the trainer's loader hands it, counted as it takes them."""
    seen: list[int] = []
    take = trainer.batches.next

    def counting():
        x, y = take()
        seen.append(len(y))
        return x, y

    trainer.batches.next = counting
    return seen


@pytest.fixture
def one_rank_group():
    """A real 1-rank gloo process group, so the trainer wraps its model in DDP (no_sync and all)."""
    import socket

    import torch.distributed as dist

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


@needs_training
def test_grad_accum_trains_the_same_images_as_one_micro_batch(compose):
    """experiment.epochs=2 of 16 images at 4 a batch: grad_accum=2 plans half the iterations,
    each of two micro-batches, and the run takes every image grad_accum=1 takes."""
    from trainers import loop
    from trainers.instrument import Recorder

    taken = {}
    for accum in (1, 2):
        point = plan(compose, "frozen_backbone", ["dataset.length=16", "experiment.epochs=2",
                                                  "experiment.warmup_iterations=1", f"experiment.grad_accum={accum}"])
        jp = job_plan(point)
        trainer = trainers.frozen_backbone.build(_ctx(), point.config, jp)
        seen = _counted(trainer)
        loop.train(trainer, Recorder(torch.device("cpu"), warmup=jp["warmup"]), jp["warmup"] + jp["iterations"])
        taken[accum] = (jp["warmup"] + jp["iterations"], sum(seen), trainer.images_per_step)
        trainer.close()
    assert taken[1] == (8, 32, 4) and taken[2] == (4, 32, 8)  # 2 epochs of 16 images either way


@needs_training
@pytest.mark.parametrize("engine,distributed", [("ddp", True), ("vanilla", False), ("dataparallel", False)])
def test_grad_accum_updates_as_the_whole_batch_does(engine, distributed, request):
    """Two micro-batches of 4 make the step one batch of 8 makes (mean loss / 2 each): the same
    weights after 3 steps; DDP skips the all-reduce (no_sync) on all but the last micro-batch."""
    if distributed:
        request.getfixturevalue("one_rank_group")
    accumulated, whole = _frozen(2, 4, engine, distributed), _frozen(1, 8, engine, distributed)
    syncs = []
    if distributed:
        assert isinstance(accumulated.model, torch.nn.parallel.DistributedDataParallel)
        no_sync = accumulated.model.no_sync
        accumulated.model.no_sync = lambda: syncs.append(1) or no_sync()
    from trainers.instrument import Recorder

    for t in (accumulated, whole):
        rec = Recorder(torch.device("cpu"), warmup=0)
        for _ in range(3):
            rec.begin()
            rec.end(t.step(rec), t.images_per_step)
        rec.finish()
    a = [p.detach() for p in accumulated.model.parameters() if p.requires_grad]
    b = [p.detach() for p in whole.model.parameters() if p.requires_grad]
    assert all(torch.allclose(x, y, rtol=1e-4, atol=1e-6) for x, y in zip(a, b))
    assert not all(torch.equal(x, y) for x, y in zip(a, [p.detach() for p in _frozen(1, 8, engine).model.parameters()
                                                         if p.requires_grad]))  # it trained
    assert len(syncs) == (3 if distributed else 0)  # one no_sync micro-batch per step
    for t in (accumulated, whole):
        t.close()
