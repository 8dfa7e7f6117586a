"""trainer=frozen_backbone: a frozen torchvision backbone under a trained classifier
(MNIST), run by DDP, nn.DataParallel or the hand-built single-process engine."""

import enum
from dataclasses import dataclass
from typing import Optional

from trainers.spec import TrainerDef


class Backbone(str, enum.Enum):
    alexnet = "alexnet"
    densenet121 = "densenet121"
    resnet18 = "resnet18"
    squeezenet1_0 = "squeezenet1_0"
    vgg16 = "vgg16"


class Classifier(str, enum.Enum):
    mlp = "mlp"  # Linear(features,H)+ReLU+Dropout, Linear(H,H)+ReLU+Dropout, Linear(H,classes)
    linear = "linear"  # Linear(features,classes)


class Engine(str, enum.Enum):
    ddp = "ddp"  # one rank per GPU
    dataparallel = "dataparallel"  # nn.DataParallel: one process drives all the job's GPUs
    vanilla = "vanilla"  # trainers.parallel's hand-built module: one process, all GPUs


class Mode(str, enum.Enum):
    train = "train"
    inference = "inference"  # forward only: dataparallel vs vanilla


SINGLE_PROCESS = (Engine.dataparallel.value, Engine.vanilla.value)


def _check(config) -> None:
    p = config["trainer"]["params"]
    if p["mode"] == Mode.inference.value and p["engine"] not in SINGLE_PROCESS:
        raise ValueError(f"mode=inference compares {' and '.join(SINGLE_PROCESS)}; "
                         f"engine={p['engine']} runs mode=train only")


@dataclass
class FrozenBackboneParams:
    backbone: Backbone = Backbone.vgg16  # the frozen torchvision ImageNet backbone
    classifier: Classifier = Classifier.mlp  # the trained head
    hidden: int = 4096  # H of the mlp classifier
    dropout: float = 0.5  # of the mlp classifier
    weights: Optional[str] = None  # local torchvision state dict of the backbone (never downloaded)
    image_size: int = 224  # the backbone's input side: images are resized to it
    engine: Engine = Engine.ddp  # who runs the replicas
    mode: Mode = Mode.train  # train, or inference (forward only; sweep experiment.images_per_gpu)
    loss_threshold: Optional[float] = None  # report the first iteration whose loss falls below this


TRAINER = TrainerDef(
    name="frozen_backbone",
    study="DataParallel vs DDP vs a hand-built engine on a frozen backbone (MNIST)",
    params=FrozenBackboneParams,
    build="trainers.frozen_backbone:build",
    single_process_engines=SINGLE_PROCESS,
    check=_check,
    evaluates=True,
)
