"""trainer=synthetic: a real DDP loop over a small conv net and seeded random images."""

from dataclasses import dataclass

from trainers.spec import TrainerDef, Unused

# What it does not read (trainers/spec.py: Unused): refused at launch when set.
UNUSED = (
    Unused("trainer.precision", {}, why="it computes in fp32, no autocast",
           fix="drop it, or use trainer=vit or trainer=swinv2_upernet for mixed precision"),
    Unused("experiment.grad_accum", {}, why="an iteration is one batch and one optimizer step, nothing accumulates",
           fix="drop it, or use trainer=vit, frozen_backbone or swinv2_upernet, which accumulate"),
    Unused("dataset.num_workers", {}, why="it cycles a few batches made before timing: no loader, no workers",
           fix="drop it, or use trainer=vit or frozen_backbone, whose loaders start them"),
)


def flops_per_image(config) -> float:
    """Training FLOPs of one image through trainers.synthetic's net (2 per multiply-add,
    convolutions and the linear head, as torch's FlopCounterMode counts them): forward,
    then backward's weight gradients and input gradients (none for the first conv, whose
    input needs no gradient)."""
    data, p = config["dataset"], config["trainer"]["params"]
    c, side, width, depth = int(data["channels"]), int(data["image_size"]), int(p["width"]), int(p["depth"])
    total = 0.0
    for i in range(depth):
        out = width * 2**i
        conv = 2.0 * c * out * 9 * side * side
        total += conv * (2 if i == 0 else 3)
        c = out
        if i < depth - 1:
            side //= 2
    return total + 3 * 2.0 * c * int(data["num_classes"])


@dataclass
class SyntheticParams:
    width: int = 32  # channels of the first conv layer (doubling per block)
    depth: int = 3  # conv blocks
    inject_data_delay_s: float = 0.0  # test knob: every iteration waits this long for its batch
    inject_comm_delay_s: float = 0.0  # test knob: the last all-reduce of every iteration completes this much later


TRAINER = TrainerDef(
    name="synthetic",
    study="the whole job path (DDP, instrumentation, store) without a real workload",
    params=SyntheticParams,
    build="trainers.synthetic:build",
    checkpoint=True,
    flops_per_image=flops_per_image,
    unused=UNUSED,
)
