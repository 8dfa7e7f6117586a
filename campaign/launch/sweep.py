"""What campaign's sweeper does around the launch: keep Hydra's record of the sweep
(``multirun.yaml``, secrets redacted) and turn the points that were not submitted or
failed into one ``LaunchIncomplete`` (exit status 3)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from omegaconf import OmegaConf

from campaign.common.errors import LaunchIncomplete
from campaign.common.redact import redact_obj


def save_multirun_yaml(config: Any, path: Path) -> None:
    """Hydra's ``multirun.yaml`` (the sweep's config, as its basic sweeper saves it) with
    every password replaced by ``***``."""
    from campaign.launch.preflight import check_writable_folder

    # one line (exit 2) before anything is stored, not Hydra's OSError traceback
    check_writable_folder(path.parent, "results_dir's Hydra record folder")
    plain = OmegaConf.to_container(config, resolve=False, enum_to_str=True)
    OmegaConf.save(OmegaConf.create(redact_obj(plain)), path)


def check_returns(launcher: Any, returns: Sequence[Any]) -> None:
    """Raise ``LaunchIncomplete`` when a point was not submitted or failed (a campaign's
    message names them and the retry; another app's, their overrides)."""
    from hydra.core.utils import JobStatus

    from campaign.launch.run import check_outcome

    result = getattr(launcher, "last_launch", None)
    if result is not None:
        check_outcome(result)
        return
    failed = [r for r in returns if r.status == JobStatus.FAILED]
    if failed:
        named = "; ".join(" ".join(r.overrides or []) or "(defaults)" for r in failed[:3])
        more = f"; and {len(failed) - 3} more" if len(failed) > 3 else ""
        # jobs that never went (campaign/launch/generic.py's "job not submitted: ..."): no
        # logs to point at; their one reason says what to do (a full controller: launch again)
        reasons = {str(getattr(r, "_return_value", "")) for r in failed}
        if len(reasons) == 1 and (reason := reasons.pop()).startswith("job not submitted: "):
            raise LaunchIncomplete(f"{len(failed)} of {len(returns)} job(s) failed ({named}{more}): {reason}")
        raise LaunchIncomplete(f"{len(failed)} of {len(returns)} job(s) failed ({named}{more}); "
                               "their logs are in the sweep folder's .campaign/")
