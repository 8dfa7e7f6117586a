"""The DataParallel study's two processes a node, both readings (issue #47):
``trainer.params.procs_split=literal`` (each process all the node's GPUs, the whole split, the
whole batch) and ``split`` (each its share of them), the memory a point needs on its fullest
GPU (trainers/specs/_backbone_costs.py) refused over the platform's before submit, and Fig 4's
inference points at a fixed count of timed iterations.

What would catch it wrong: a process that takes the other's GPU or batch (the images each GPU
id gets per iteration, summed over both processes), a table that drifts from torchvision's
architectures, an estimate off its hand computation (VGG16 at 1,024 on one A6000), a refusal
that does not name the figure, the estimate and the fix, and inference points back at the
600-epoch cap or without an estimate. The real two-process runs: tests/test_procs_per_node.py.
"""

from __future__ import annotations

import json

import pytest

from test_study_design import dry  # noqa: F401  (the in-process dry run fixture)
from trainers.specs._backbone_costs import COSTS, GIB, gpu_memory, process_gpus, scatter_sizes

MNIST = "dataset.root=/data/mnist"


def test_each_process_takes_its_share_of_the_gpus_and_images():
    assert [process_gpus("literal", 2, r, 4) for r in (0, 1)] == [[0, 1, 2, 3]] * 2
    assert [process_gpus("split", 2, r, 4) for r in (0, 1)] == [[0, 1], [2, 3]]
    assert [process_gpus("split", 2, r, 3) for r in (0, 1)] == [[0, 1], [2]]
    assert [process_gpus("split", 2, r, 1) for r in (0, 1)] == [[0], [0]]  # fewer GPUs: they share it
    assert scatter_sizes(1024, 3) == [342, 342, 340] and scatter_sizes(16, 1) == [16]


def test_the_memory_estimate_worked_out_by_hand():
    """VGG16 at 1,024 on one A6000, two processes: per image its first two convolutions'
    outputs (64 x 224 x 224 each, alive at once: the frozen backbone keeps no activations)."""
    act = 1024 * 2 * 64 * 224 * 224 * 4  # 26,306,674,688 B: ~26 GB a process (issue #47)
    head = 25088 * 4096 + 4096 + 4096 * 4096 + 4096 + 4096 * 10 + 10  # 119,586,826
    weights = (14_714_688 + head) * 4  # the frozen backbone and the head, fp32
    inputs = 1024 * 3 * 224 * 224 * 4  # the process's batch on its first GPU
    optimizer = 2 * head * 4  # the head's gradients and SGD momentum
    one = act + weights + inputs + optimizer
    literal = gpu_memory("vgg16", image_side=224, gpus=1, procs=2, reading="literal", whole=1024,
                         head_params=head, train=True)
    assert literal.gib == pytest.approx(2 * one / GIB) and round(literal.gib, 1) == 52.9 > 48  # refused
    split = gpu_memory("vgg16", image_side=224, gpus=1, procs=2, reading="split", whole=1024,
                       head_params=head, train=True)
    half = 1024 // 2 * 2 * 64 * 224 * 224 * 4 + weights + 512 * 3 * 224 * 224 * 4 + optimizer
    assert split.gib == pytest.approx(2 * half / GIB) and round(split.gib, 1) == 27.9  # fits 48
    # a small backbone fits either way: ResNet18's linear head, 4 GPUs, 256 images each
    small = gpu_memory("resnet18", image_side=224, gpus=4, procs=2, reading="literal", whole=1024,
                       head_params=5130, train=True)
    by_hand = 2 * (256 * COSTS["resnet18"][0] * 4 + (11_176_512 + 5130) * 4 + 1024 * 3 * 224 * 224 * 4
                   + 2 * 5130 * 4)
    assert small.gib == pytest.approx(by_hand / GIB) and small.gib < 48 and small.gpu == 0


def _points(out: str) -> list[dict]:
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def _axis(point: dict, key: str) -> str:
    return next((o.split("=", 1)[1] for o in point["overrides"] if o.split("=", 1)[0] == key), "")


def test_the_preset_splits_and_the_literal_reading_refuses_fig_1s_one_gpu_point(dry):
    code, out, err = dry("study=dataparallel_a6000", MNIST, flag="--json")
    assert code == 0, err
    points = _points(out)
    one = [p for p in points if p["resources"]["gpus_per_node"] == 1 and _axis(p, "trainer.params.engine") == "dataparallel"]
    assert len(one) == 1 and one[0]["config"]["trainer"]["params"]["procs_split"] == "split"
    assert round(one[0]["gpu_memory_gib"], 1) == 27.9 and one[0]["resources"]["tasks_per_node"] == 2
    # Fig 4: 3,000 timed iterations ("several thousand"), each point with an estimate
    inference = [p for p in points if _axis(p, "trainer.params.mode") == "inference"]
    assert len(inference) == 8
    for p in inference:
        assert p["schedule"]["iterations"] == 3000 and p["config"]["experiment"]["epochs"] is None
        assert p["estimate"]["wall_s"] and p["estimate"]["source"].startswith("the trainer's declaration")
    code, out, err = dry("study=dataparallel_a6000", MNIST, "trainer.params.procs_split=literal")
    assert code == 0, err
    refused = [line for line in err.splitlines() if line.startswith("refused:")]
    assert len(refused) == 1 and "gpus=1 " in refused[0] and "trainer.params.engine=dataparallel" in refused[0]
    assert refused[0].endswith(
        ": estimated 52.9 GiB on GPU 0 (2 processes x (24.5 GiB activations of 1,024 vgg16 images at 224px + 2.0 GiB "
        "weights and inputs)) is over platform a6000's 48 GiB (platform.gpu_memory_gb); Fig 1 loses this point; use "
        "trainer.params.procs_split=split (each process its share of the GPUs and images) or a smaller batch")
    assert "dry run: 34 point(s)" in out and "GiB/GPU" in out
    assert "campaign's choice: trainer.params.procs_split=split" in out
    assert "campaign's choice: experiment.iterations=3000" in out


