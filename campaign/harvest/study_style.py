"""Units and titles of the line figures as a study publishes them, looked up by the study a
campaign's points were launched by (``study.text``, the text's file: a preset and its reduced
twin share it). A campaign of no study, or of several, gets the plain style.

- the reference study (swinv2-ddp-scalability-thesis.txt): training time in hours ("Units for
  training time are in hours with no training job shorter than one day", section 5.1, its
  Fig 1); speedup and efficiency are its equations 3.1 and 3.2 (section 3.1).
- the ViT study (vit-deepspeed-scaling.txt): its Figs 12-13 are "Strong Scaling Speedup";
  the equation numbers are the reference study's, not its own, so its titles carry none.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

THESIS = "swinv2-ddp-scalability-thesis.txt"
VIT = "vit-deepspeed-scaling.txt"


@dataclass(frozen=True)
class FigureStyle:
    """What a study's figures say about their units and what they are titled."""

    time_unit: str = "s"  # the training time's unit on the y axis
    time_scale: float = 1.0  # seconds -> that unit
    time_title: str = "Training time (time to solution)"
    speedup_title: str = "Speedup T(1)/T(N)"
    efficiency_title: str = "Parallel efficiency S/N"


PLAIN = FigureStyle()
STYLES = {
    THESIS: FigureStyle(time_unit="hours", time_scale=1 / 3600, time_title="Training time (its Fig 1, in hours)",
                        speedup_title="Speedup (eq. 3.1)", efficiency_title="Parallel efficiency (eq. 3.2)"),
    VIT: FigureStyle(speedup_title="Strong scaling speedup T(1)/T(N)"),
}


def study_of(points: Sequence[dict]) -> Optional[str]:
    """The study text every completed point was launched by (``study.text``); None when
    some point has none, or the points have several."""
    done = [p for p in points if p.get("state", "completed") == "completed"]
    texts = {(((p.get("config") or {}).get("study") or {}).get("text")) if isinstance(p.get("config"), dict) else None
             for p in done}
    return next(iter(texts)) if len(texts) == 1 and None not in texts else None


def style_of(points: Sequence[dict]) -> FigureStyle:
    """The figure style of these points' study (``PLAIN`` for none)."""
    return STYLES.get(study_of(points) or "", PLAIN)
