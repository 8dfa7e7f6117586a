"""``python -m campaign.launch [-m] [overrides...]``: the Hydra app.

With ``-m`` the campaign launcher plugin composes every point, validates them all,
registers the campaign, submits the jobs and returns. Without ``-m`` one point
runs in the foreground and its result is printed.
"""

from __future__ import annotations

import os
import sys

from campaign.config import register
from campaign.errors import CampaignError
from campaign.launch.hydra_errors import as_config_error


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
        fail(as_config_error(exc))
    except BrokenPipeError:
        from campaign.cli import quiet_broken_pipe

        quiet_broken_pipe()


if __name__ == "__main__":
    sys.argv[0] = "campaign.launch"
    main()
