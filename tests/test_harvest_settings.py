"""The companion studies' settings outside harvest's tables: the estimate counts gradient
accumulation (compute per iteration scales with its micro-batches where an iteration is
one optimizer step), and the studies' GPUs (RTX A6000, T4) are in the datasheet."""

from __future__ import annotations

import pytest

from campaign.catalogue.gpus import LocalGPUs
from campaign.observe.estimate import ASSUMED_MFU, declared_rate, work_key


def _config(trainer: str, accum: int) -> dict:
    params = {"model": "vit_base_patch16_224"} if trainer == "vit" else {}
    return {"trainer": {"name": trainer, "params": params, "precision": "fp32"},
            "dataset": {"num_classes": 10}, "experiment": {"grad_accum": accum},
            "platform": {"name": "p", "device": "cuda", "peak_tflops": {"fp32": 10.0}}}


def test_grad_accum_1_2_4_give_estimates_in_proportion_to_micro_batches():
    from trainers.specs.vit import flops_per_image

    rates = [declared_rate(_config("vit", k), 2, 16)[0] for k in (1, 2, 4)]
    one = flops_per_image(_config("vit", 1)) * 16 / (10.0e12 * ASSUMED_MFU)
    assert rates == pytest.approx([one, 2 * one, 4 * one])
    # a measured rate of one is never taken for another
    assert len({work_key(_config("vit", k), 2, 1, 16) for k in (1, 2, 4)}) == 3


def test_an_iteration_of_one_micro_batch_is_not_scaled():
    from trainers.registry import spec_of

    assert spec_of("swinv2_upernet").iteration_is_step is False  # mmseg: one iteration, one micro-batch


@pytest.mark.parametrize("name,bandwidth,fp32,fp16", [("NVIDIA RTX A6000", 768, 38.7, 154.8),
                                                      ("Tesla T4", 320, 8.1, 65.0)])
def test_the_studies_gpus_are_in_the_datasheet(name, bandwidth, fp32, fp16):
    sheet = LocalGPUs(1, name, 16.0).datasheet()
    assert sheet is not None and sheet[1] == bandwidth and sheet[4]["fp32"] == fp32 and sheet[4]["fp16"] == fp16
    assert LocalGPUs(1, "NVIDIA A100-SXM4-80GB", 80.0).datasheet()[1] == 2039  # the others unchanged


def test_bytes_per_epoch_as_the_text_defines_it_and_as_moved():
    """The DataParallel study's default (MNIST's 60,000 images, batch 1,024, VGG16's 119,586,826
    trainable parameters) on 4 GPUs: the job records N/(b k) iterations x parameters x 4 bytes
    with b = 256 images per GPU (60,000/1,024 iterations); the text's N/(B x k) takes B = 1,024."""
    import polars as pl

    from campaign.harvest.hardware import hardware_table

    params, n = 119_586_826, 60_000
    moved = n / (256 * 4) * params * 4  # what the job's sync_volume records
    p = pl.DataFrame([{"platform": "a6000", "trainer": "frozen_backbone", "experiment": "strong_scaling",
                       "variant": "", "gpus": 4, "repeat": 0, "time_s": 10.0, "timed_iterations": 10,
                       "trainable_params": params, "sync_bytes_per_epoch": moved}])
    (row,) = hardware_table(p).rows(named=True)
    assert row["sync_gb_per_epoch"] == pytest.approx(n / 1024 * params * 4 / 1e9)
    assert row["sync_gb_per_epoch_text"] == pytest.approx(n / (1024 * 4) * params * 4 / 1e9)
