"""What a synthetic batch costs: the pooled dataset vs generating every image on access, in one run.

dataset=synthetic is a first-class dataset for measuring scaling, so its batches must cost
next to nothing beside a step. On an H200 the ViT-B/16 trainer waited 10.6 ms per 8-image
iteration for them (29 % of its timed window, tests/golden/h200/README.md), when each
item was a fresh ``torch.randn`` from its own seeded generator. The *pooled* variant is
trainers.data.synthetic as it is now (a fixed pool generated once, items looked up); the
*per-item* variant is the former one, kept here as the baseline. Both run through
trainers.data.build_loader exactly as the ViT trainer builds it (one rank, the shuffle
sampler, ``num_workers`` 0 as dataset=synthetic's default, batches of 8), timing
``--batches`` batches per round, rounds interleaved A B, B A, ...; printed:

    per-item/pooled time per batch: 9.81x (median of 3 paired round(s), range ...; 12 ms vs 1 ms)

    .venv/bin/python benchmarks/synthetic_data.py                  # 8 x 3 x 224 x 224, 3 rounds of 20 batches
    .venv/bin/python benchmarks/synthetic_data.py --image-size 32 --batches 200
"""

from __future__ import annotations

import argparse
import sys
import time

import _common  # noqa: F401  (puts the repository on the path)
from _common import interleaved, ratio_line


def per_item_dataset(*, channels: int, image_size: int, num_classes: int, length: int, seed: int):
    """The former SyntheticImages: each item a fresh generator seeded by (seed, index), one randn per image."""
    import torch
    from torch.utils.data import Dataset

    class PerItem(Dataset):
        def __init__(self):
            self.shape = (channels, image_size, image_size)
            self._base = (seed * 2 * 0x85EBCA77) & 0xFFFFFFFF

        def __len__(self):
            return length

        def __getitem__(self, index):
            generator = torch.Generator()
            generator.manual_seed((self._base + (index % length) * 0x9E3779B1) & 0xFFFFFFFF)
            label = int(torch.randint(num_classes, (1,), generator=generator))
            return torch.randn(self.shape, generator=generator), label

    return PerItem()


def time_batches(dataset, *, batch: int, batches: int, workers: int) -> float:
    """Seconds per batch of ``batches`` batches drawn as the ViT trainer draws them (after one untimed)."""
    from trainers.data import build_loader

    loader = build_loader(dataset, batch_size=batch, rank=0, world_size=1, seed=0, num_workers=workers,
                          pin_memory=False)
    it = iter(loader)
    next(it)  # the first batch starts the iterator (and any workers): not a steady-state batch
    start = time.perf_counter()
    for _ in range(batches):
        next(it)
    return (time.perf_counter() - start) / batches


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--image-size", type=int, default=224)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--batches", type=int, default=20, help="timed batches per round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--workers", type=int, default=0, help="DataLoader workers (dataset.num_workers)")
    args = ap.parse_args(argv)
    import torch

    from trainers.data.synthetic import SyntheticImages

    torch.set_num_threads(1)  # this shared machine: one core each, alike for both variants
    shape = dict(channels=3, image_size=args.image_size, num_classes=10, length=(args.batches + 2) * args.batch,
                 seed=0)
    built = {}
    start = time.perf_counter()
    built["pooled"] = SyntheticImages(**shape)
    pool_s = time.perf_counter() - start
    built["per-item"] = per_item_dataset(**shape)
    res = interleaved({name: (lambda r, ds=ds: time_batches(ds, batch=args.batch, batches=args.batches,
                                                            workers=args.workers))
                       for name, ds in built.items()}, args.rounds)
    print(f"{args.batch} x 3 x {args.image_size} x {args.image_size} per batch, {args.batches} batches x "
          f"{args.rounds} rounds, {args.workers} worker(s); pool of {built['pooled'].pool_size} image(s) built once "
          f"in {pool_s * 1000:.0f} ms")
    print(ratio_line("per-item/pooled time per batch", res["per-item"], res["pooled"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
