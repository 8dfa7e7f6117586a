"""What the frozen-backbone study's processes ask of a GPU, torch-free: which GPUs and images
each process takes under ``trainer.params.procs_split`` (the two readings of the DataParallel
study's two processes a node), each backbone's per-image costs, and from them the memory a
point needs on its fullest GPU and the FLOPs of one image.

Per-image costs at torchvision's 224 x 224 input (``COSTS``), counted by hooking every module
of the backbone campaign builds (trainers/models/classifier.py: torchvision's model, its
ImageNet head stripped) in a forward pass of one image on the meta device:

- ``peak``: the largest input + output elements of one module (a container's too: DenseNet's
  concatenations, ResNet's blocks), in-place ones left out. The backbone runs under
  ``torch.no_grad()`` (frozen: nothing below the head is differentiated), so autograd keeps
  none of its activations: what a forward must hold at once is one layer's input and output.
  VGG16's: its first two convolutions' 64 x 224 x 224 outputs, 6,422,528 elements, 25.7 MB an
  image in fp32, so 26.3 GB at 1,024 images (issue #47's "first conv's output alone ~13 GB").
- ``flops``: forward FLOPs, 2 x multiply-adds of every convolution and linear layer
  (pooling, normalisation and activations left out); VGG16's 30.7 GFLOPs.
- ``params``: the backbone's parameters (frozen, fp32, on every GPU a process drives).

Why a static table: the host never imports torch (as trainers/specs/_torchvision_weights.py);
tests/test_procs_split.py recounts it from the installed torchvision, so a torchvision that
changes an architecture fails a test, not an estimate.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

REFERENCE_SIDE = 224  # the input side the table is counted at (the study resizes MNIST to it)
BYTES = 4  # fp32: the trainer computes in fp32, no autocast
GIB = 2 ** 30  # a GPU's memory is counted in GiB (an A6000's "48 GB" is 48 GiB); platform.gpu_memory_gb too

# backbone -> (peak elements of one image's forward, forward FLOPs of one image, backbone parameters)
COSTS: dict[str, tuple[int, int, int]] = {
    "alexnet": (344_128, 1_311_133_056, 2_469_696),
    "densenet121": (1_605_632, 5_666_275_328, 6_953_856),
    "resnet18": (1_605_632, 3_627_122_688, 11_176_512),
    "squeezenet1_0": (1_420_512, 1_464_793_152, 735_424),
    "vgg16": (6_422_528, 30_693_261_312, 14_714_688),
}

LITERAL, SPLIT = "literal", "split"


def process_gpus(reading: str, procs: int, local_rank: int, gpus: int) -> list[int]:
    """The GPU ids (0..gpus-1 of its node) process ``local_rank`` of ``procs`` drives: all of
    them (``literal``: one device-ID argument for every process), or its own contiguous share
    (``split``; 3 GPUs over 2: [0, 1] and [2]; fewer GPUs than processes: GPU rank % gpus)."""
    if reading != SPLIT or procs <= 1:
        return list(range(gpus))
    if gpus < procs:
        return [local_rank % gpus]
    base, extra = divmod(gpus, procs)
    start = local_rank * base + min(local_rank, extra)
    return list(range(start, start + base + (1 if local_rank < extra else 0)))


def scatter_sizes(images: int, devices: int) -> list[int]:
    """How nn.DataParallel (``torch.chunk``) splits a batch of ``images`` over ``devices``:
    chunks of ceil(images / devices), the last smaller (1,024 over 3: 342, 342, 340)."""
    if devices <= 1 or images <= 0:
        return [images]
    size = -(-images // devices)
    return [min(size, images - k) for k in range(0, images, size)]


def process_images(reading: str, procs: int, whole: int) -> int:
    """A process's batch: the point's whole (``literal``: every process takes it), or an equal
    share of it (``split``; the launch refuses a batch that does not divide)."""
    return whole // procs if reading == SPLIT and procs > 1 else whole


@dataclass(frozen=True)
class GpuMemory:
    """A point's estimated memory on its fullest GPU (a lower bound: CUDA's context, cuDNN's
    workspace and the caching allocator's slack come on top)."""

    gib: float  # GiB on the fullest GPU
    gpu: int  # which one (its id on the node)
    how: str  # the sum, in words: "2 processes x (26.3 GiB activations of 1,024 vgg16 images + ...)"
    fix: str  # what would fit


def _gib(n: float) -> str:
    return f"{n / GIB:.1f} GiB"


def gpu_memory(backbone: str, *, image_side: int, gpus: int, procs: int, reading: str, whole: int,
               head_params: int, train: bool) -> GpuMemory:
    """The memory of one point on its fullest GPU (module docstring's table): on every GPU, for
    each process that drives it, the activations of its largest chunk (``scatter_sizes`` of
    its batch over its GPUs) x ``peak`` x (side / 224)^2 x 4 bytes, the backbone's and head's
    weights (a replica on each GPU), and on the process's first GPU also its whole input batch
    (3 x side^2 an image) and, training, the head's gradients and SGD momentum (2 x head)."""
    peak, _, params = COSTS[backbone]
    scale = (image_side / REFERENCE_SIDE) ** 2
    per_gpu: dict[int, list[float]] = {g: [] for g in range(gpus)}
    parts: dict[int, list[tuple[int, float, float]]] = {g: [] for g in range(gpus)}
    for rank in range(procs):
        mine = process_gpus(reading, procs, rank, gpus)
        images = process_images(reading, procs, whole)
        for k, (g, chunk) in enumerate(zip(mine, scatter_sizes(images, len(mine)))):
            act = chunk * peak * scale * BYTES
            weights = (params + head_params) * BYTES
            if k == 0:
                weights += images * 3 * image_side ** 2 * BYTES + (2 * head_params * BYTES if train else 0)
            per_gpu[g].append(act + weights)
            parts[g].append((chunk, act, weights))
    gpu = max(per_gpu, key=lambda g: sum(per_gpu[g]))
    total = sum(per_gpu[gpu])
    chunk, act, weights = max(parts[gpu], key=lambda t: t[1] + t[2])
    n = len(parts[gpu])
    one = f"{_gib(act)} activations of {chunk:,} {backbone} images at {image_side}px + {_gib(weights)} weights and inputs"
    how = f"{n} processes x ({one})" if n > 1 else one
    fix = ("trainer.params.procs_split=split (each process its share of the GPUs and images) or a smaller batch"
           if reading != SPLIT and procs > 1 else "a smaller batch or more GPUs")
    return GpuMemory(gib=total / GIB, gpu=gpu, how=how, fix=fix)


def forward_flops(backbone: str, image_side: int) -> float:
    """The backbone's forward FLOPs of one image at ``image_side`` (the table's, scaled by area)."""
    return COSTS[backbone][1] * (image_side / REFERENCE_SIDE) ** 2


def whole_batch(config: Mapping) -> int:
    """The images one iteration of the point takes on its node: strong scaling's global batch,
    else images per GPU x GPUs (what one process of the literal reading scatters)."""
    exp = config.get("experiment") or {}
    if exp.get("scaling") == "strong" and exp.get("global_batch"):
        return int(exp["global_batch"])
    return int(exp.get("images_per_gpu") or 1) * max(1, int(config.get("gpus") or 1) // max(1, int(config.get("nodes") or 1)))
