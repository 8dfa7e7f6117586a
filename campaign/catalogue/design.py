"""A study preset's design, as data beside its grid (``study.design`` in conf/study/<name>.yaml).

A published study is a design before it is a list of points: the factors it varies (each
feeding some of its figures), the settings its text fixes (each with the sentence that
fixes it) and what the text leaves open, which campaign chose. The preset's grid
(``hydra.sweeper``) makes the points; this says what they are for, so that the dry run
shows the design (campaign/launch/design.py) and an override that replaces a factor, a
fixed setting or turns points into another kind is said, never silent.

Keys are dotted config keys (``experiment.global_batch``) or a config group's name
(``experiment``, ``dataset``, ``platform``: the option's name). Values are written as
strings, as on the command line (``"1024"``, ``"vit_strong"``, ``"null"``).
Dicts keyed by a short id, so that a preset's reduced twin (which includes the preset)
replaces one factor's values without restating the rest.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional


@dataclass
class FactorSpec:
    name: str = ""  # the factor in words, as the text names it: "batch size"
    key: str = ""  # the config key it varies (dotted, or a config group: experiment, dataset, platform)
    values: List[str] = field(default_factory=list)  # its levels, as the preset's grid states them
    feeds: List[str] = field(default_factory=list)  # the study's figures and tables it feeds ("Fig 2"), or campaign's own comparison
    where: Dict[str, str] = field(default_factory=dict)  # the points it varies: key -> the value every one of them holds ({}: all)
    crossed: List[str] = field(default_factory=list)  # keys its grid varies with it (not held at their defaults): Fig 4's batch x engine
    campaign: bool = False  # campaign's addition, not the study's (the DataParallel preset's DDP beside nn.DataParallel)


@dataclass
class FixedSpec:
    key: str = ""  # the config key the text fixes
    value: str = ""  # its value there
    source: str = ""  # where the text fixes it: "section 4.2"
    quote: str = ""  # the text's sentence (or its part) that fixes it
    changed: str = ""  # what else an override of it changes (said with it): "160K/N iterations stay, so ..."


@dataclass
class ChoiceSpec:
    key: str = ""  # the config key campaign set where the text says nothing
    value: str = ""  # campaign's value
    why: str = ""  # why, in one clause


@dataclass
class KindSpec:
    name: str = ""  # the kind of point in words: "strong-scaling"
    where: Dict[str, str] = field(default_factory=dict)  # its points: key -> value
    unset: List[str] = field(default_factory=list)  # keys its points leave unset (null): one set makes them another kind
    becomes: str = ""  # what a point with one of them set is: "dataset-share runs (a share of the training set per GPU)"
    feeds: List[str] = field(default_factory=list)  # the figures its points feed


@dataclass
class DesignSpec:
    # One factor at a time (the DataParallel study): the level each factor keeps while another
    # varies; a factor's points are those at every other factor's default. {}: a full grid.
    defaults: Dict[str, str] = field(default_factory=dict)
    factors: Dict[str, Optional[FactorSpec]] = field(default_factory=dict)  # id -> what the study varies (null: a twin drops it)
    fixed: Dict[str, FixedSpec] = field(default_factory=dict)  # id -> what the study's text fixes
    choices: Dict[str, ChoiceSpec] = field(default_factory=dict)  # id -> what campaign chose where the text is silent
    kinds: Dict[str, KindSpec] = field(default_factory=dict)  # id -> kinds of points an override can turn into others


def empty_design() -> Optional[DesignSpec]:
    """``StudySpec.design``'s default: none (a point launched without a study preset)."""
    return None
