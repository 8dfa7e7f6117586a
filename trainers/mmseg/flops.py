"""Count the reference workload's training FLOPs: the command behind the table in
trainers/specs/swinv2_upernet.py (``FLOPS_PER_ITERATION``).

One training iteration of SwinV2 + UPerNet (the EncoderDecoder ``model_config`` builds,
as the trainer runs it: loss forward, then backward) under
``torch.utils.flop_counter.FlopCounterMode``, the counter the Recorder runs over a job's
first iteration (trainers/flops.py), so the table and a run's own count agree. The
counter counts from shapes (2 per multiply-add of matmuls, convolutions, attention), so
``--device meta`` gives on no memory and in seconds the count a GPU or CPU run gives
(tests/test_reference_study.py recomputes a micro entry on the CPU)::

    python -m trainers.mmseg.flops --variant base --crop 512            # one entry
    python -m trainers.mmseg.flops --table                              # every entry
    python -m trainers.mmseg.flops --variant micro --crop 64 --device cpu
"""

from __future__ import annotations

import argparse
import sys
from typing import Optional

# The table's setting, besides variant and crop (trainers/specs/swinv2_upernet.py).
BATCH = 8  # images per iteration: the study's 8 images per GPU
CLASSES = 150  # ADE20K


def count_iteration(variant: str, crop: int, *, classes: int = CLASSES, batch: int = BATCH,
                    device: str = "meta", params: Optional[dict] = None) -> int:
    """FLOPs of one training iteration (forward + backward) of ``batch`` images of
    ``crop`` x ``crop`` with ``classes`` classes, as FlopCounterMode counts them.
    ``params``: trainer.params beyond the variant (the table's are the defaults)."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from trainers.mmseg import compat

    compat.apply()
    from mmengine.structures import PixelData
    from mmseg.registry import MODELS
    from mmseg.structures import SegDataSample

    from trainers.mmseg.model import model_config

    if device == "meta":
        # mmseg's accuracy indexes by a mask (data-dependent shape); on meta tensors that
        # needs this switch. The mask's size changes no FLOP count.
        import torch.fx.experimental._config as fx_config

        fx_config.meta_nonzero_assume_all_nonzero = True
    dev = torch.device(device)
    cfg = {"trainer": {"params": {**(params or {}), "variant": variant}},
           "dataset": {"image_size": int(crop), "num_classes": int(classes)}}
    torch.manual_seed(0)
    with dev:
        model = MODELS.build(model_config(cfg, dev, 1))
    model.to(dev).train()
    images = torch.zeros(batch, 3, crop, crop, device=dev)
    samples = []
    for _ in range(batch):
        sample = SegDataSample(metainfo=dict(img_shape=(crop, crop), pad_shape=(crop, crop), ori_shape=(crop, crop)))
        sample.gt_sem_seg = PixelData(data=torch.zeros(1, crop, crop, dtype=torch.long, device=dev))
        samples.append(sample)
    with FlopCounterMode(display=False) as counter:
        loss, _ = model.parse_losses(model(images, samples, mode="loss"))
        loss.backward()
    return int(counter.get_total_flops())


def main(argv: Optional[list[str]] = None) -> int:
    from trainers.specs.swinv2_upernet import FLOPS_PER_ITERATION

    ap = argparse.ArgumentParser(prog="python -m trainers.mmseg.flops", description=__doc__.split("\n\n")[0])
    ap.add_argument("--variant", default="base")
    ap.add_argument("--crop", type=int, default=512)
    ap.add_argument("--classes", type=int, default=CLASSES)
    ap.add_argument("--batch", type=int, default=BATCH)
    ap.add_argument("--device", default="meta", help="meta (shapes only, the default), cpu or cuda")
    ap.add_argument("--table", action="store_true", help="recount every entry of the table and compare")
    args = ap.parse_args(argv)
    if not args.table:
        print(count_iteration(args.variant, args.crop, classes=args.classes, batch=args.batch, device=args.device))
        return 0
    wrong = 0
    for (variant, crop), stated in FLOPS_PER_ITERATION.items():
        counted = count_iteration(variant, crop, device=args.device)
        wrong += counted != stated
        print(f"({variant!r}, {crop}): {counted},  # {counted / 1e12:.2f} TFLOP"
              + ("" if counted == stated else f"  (the table says {stated})"), flush=True)
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
