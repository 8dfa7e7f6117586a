"""trainer=synthetic: a real DDP loop over a small conv net and seeded random images."""

from dataclasses import dataclass

from trainers.spec import TrainerDef


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
)
