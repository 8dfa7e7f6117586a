"""trainer=frozen_backbone: a frozen torchvision backbone under a trained classifier
(MNIST), run by DDP, nn.DataParallel or the hand-built single-process engine."""

import enum
from dataclasses import dataclass
from typing import Optional

from trainers.spec import TrainerDef, Unused
from trainers.specs import _backbone_costs as costs
from trainers.specs._torchvision_weights import NamedWeights, resolve


class Backbone(str, enum.Enum):
    alexnet = "alexnet"
    densenet121 = "densenet121"
    resnet18 = "resnet18"
    squeezenet1_0 = "squeezenet1_0"
    vgg16 = "vgg16"


class Classifier(str, enum.Enum):
    study = "study"  # the DataParallel study's head for the backbone (STUDY_HEADS)
    mlp = "mlp"  # Linear(features,H)+ReLU+Dropout, Linear(H,H)+ReLU+Dropout, Linear(H,classes)
    linear = "linear"  # Linear(features,classes)


class Engine(str, enum.Enum):
    ddp = "ddp"  # one rank per GPU
    dataparallel = "dataparallel"  # nn.DataParallel: one process drives all the job's GPUs
    vanilla = "vanilla"  # trainers.parallel's hand-built module: one process, all GPUs


class ProcsSplit(str, enum.Enum):
    # the DataParallel study's procs_per_node processes (docs/studies/dataparallel.md weighs them)
    literal = "literal"  # every process drives all the node's GPUs on the whole split: each GPU does every process's work
    split = "split"  # each its own share of the GPUs (GPU rank % gpus where fewer) and of the split and batch


class Mode(str, enum.Enum):
    train = "train"
    inference = "inference"  # forward only: dataparallel vs vanilla


# The DataParallel study's heads (dataparallel-frozen-backbones-a6000.txt, "Experiment
# design"): ResNet18 and SqueezeNet a linear layer (5,130 trainable parameters), AlexNet,
# DenseNet121 and VGG16 the 3-layer head of 4,096 hidden units (54,575,114, 21,020,682 and
# 119,586,826). classifier=study picks this; mlp or linear force one head on every backbone.
STUDY_HEADS = {"alexnet": "mlp", "densenet121": "mlp", "resnet18": "linear", "squeezenet1_0": "linear",
               "vgg16": "mlp"}


# Features each backbone hands its head (torchvision's ImageNet head's input: VGG16's
# 512 x 7 x 7, AlexNet's 256 x 6 x 6, DenseNet121's 1,024, ResNet18's and SqueezeNet's
# 512 pooled channels); trainers/models/classifier.py reads them from the built model, and
# tests/test_study_preset.py checks these against it.
FEATURES = {"alexnet": 9216, "densenet121": 1024, "resnet18": 512, "squeezenet1_0": 512, "vgg16": 25088}


def trainable_parameters(config) -> Optional[int]:
    """The head's weights and biases (the backbone is frozen): the DataParallel study's
    "trainable parameters" (5,130 for ResNet18 and SqueezeNet's linear head, 119,586,826 for
    VGG16's 3-layer head of 4,096)."""
    params = (config.get("trainer") or {}).get("params") or {}
    backbone = str(getattr(params.get("backbone"), "value", params.get("backbone")) or Backbone.vgg16.value)
    features = FEATURES.get(backbone)
    classes = int((config.get("dataset") or {}).get("num_classes") or 10)
    if features is None:
        return None
    if head_of({k: getattr(v, "value", v) for k, v in params.items()}) == "linear":
        return features * classes + classes
    hidden = int(params.get("hidden") or 4096)
    return (features * hidden + hidden) + (hidden * hidden + hidden) + (hidden * classes + classes)


def head_of(params: dict) -> str:
    """The head ``params`` ask for: ``mlp`` or ``linear`` (``study``: the backbone's own, STUDY_HEADS)."""
    head = str(params.get("classifier") or Classifier.study.value)
    return STUDY_HEADS.get(str(params.get("backbone") or Backbone.vgg16.value), "mlp") if head == "study" else head


SINGLE_PROCESS = (Engine.dataparallel.value, Engine.vanilla.value)


def processes_per_node(params) -> int:
    """Processes a node of a single-process engine starts (``procs_per_node``), each driving
    all the node's GPUs or its share of them (``procs_split``): the DataParallel study's
    ``torch.distributed.run`` at 2."""
    return int(params.get("procs_per_node") or 1)


def _plain(value):
    return getattr(value, "value", value)


