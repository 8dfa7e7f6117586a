"""``python -m campaign.launch [-m] [overrides...]``: the Hydra app.

With ``-m`` the campaign launcher plugin composes every point, validates them all,
registers the campaign, submits the jobs and returns. Without ``-m`` one point
runs in the foreground and its result is printed.
"""

from __future__ import annotations

import os
import sys

from campaign.config import register
from campaign.errors import CampaignError, ConfigError


def _hydra_error(exc: BaseException) -> ConfigError:
    """One actionable line from Hydra's and OmegaConf's multi-line errors."""
    from hydra.errors import MissingConfigException

    from campaign.errors import one_line

    if isinstance(exc, MissingConfigException) and exc.missing_cfg_file and "/" in str(exc.missing_cfg_file):
        group, _, choice = str(exc.missing_cfg_file).rpartition("/")
        options = ", ".join(sorted(exc.options or [])) or "none found"
        return ConfigError(f"unknown {group} '{choice}'; available: {options}")
    text = str(exc)
    cause = exc.__cause__
    if text.startswith("Error merging override") and cause is not None:
        override = text.rsplit(" ", 1)[-1]
        return ConfigError(f"{override}: {one_line(str(cause).splitlines()[0])}")
    if "Key '" in text and "not in" in text:  # a key the schema does not have
        first = text.splitlines()[0]
        return ConfigError(f"{first}; see campaign/config.py for the valid fields")
    return ConfigError(one_line(text) or type(exc).__name__)


def main() -> None:
    # Hydra prints its own multi-line report and exits 1 unless this is set; we
    # want the exception, to turn it into one line and exit 2.
    os.environ["HYDRA_FULL_ERROR"] = "1"
    register()
    import hydra
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from campaign.cli import fail
    from campaign.launch.single import run_single

    app = hydra.main(version_base="1.3", config_path="pkg://campaign_conf", config_name="config")(run_single)
    try:
        app()
    except CampaignError as exc:
        fail(exc)
    except (HydraException, OmegaConfBaseException) as exc:
        fail(_hydra_error(exc))
    except BrokenPipeError:
        from campaign.cli import quiet_broken_pipe

        quiet_broken_pipe()


if __name__ == "__main__":
    sys.argv[0] = "campaign.launch"
    main()