def test_a_split_batch_that_does_not_divide_is_refused_in_one_line(dry):
    code, _, err = dry("platform=local", "gpus=1", "trainer=frozen_backbone", "trainer.params.engine=dataparallel",
                       "trainer.params.procs_per_node=2", "trainer.params.procs_split=split", "experiment=smoke",
                       "experiment.images_per_gpu=3", "dataset=synthetic")
    assert code == 2
    assert err.strip().splitlines()[-1].endswith(
        "trainer.params.procs_split=split gives each of the 2 processes an equal share of the point's 3 images an "
        "iteration, which do not divide by 2; use a batch that does, or trainer.params.procs_split=literal")


def test_the_table_is_torchvisions_architectures():
    """Recount COSTS from the installed torchvision, as its docstring defines them (meta device)."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("torchvision")
    from torch import nn

    from trainers.models.classifier import _builder, _strip_head

    def numel(x) -> int:
        if isinstance(x, torch.Tensor):
            return x.numel()
        return sum(numel(t) for t in x) if isinstance(x, (list, tuple)) else 0

    for name, want in COSTS.items():
        with torch.device("meta"):
            model, _ = _strip_head(name, _builder(name)())
        peak, flops = [0], [0]

        def hook(m, inp, out):
            if getattr(m, "inplace", False):
                return
            peak[0] = max(peak[0], numel(inp) + numel(out))
            if isinstance(m, nn.Conv2d):
                flops[0] += 2 * out.numel() * (m.in_channels // m.groups) * m.kernel_size[0] * m.kernel_size[1]
            elif isinstance(m, nn.Linear):
                flops[0] += 2 * out.numel() * m.in_features

        for m in model.modules():
            m.register_forward_hook(hook)
        with torch.no_grad():
            model.eval()(torch.empty(1, 3, 224, 224, device="meta"))
        assert (peak[0], flops[0], sum(p.numel() for p in model.parameters())) == want, name


def test_two_processes_on_two_gpus_under_each_reading():
    """Two processes of one node built in this process (no collective runs without the study's
    timing or stop rule), 2 GPU ids named on CPU, a global batch of 8 on 32 images: the images
    each GPU id gets per iteration from both processes together, and what each process reads."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("torchvision")
    from trainers.dist import DistContext
    from trainers.frozen_backbone import FrozenBackboneTrainer
    from trainers.instrument import Recorder

    got = {}
    for reading in ("literal", "split"):
        trainers = []
        for rank in (0, 1):
            ctx = DistContext(rank=rank, world_size=2, local_rank=rank, local_world_size=2, num_nodes=1,
                              device=torch.device("cpu"), backend="none", emulated=False, host="test")
            cfg = {"gpus": 2, "experiment": {"scaling": "strong", "global_batch": 8},
                   "dataset": {"name": "synthetic", "num_classes": 10, "length": 32},
                   "trainer": {"name": "frozen_backbone", "optimizer": "sgd", "lr": 0.01,
                               "params": {"backbone": "squeezenet1_0", "classifier": "linear", "image_size": 32,
                                          "engine": "dataparallel", "procs_per_node": 2, "procs_split": reading}}}
            trainer = FrozenBackboneTrainer(ctx, cfg, {"batch_per_gpu": 4, "iterations": 2, "warmup": 0, "seed": 0})
            rec = Recorder(torch.device("cpu"), warmup=0)
            for _ in range(2):
                trainer.step(rec)
            trainers.append(trainer)
        per_step = [{g: a.get(g, 0) + b.get(g, 0) for g in (0, 1)}
                    for a, b in zip(trainers[0].gpu_images, trainers[1].gpu_images)]
        got[reading] = (per_step, [t.gpu_ids for t in trainers], [t.batch for t in trainers],
                        [len(t.loader) for t in trainers])
    # literal: each process scatters the whole 8 over both GPUs, so each GPU does 4 + 4 a step,
    # twice one process's; each process reads the whole split: 32 / 8 = 4 iterations an epoch
    assert got["literal"] == ([{0: 8, 1: 8}] * 2, [[0, 1], [0, 1]], [8, 8], [4, 4])
    # split: each process 4 images on its own GPU, from its half of the split: 16 / 4 = 4 iterations
    assert got["split"] == ([{0: 4, 1: 4}] * 2, [[0], [1]], [4, 4], [4, 4])
