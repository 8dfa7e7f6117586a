"""``campaign harvest --where KEY=V`` on a point's settings (campaign/harvest/where_settings.py):
a study swept one factor at a time is one campaign, and each figure reads its factor's
points with the other factors held at their defaults. Known answers on hand-made points;
the DataParallel page's commands run on its twin in tests/test_study_twins_slurm.py."""

from __future__ import annotations

import json

import pytest

from campaign.common.errors import ConfigError
from campaign.harvest.run import parse_where
from campaign.harvest.where_settings import matching_ids, split, value_of


def _point(i: int, overrides: list[str], config: dict | None = None) -> dict:
    return {"id": 100 + i, "idx": i, "overrides": json.dumps(overrides), "config": json.dumps(config or {})}


# A one-factor-at-a-time design: defaults gpus=4, batch 16, resnet18; each factor varied alone.
POINTS = [
    _point(0, ["gpus=1", "experiment.global_batch=16", "trainer.params.backbone=resnet18"]),
    _point(1, ["gpus=4", "experiment.global_batch=16", "trainer.params.backbone=resnet18"]),
    _point(2, ["gpus=4", "experiment.global_batch=8", "trainer.params.backbone=resnet18"]),
    _point(3, ["gpus=4", "experiment.global_batch=16", "trainer.params.backbone=squeezenet1_0"]),
    # no override of the batch: its config's value counts (as a float: 16.0 is 16)
    _point(4, ["gpus=4", "trainer.params.backbone=vgg16"],
           {"experiment": {"global_batch": 16.0}, "trainer": {"params": {"weights": None}}}),
]


def test_a_factor_held_at_its_default_keeps_the_other_factors_points():
    assert matching_ids(POINTS, {"experiment.global_batch": ["16"], "trainer.params.backbone": ["resnet18"]},
                        "c") == {100, 101}  # the GPU sweep: Fig 1's points
    assert matching_ids(POINTS, {"trainer.params.backbone": ["resnet18"]}, "c", "idx") == {0, 1, 2}
    assert matching_ids(POINTS, {"experiment.global_batch": ["16"]}, "c") == {100, 101, 103, 104}
    assert matching_ids(POINTS, {"trainer.params.backbone": ["vgg16", "squeezenet1_0"]}, "c") == {103, 104}


def test_values_are_read_from_the_config_where_no_override_sets_them():
    assert value_of(POINTS[4], "experiment.global_batch") == "16.0"
    assert value_of(POINTS[4], "trainer.params.weights") == "null"
    assert matching_ids(POINTS, {"trainer.params.weights": ["null"]}, "c") == {104}  # the others lack it


def test_a_setting_no_point_has_is_one_line_naming_the_campaign():
    with pytest.raises(ConfigError, match=r"^--where trainer.params.hiden: no point of campaign c7 has this setting"):
        matching_ids(POINTS, {"trainer.params.hiden": ["64"]}, "c7")
    with pytest.raises(ConfigError, match="no point of campaign c has"):  # a group is not a value
        matching_ids([_point(0, [], {"trainer": {"params": {}}})], {"trainer.params": ["x"]}, "c")


def test_parse_where_takes_dotted_keys_beside_the_point_columns():
    where = parse_where(["gpus=4", "trainer.params.backbone=resnet18,vgg16", "experiment.global_batch=16"])
    assert where == {"gpus": [4], "trainer.params.backbone": ["resnet18", "vgg16"], "experiment.global_batch": ["16"]}
    columns, settings = split(where)
    assert columns == {"gpus": [4]} and set(settings) == {"trainer.params.backbone", "experiment.global_batch"}
    for bad in ("backbone=resnet18", "trainer.params.=x", ".x=1", "trainer.params.backbone="):
        with pytest.raises(ConfigError, match="a dotted config key"):
            parse_where([bad])
