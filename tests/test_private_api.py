"""The private APIs campaign still relies on, checked where they live, so that an upgrade
that moves one fails here, loudly, naming it (and not in a user's sbatch).

submitit has no public hook to run sbatch through our own command runner (scrubbed
environment, retries, SLURM's message) nor to render the script without submitting:
``campaign/backends/slurm.py`` subclasses ``SlurmExecutor`` through the methods below
and ``campaign/backends/sbatch.py`` renders with ``_make_sbatch_string``. pyproject pins
submitit below the next minor version; Hydra and OmegaConf are used through public APIs
only (asserted below on the source)."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _params(fn) -> list[str]:
    return list(inspect.signature(fn).parameters)


def test_submitit_is_pinned_below_the_next_minor_version():
    from importlib.metadata import version

    text = (ROOT / "pyproject.toml").read_text()
    assert re.search(r'"submitit>=1\.5,<1\.6"', text), "pyproject.toml must bound submitit (private API in use)"
    assert version("submitit").startswith("1.5."), f"submitit {version('submitit')} is outside the pinned range"


@pytest.mark.parametrize("module,name,params", [
    ("submitit.slurm.slurm", "_make_sbatch_string",
     ["command", "folder", "job_name", "partition", "time", "nodes", "ntasks_per_node", "cpus_per_task",
      "gpus_per_node", "qos", "mem", "constraint", "account", "map_count", "additional_parameters", "srun_args",
      "array_parallelism", "comment"]),
    ("submitit.slurm.slurm", "SlurmExecutor._make_submission_file_text", ["self", "command", "uid"]),
    ("submitit.slurm.slurm", "SlurmExecutor._num_tasks", ["self"]),
    ("submitit.slurm.slurm", "SlurmExecutor._get_job_id_from_submission_command", ["string"]),
    ("submitit.core.core", "PicklingExecutor._submit_command", ["self", "command"]),
    ("submitit.core.utils", "JobPaths.get_first_id_independent_folder", ["folder"]),
    ("submitit.core.utils", "JobPaths.move_temporary_file", ["self", "tmp_path", "name", "keep_as_symlink"]),
    ("submitit.core.utils", "DelayedSubmission.set_timeout", ["self", "timeout_min", "max_num_timeout"]),
    # trainers/rendezvous.py: SLURM_JOB_NODELIST expanded where scontrol is missing
    ("submitit.slurm.slurm", "_parse_node_list", ["node_list"]),
])
def test_submitits_private_methods_are_where_campaign_calls_them(module, name, params):
    import importlib

    owner = importlib.import_module(module)
    for part in name.split("."):
        owner = getattr(owner, part, None)
        assert owner is not None, f"submitit moved {module}.{name}: campaign/backends/{{slurm,sbatch}}.py call it"
    missing = [p for p in params if p not in _params(owner)]
    assert not missing, f"submitit's {module}.{name} lost parameter(s) {missing}"


def test_submitits_command_string_is_what_campaign_renders(tmp_path):
    from submitit.slurm.slurm import SlurmExecutor

    from campaign.backends.sbatch import submit_command

    ex = SlurmExecutor(tmp_path, python="python3")
    assert ex._submitit_command_str == submit_command(tmp_path, "python3")


def test_no_hydra_or_omegaconf_internals_in_campaign():
    used = []
    for path in [*ROOT.glob("campaign/**/*.py"), *ROOT.glob("hydra_plugins/**/*.py")]:
        text = path.read_text()
        for pattern in (r"hydra\._internal", r"omegaconf\._", r"\._get_node\(", r"\._set_value\(", r"\._value\(\)"):
            if re.search(pattern, text):
                used.append(f"{path.relative_to(ROOT)}: {pattern}")
    assert not used, used
