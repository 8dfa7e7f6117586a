"""trainer=sleep: the known-answer trainer (t(N) = a/N + b log2 N + c + d (N-1)/N^2 seconds per image)."""

import math
from dataclasses import dataclass
from typing import Optional

from trainers.spec import COMMON_KEYS, TrainerDef, Unused


def _check(config) -> None:
    params = config["trainer"]["params"]
    for key in ("a_s", "b_s", "c_s", "d_s", "noise"):
        if params[key] < 0:
            raise ValueError(f"trainer.params.{key} must be >= 0, got {params[key]}")


def seconds_per_iteration(config, gpus: int, batch: int) -> float:
    """The law's iteration: N*B*t(N) seconds, t(N) = a/N + b*log2(N) + c + d*(N-1)/N^2
    (trainers/sleep.py; without its noise)."""
    p = config["trainer"]["params"]
    n = max(int(gpus), 1)
    ring = float(p.get("d_s") or 0.0) * (n - 1) / n ** 2
    return n * int(batch) * (float(p["a_s"]) / n + float(p["b_s"]) * math.log2(n) + float(p["c_s"]) + ring)


@dataclass
class SleepParams:
    a_s: float = 0.012  # parallel part: seconds per image on one rank, divided over the N ranks
    b_s: float = 0.001  # communication: seconds per image per doubling of N (log2 N)
    c_s: float = 0.002  # serial part: seconds per image whatever N (spent as data wait)
    d_s: float = 0.0  # ring all-reduce: seconds per image x (N-1)/N^2 (an iteration's B*d*(N-1)/N, spent as comm)
    noise: float = 0.0  # relative noise: one run's law scaled by 1 + Normal(0, noise), seeded (0: exact)
    noise_seed: int = 0  # seeds the noise with the point's seed (its repeat), so repeats differ, reruns do not
    fail_rank: Optional[int] = None  # test knob: this rank raises ...
    fail_at_iteration: int = 0  # ... at the start of this iteration
    stall_rank: Optional[int] = None  # test knob: this rank stalls in its first iteration ...
    stall_s: float = 0.0  # ... for this many seconds


# It trains nothing and reads no data: every common setting is refused when set, and a test
# knob's companion without the knob (trainers/spec.py: Unused).
UNUSED = tuple(Unused(key, {}, why="it sleeps a known law: no model, no optimizer, no data",
                      fix="drop it, or use trainer=synthetic for a real training loop") for key in COMMON_KEYS) + (
    Unused("trainer.params.fail_at_iteration", {"trainer.params.fail_rank": (None,)},
           why="it says when trainer.params.fail_rank fails", fix="set trainer.params.fail_rank too, or drop it"),
    Unused("trainer.params.stall_s", {"trainer.params.stall_rank": (None,)},
           why="it says how long trainer.params.stall_rank stalls", fix="set trainer.params.stall_rank too, or drop it"),
    Unused("trainer.params.noise_seed", {"trainer.params.noise": (0, 0.0)},
           why="it seeds the noise, and there is none", fix="set trainer.params.noise > 0 too, or drop it"),
)


TRAINER = TrainerDef(
    name="sleep",
    study="harvest's known answer: sleeps an exact scaling law instead of computing",
    params=SleepParams,
    build="trainers.sleep:build",
    check=_check,
    checkpoint=True,
    seconds_per_iteration=seconds_per_iteration,
    unused=UNUSED,
)