def _processes(params) -> tuple[int, str]:
    """(processes a node, the reading): one process a GPU and one reading for ddp."""
    if str(_plain(params.get("engine")) or Engine.ddp.value) not in SINGLE_PROCESS:
        return 1, ProcsSplit.literal.value
    return processes_per_node(params), str(_plain(params.get("procs_split")) or ProcsSplit.literal.value)


def gpu_memory(config) -> Optional[costs.GpuMemory]:
    """The point's memory on its fullest GPU (trainers/specs/_backbone_costs.py: gpu_memory):
    ddp's rank holds its own batch share; each process of a single-process engine its batch
    scattered over its GPUs, times the processes sharing one."""
    params = (config.get("trainer") or {}).get("params") or {}
    backbone = str(_plain(params.get("backbone")) or Backbone.vgg16.value)
    if backbone not in costs.COSTS:
        return None
    gpus = max(1, int(config.get("gpus") or 1) // max(1, int(config.get("nodes") or 1)))
    procs, reading = _processes(params)
    whole = costs.whole_batch(config)
    if str(_plain(params.get("engine")) or Engine.ddp.value) not in SINGLE_PROCESS:  # ddp: one GPU's share
        gpus, whole = 1, -(-whole // max(1, int(config.get("gpus") or 1)))
    return costs.gpu_memory(backbone, image_side=int(params.get("image_size") or 224), gpus=gpus, procs=procs,
                            reading=reading, whole=whole, head_params=trainable_parameters(config) or 0,
                            train=str(_plain(params.get("mode")) or Mode.train.value) == Mode.train.value)


def flops_per_image(config) -> Optional[float]:
    """One image's FLOPs: the frozen backbone's forward (no backward: nothing below the head is
    differentiated) and the head's, 2 x its parameters, x 3 training (its backward: 4 x)."""
    params = (config.get("trainer") or {}).get("params") or {}
    backbone = str(_plain(params.get("backbone")) or Backbone.vgg16.value)
    if backbone not in costs.COSTS:
        return None
    head = 2.0 * (trainable_parameters(config) or 0)
    train = str(_plain(params.get("mode")) or Mode.train.value) == Mode.train.value
    return costs.forward_flops(backbone, int(params.get("image_size") or 224)) + head * (3 if train else 1)


def named_weights(params) -> Optional[NamedWeights]:
    """The torchvision weights ``params.weights`` names (None: null or a PATH); ValueError
    naming the valid names for a name that is not one of the backbone's."""
    return resolve(str(params.get("backbone") or Backbone.vgg16.value), params.get("weights"))


def _check(config) -> None:
    p = config["trainer"]["params"]
    if p.get("stop_at_threshold"):
        if p.get("loss_threshold") is None:
            raise ValueError("trainer.params.stop_at_threshold=true needs trainer.params.loss_threshold "
                             "(e.g. trainer.params.loss_threshold=0.1)")
        if p["mode"] != Mode.train.value:
            raise ValueError(f"trainer.params.stop_at_threshold=true stops training; mode={p['mode']} trains nothing")
    named_weights(p)
    if int(p.get("procs_per_node", 1)) < 1:
        raise ValueError(f"trainer.params.procs_per_node must be >= 1 (processes a node starts), "
                         f"got {p.get('procs_per_node')}")
    procs, reading = _processes(p)
    whole = costs.whole_batch(config)
    if reading == ProcsSplit.split.value and procs > 1 and whole % procs:
        raise ValueError(f"trainer.params.procs_split=split gives each of the {procs} processes an equal share of "
                         f"the point's {whole:,} images an iteration, which do not divide by {procs}; use a batch "
                         f"that does, or trainer.params.procs_split=literal")
    if p["mode"] == Mode.inference.value and p["engine"] not in SINGLE_PROCESS:
        raise ValueError(f"mode=inference compares {' and '.join(SINGLE_PROCESS)}; "
                         f"engine={p['engine']} runs mode=train only")


def _unused() -> tuple[Unused, ...]:
    """What it does not read where (trainers/spec.py: Unused; momentum under AdamW: COMMON_UNUSED)."""
    fp32 = Unused("trainer.precision", {}, why="it computes in fp32, no autocast",
                  fix="drop it, or use trainer=vit or trainer=swinv2_upernet for mixed precision")
    linear_study = tuple(b for b, head in STUDY_HEADS.items() if head == "linear")
    heads = []
    for key, what in (("hidden", "no hidden layer"), ("dropout", "no dropout")):
        heads += [Unused(f"trainer.params.{key}", {"trainer.params.classifier": (Classifier.linear.value,)},
                         why=f"the linear head has {what}", fix="drop it or use trainer.params.classifier=mlp"),
                  Unused(f"trainer.params.{key}", {"trainer.params.classifier": (Classifier.study.value,),
                                                   "trainer.params.backbone": linear_study},
                         why=f"the study's head of this backbone is linear: {what}",
                         fix="drop it or use trainer.params.classifier=mlp")]
    # mode=inference runs forward only, in eval mode: no loss, no optimizer, no dropout
    inference = [Unused(key, {"trainer.params.mode": (Mode.inference.value,)},
                        why="inference runs the forward pass only: no loss, no gradient, no optimizer step",
                        fix="drop it or use trainer.params.mode=train")
                 for key in ("trainer.optimizer", "trainer.lr", "trainer.momentum", "trainer.weight_decay",
                             "experiment.grad_accum", "trainer.params.loss_threshold")]
    inference.append(Unused("trainer.params.dropout", {"trainer.params.mode": (Mode.inference.value,)},
                            why="inference runs in eval mode, where dropout is off",
                            fix="drop it or use trainer.params.mode=train"))
    # DDP starts one process a GPU already: a second process a node would be another rank of it
    procs = Unused("trainer.params.procs_per_node", {"trainer.params.engine": (Engine.ddp.value,)},
                   why="ddp runs one process a GPU already",
                   fix="drop it or use trainer.params.engine=dataparallel or vanilla")
    split = Unused("trainer.params.procs_split", {"trainer.params.engine": (Engine.ddp.value,)},
                   why="ddp runs one process a GPU: no processes share a node's GPUs",
                   fix="drop it or use trainer.params.engine=dataparallel or vanilla with trainer.params.procs_per_node=2")
    return (fp32, *heads, *inference, procs, split)


@dataclass
class FrozenBackboneParams:
    backbone: Backbone = Backbone.vgg16  # the frozen torchvision ImageNet backbone
    classifier: Classifier = Classifier.study  # the trained head (study: the DataParallel study's per backbone)
    hidden: int = 4096  # H of the mlp classifier
    dropout: float = 0.5  # of the mlp classifier
    # the backbone's weights: null (random init), a torchvision weights name (ResNet18_Weights.IMAGENET1K_V1,
    # DEFAULT: the backbone's default), which the launch fetches once into <results_dir>/weights/, or
    # a PATH to a state-dict file
    weights: Optional[str] = None
    weights_file: Optional[str] = None  # set by the launch: the file the job loads (weights resolved), null for none
    # set by the launch: that file's sha256, which the job checks on the bytes it loads (docs/security.md)
    weights_sha256: Optional[str] = None
    image_size: int = 224  # the backbone's input side: images are resized to it
    engine: Engine = Engine.ddp  # who runs the replicas
    mode: Mode = Mode.train  # train, or inference (forward only; sweep experiment.images_per_gpu)
    loss_threshold: Optional[float] = None  # report the first iteration whose loss falls below this
    # the DataParallel study's own timings beside campaign's (trainers/dp_study.py): study.compute and
    # study.comm_barrier (train) or study.comm_sync (inference) breakdown rows; a host sync every iteration
    study_timing: bool = False
    # end the run at the end of the first epoch whose mean training loss (all ranks) is below
    # loss_threshold; else it runs its planned iterations (experiment.epochs: the cap)
    stop_at_threshold: bool = False
    # processes each node starts for dataparallel/vanilla, each driving the point's GPUs with
    # the engine (procs_split says which and on what data), meeting in the study's barrier
    # (the DataParallel study's torch.distributed.run: 2); ddp: refused (one a GPU)
    procs_per_node: int = 1
    # how procs_per_node > 1 processes share the node: literal (each all its GPUs, over the same
    # device IDs, on the whole split at the whole batch) or split (each its own share of the
    # GPUs, of the split and of the batch); one process: the same
    procs_split: ProcsSplit = ProcsSplit.literal


TRAINER = TrainerDef(
    name="frozen_backbone",
    study="DataParallel vs DDP vs a hand-built engine on a frozen backbone (MNIST)",
    params=FrozenBackboneParams,
    build="trainers.frozen_backbone:build",
    trainable_parameters=trainable_parameters,
    gpu_memory=gpu_memory,
    flops_per_image=flops_per_image,
    single_process_engines=SINGLE_PROCESS,
    processes_per_node=processes_per_node,
    check=_check,
    unused=_unused(),
    evaluates=True,
    named_weights=named_weights,
    dataset="mnist",  # the study's: grey 28x28, 10 classes (synthetic batches of them without dataset.root)
)
