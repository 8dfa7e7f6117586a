"""One registry for trainers: a trainer is one torch-free declaration (name, study, typed
params, engines, build target) that the launch validates against and the job builds
from. Adding one is one module plus its conf file: proved here with a toy trainer that
lives only in this test's folder and runs as a real job on the local default."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from conftest import campaign_id_from
from trainers import registry
from trainers.spec import resolve_params

ROOT = Path(__file__).resolve().parents[1]

TOY_MODULE = '''
"""trainer=toy: a least-squares fit, declared and implemented in one module (torch only in build)."""

import enum
from dataclasses import dataclass

from trainers.spec import TrainerDef


class Init(str, enum.Enum):
    zeros = "zeros"  # every weight 0
    normal = "normal"  # seeded N(0, 1)


@dataclass
class ToyParams:
    features: int = 4  # inputs of the linear model
    init: Init = Init.zeros  # how its weights start


class ToyTrainer:
    def __init__(self, ctx, cfg, plan):
        import torch

        p = cfg["trainer"]["params"]
        torch.manual_seed(plan["seed"])
        model = torch.nn.Linear(p["features"], 1)
        if p["init"] == "zeros":
            torch.nn.init.zeros_(model.weight)
        if ctx.distributed:
            model = torch.nn.parallel.DistributedDataParallel(model)
        self.model = model
        self.trainable_params = sum(q.numel() for q in model.parameters())
        self.images_per_step = plan["batch_per_gpu"]
        self.x = torch.randn(self.images_per_step, p["features"])
        self.y = self.x.sum(dim=1, keepdim=True)
        self.opt = torch.optim.SGD(model.parameters(), lr=float(cfg["trainer"]["lr"]))

    def step(self, rec):
        rec.mark("data")
        self.opt.zero_grad()
        loss = ((self.model(self.x) - self.y) ** 2).mean()
        rec.mark("forward")
        loss.backward()
        rec.mark("backward")
        self.opt.step()
        rec.mark("step")
        return loss


def build(ctx, cfg, plan):
    return ToyTrainer(ctx, cfg, plan)


TRAINER = TrainerDef(name="toy", study="a toy fit that proves one module + one conf file add a trainer",
                     params=ToyParams, build="toy_trainer:build")
'''

TOY_CONF = """\
# conf/trainer/toy.yaml: picks the module that declares the trainer
name: toy
module: toy_trainer
lr: 0.05
params:
  features: 4
  init: zeros
"""


@pytest.fixture
def toy(ws):
    """The toy trainer's module and conf file in the test's folder, on the paths a user sets."""
    (ws.path / "toy_trainer.py").write_text(TOY_MODULE)
    (ws.path / "site" / "trainer").mkdir(parents=True)
    (ws.path / "site" / "trainer" / "toy.yaml").write_text(TOY_CONF)
    ws.env["PYTHONPATH"] = str(ws.path)
    return [f"hydra.searchpath=[file://{ws.path / 'site'}]", "trainer=toy",
            "experiment.base_iterations=6", "experiment.warmup_iterations=1"]


@pytest.mark.slow
def test_a_toy_trainer_is_one_module_and_one_conf_file_and_runs_as_a_job(ws, toy):
    # a sweep of its own declared param, one rank a point (the job's ranks are the job's, not the trainer's)
    res = ws.launch("-m", "gpus=1", "trainer.params.init=zeros,normal", *toy)
    assert res.returncode == 0, res.stdout + res.stderr
    cid = campaign_id_from(res.stdout)
    wait = ws.campaign("status", cid, "--wait", "--interval", "2", timeout=600)
    assert wait.returncode == 0, wait.stdout + wait.stderr
    assert "2 point(s): 2 completed" in wait.stdout
    rows = ws.query("select trainer, config from point order by idx")
    assert {r[0] for r in rows} == {"toy"}
    import json

    config = json.loads(rows[0][1])
    assert config["trainer"]["module"] == "toy_trainer"
    assert config["trainer"]["params"] == {"features": 4, "init": "zeros"}


@pytest.mark.parametrize("override,message", [
    ("trainer.params.init=ones", "unknown trainer.params.init 'ones' for trainer=toy; valid: zeros, normal"),
    ("+trainer.params.featurs=8", "unknown trainer.params.featurs for trainer=toy (did you mean 'features'?); "
                                  "valid: features, init"),
    ("trainer.params.features=many", "trainer.params.features must be an integer, got 'many'"),
])
def test_the_toy_trainers_params_are_checked_at_launch(ws, toy, override, message):
    res = ws.launch(*toy, override)
    assert res.returncode == 2, res.stdout + res.stderr
    assert message in res.stderr and res.stderr.count("\n") == 1, res.stderr
    assert not ws.db.exists()


def test_a_trainer_module_that_cannot_be_imported_is_one_line(ws, toy):
    (ws.path / "site" / "trainer" / "ghost.yaml").write_text("name: ghost\nmodule: ghost_trainer\n")
    res = ws.launch(*toy, "trainer=ghost")
    assert res.returncode == 2
    assert ("trainer 'ghost': its module 'ghost_trainer' cannot be imported (No module named 'ghost_trainer'); "
            "put it on PYTHONPATH or install it") in res.stderr, res.stderr
    assert res.stderr.count("\n") == 1 and not ws.db.exists()


def test_every_builtin_trainer_is_declared_once_and_its_conf_agrees():
    """conf/trainer/<name>.yaml exists for each declaration (and no other), names it, and
    lists only declared params at their declared defaults (listed so they override without +)."""
    names = registry.builtin_names()
    confs = sorted(p.stem for p in (ROOT / "conf" / "trainer").glob("*.yaml"))
    assert names == confs
    for name in names:
        spec = registry.spec_of(name)
        assert spec.name == name and spec.study
        conf = OmegaConf.to_container(OmegaConf.load(ROOT / "conf" / "trainer" / f"{name}.yaml"))
        assert conf["name"] == name
        given = conf.get("params") or {}
        assert resolve_params(spec, given) == {**spec.defaults(), **{k: (list(v) if isinstance(v, tuple) else v)
                                                                       for k, v in given.items()}}
        for key, value in given.items():
            assert value == spec.defaults()[key], f"{name}.yaml: params.{key}={value} differs from the declaration"
        for f in dataclasses.fields(spec.params):  # one comment per field: the declaration's source says it
            assert f.name in Path(sys.modules[spec.params.__module__].__file__).read_text()


def test_engines_come_from_the_declarations():
    assert registry.spec_of("vit").engines == ("ddp", "deepspeed")
    assert registry.spec_of("frozen_backbone").engines == ("ddp", "dataparallel", "vanilla")
    assert registry.spec_of("frozen_backbone").single_process_engines == ("dataparallel", "vanilla")
    assert registry.spec_of("synthetic").engines == ()


def test_the_declarations_import_no_torch():
    code = textwrap.dedent("""
        import sys
        from trainers import registry
        for name in registry.builtin_names():
            registry.spec_of(name)
        print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'timm', 'mmseg', 'mmengine', 'deepspeed')))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "[]"


def test_unknown_trainer_names_the_nearest():
    with pytest.raises(registry.UnknownTrainer, match=r"unknown trainer 'synthetc' \(did you mean 'synthetic'\?\)"):
        registry.spec_of("synthetc")
