"""What campaign's sweeper does around the launch: keep Hydra's record of the sweep
(``multirun.yaml``, secrets redacted) and turn the points that were not submitted or
failed into one ``LaunchIncomplete`` (exit status 3)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Sequence

from omegaconf import OmegaConf

from campaign.common.errors import ConfigError, LaunchIncomplete
from campaign.common.redact import redact_obj


RECORD = "results_dir's Hydra record"
RECORD_FIX = "remove it or choose another results_dir"


def check_record(path: Path) -> None:
    """``path`` (``<results_dir>/.hydra/multirun.yaml``) can be written safely, making
    nothing: its folder is a real folder (not a symbolic link) that others cannot write
    without the sticky bit, and the record itself, if there, a regular file. A shared
    results_dir's member could plant a link there to a file of yours, which writing the
    record would overwrite: ConfigError (one line, exit 2) before anything is stored."""
    from campaign.common.outfile import refuse_not_regular
    from campaign.common.untrusted import check_shared_folder

    folder = path.parent
    if os.path.islink(folder):
        raise ConfigError(f"{RECORD} folder {folder} is a symbolic link, not a folder; {RECORD_FIX}")
    check_shared_folder(folder, f"{RECORD} folder")
    refuse_not_regular(path, RECORD, RECORD_FIX)


def save_multirun_yaml(config: Any, path: Path) -> None:
    """Hydra's ``multirun.yaml`` (the sweep's config, as its basic sweeper saves it) with
    every password replaced by ``***``, written as campaign.common.outfile writes a file
    (a new file renamed into place; never through a link, nor into a symlinked folder)."""
    from campaign.common.outfile import write_output
    from campaign.launch.preflight import check_writable_folder

    # one line (exit 2) before anything is stored, not Hydra's OSError traceback
    check_record(path)
    check_writable_folder(path.parent, f"{RECORD} folder")
    plain = OmegaConf.to_container(config, resolve=False, enum_to_str=True)
    text = OmegaConf.to_yaml(OmegaConf.create(redact_obj(plain)))
    write_output(path, text.encode("utf-8"), flag=RECORD, fix=RECORD_FIX, parent_link=False)


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
