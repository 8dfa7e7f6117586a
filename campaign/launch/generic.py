"""``hydra/launcher=campaign`` for any Hydra app that is not a campaign.

Each point of the sweep is composed here first (a point that does not compose refuses
the whole sweep before any job starts), then runs the app's own task function in a
submitit job, with Hydra's ``run_job`` semantics (output folder ``hydra.sweep.dir/
hydra.sweep.subdir``, ``hydra.job.num``/``id``, logging, ``.hydra/`` files, callbacks),
through the backend ``hydra.launcher.executor`` names (``Backend.submit_callables``:
this machine's processes, or one SLURM job array with resources from
``hydra.launcher.*``, sbatch through campaign's SLURM backend: scrubbed environment,
retries). With ``wait`` the launch returns each point's own ``JobReturn``
(a job that died before returning one gives FAILED with its error); without, UNKNOWN
ones, one per submitted point.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Sequence

from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn, JobStatus, filter_overrides, run_job, setup_globals
from omegaconf import OmegaConf, open_dict

from campaign.backends import executors, get_backend
from campaign.backends.resources import Resources
from campaign.common.errors import ConfigError, one_line
from campaign.common.untrusted import make_job_folder

log = logging.getLogger(__name__)


class HydraJob:
    """What each job runs: one point of the app, as Hydra's own launchers run it."""

    def __init__(self, hydra_context: Any, config: Any, task_function: Any):
        self.hydra_context = hydra_context
        self.config = config
        self.task_function = task_function

    def __call__(self, overrides: list[str], job_num: int, singleton_state: dict) -> JobReturn:
        import submitit

        Singleton.set_state(singleton_state)  # the launcher's resolvers and config store
        setup_globals()
        sweep_config = self.hydra_context.config_loader.load_sweep_config(self.config, list(overrides))
        with open_dict(sweep_config.hydra.job) as job:
            job.id = submitit.JobEnvironment().job_id
            job.num = job_num
        return run_job(hydra_context=self.hydra_context, task_function=self.task_function, config=sweep_config,
                       job_dir_key="hydra.sweep.dir", job_subdir_key="hydra.sweep.subdir")


def resources_of(launcher: Any) -> Resources:
    """The jobs' resources from ``hydra.launcher.*``, checked."""
    try:
        return Resources(nodes=int(launcher.nodes), tasks_per_node=int(launcher.tasks_per_node),
                         gpus_per_node=int(launcher.gpus_per_node), cpus_per_task=int(launcher.cpus_per_task),
                         timeout_min=int(launcher.timeout_min), partition=launcher.partition,
                         constraint=launcher.constraint, account=launcher.account, qos=launcher.qos,
                         mem_gb=launcher.mem_gb, extra_sbatch=tuple(launcher.extra_sbatch or ()))
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"hydra.launcher: {exc}") from None


def launch_app(launcher: Any, job_overrides: Sequence[Sequence[str]], initial_job_idx: int, *,
               wait: bool) -> list[JobReturn]:
    """Run the app's points as jobs; see the module docstring."""
    executor = str(launcher.executor)
    try:
        backend = get_backend(executor)
    except ValueError:
        available = ", ".join(executors())
        raise ConfigError(f"unknown hydra.launcher.executor '{executor}'; available: {available}") from None
    config, loader = launcher.config, launcher.hydra_context.config_loader
    resources = resources_of(launcher)
    sweep_dir = Path(str(config.hydra.sweep.dir))
    sweep_dir.mkdir(parents=True, exist_ok=True)
    if "mode" in config.hydra.sweep:  # the sweep folder's permissions, as Hydra's launchers honour them
        sweep_dir.chmod(int(str(config.hydra.sweep.mode), 8))
    # Every point composes before any job starts (one that does not refuses the sweep).
    configs = [loader.load_sweep_config(config, list(o)) for o in job_overrides]
    log.info(f"campaign launcher ({executor}): {len(job_overrides)} job(s), sweep folder {sweep_dir}")
    entry = HydraJob(launcher.hydra_context, config, launcher.task_function)
    state = Singleton.get_state()
    calls = []
    for i, overrides in enumerate(job_overrides):
        log.info(f"\t#{initial_job_idx + i} : {' '.join(filter_overrides(overrides))}")
        calls.append((list(overrides), initial_job_idx + i, state))
    folder = Path(str(launcher.folder or sweep_dir / ".campaign"))
    make_job_folder(folder, fresh=False)  # a rerun's own private folder is used again; anyone else's is refused
    jobs = backend.submit_callables([_Bound(entry, call) for call in calls], folder, resources,
                                    str(config.hydra.job.name))
    returns = []
    for cfg, overrides, job in zip(configs, job_overrides, jobs):
        returns.append(_return(cfg, list(overrides), job, wait))
    return returns


class _Bound:
    """``entry(*call)`` as a picklable no-argument callable (one job, or one array task, each)."""

    def __init__(self, entry: HydraJob, call: tuple):
        self.entry, self.call = entry, call

    def __call__(self) -> JobReturn:
        return self.entry(*self.call)


def _return(cfg: Any, overrides: list[str], outcome: tuple, wait: bool) -> JobReturn:
    job, error = outcome
    task_cfg = OmegaConf.masked_copy(cfg, [k for k in cfg if k != "hydra"])
    ret = JobReturn(overrides=overrides, cfg=task_cfg, hydra_cfg=OmegaConf.create({"hydra": cfg.hydra}),
                    task_name=str(cfg.hydra.job.name))
    if job is None:
        ret.status = JobStatus.FAILED
        ret.return_value = ConfigError(f"job not submitted: {one_line(error)}")
        return ret
    if not wait:
        return ret  # status UNKNOWN: submitted, its result not known yet
    try:
        got = job.results()[0]
    except Exception as exc:  # the job died before run_job could return (killed, unpicklable task, ...)
        ret.status = JobStatus.FAILED
        ret.return_value = exc
        return ret
    return got if isinstance(got, JobReturn) else ret

