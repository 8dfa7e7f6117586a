"""What ``campaign datagen`` can write (campaign_datasets/standin.py), importable without numpy
(the CLI's parser lists them)."""

STANDINS = ("ade20k", "mnist", "cifar10", "cifar100")
# (training, test or validation) images per size: tests (seconds), small (a reduced study on
# one machine; ADE20K's: what study=swinv2_thesis_small's largest point reads, 8 GPUs x 2
# images x 5 iterations, so that none is written unread), full (the real split sizes)
SIZES = {
    "ade20k": {"tests": (16, 4), "small": (80, 8), "full": (20210, 2000)},
    "mnist": {"tests": (64, 32), "small": (6000, 1000), "full": (60000, 10000)},
    "cifar10": {"tests": (100, 20), "small": (5000, 1000), "full": (50000, 10000)},
    "cifar100": {"tests": (40, 20), "small": (5000, 1000), "full": (50000, 10000)},
}
