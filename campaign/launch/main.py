"""The launch's Hydra app: ``launch(argv)`` runs ``campaign launch [-m] [overrides...]``
(and ``python -m campaign.launch``; their command line is campaign/cli/launch.py).

With ``-m`` the campaign launcher plugin composes every point, validates them all,
registers the campaign, submits the jobs and returns. Without ``-m`` one point runs
in the foreground and its status is printed. ``--max-retries K`` is the override
``max_retries=K``; ``--dry-run``, ``--show-scripts`` and ``--json`` are
``dry_run=true|scripts|json``; ``--save-plan FILE`` beside one of them keeps the dry run's plan
for ``campaign submit FILE`` (campaign/launch/savedplan.py).

Library code: it raises (``CampaignError``: a refusal, exit 2; ``LaunchIncomplete``:
stored but not all submitted, exit 3; ``Interrupted``: 130); the CLI reports.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Optional, Sequence

from campaign.common.errors import CampaignError, ConfigError
from campaign.launch.modes import is_off

# campaign's own flags, given as the overrides they stand for (a dry run: campaign/launch/dryrun.py)
FLAGS = {"--dry-run": "dry_run=true", "--show-scripts": "dry_run=scripts", "--json": "dry_run=json"}


def expand_flags(argv: Sequence[str]) -> list[str]:
    """``--dry-run``, ``--show-scripts`` and ``--json`` as the ``dry_run=`` override they
    stand for (the last one given wins; a ``dry_run=`` override beside one is replaced)."""
    flags = [FLAGS[a] for a in argv if a in FLAGS]
    if not flags:
        return list(argv)
    rest = [a for a in argv if a not in FLAGS and not a.startswith("dry_run=")]
    return rest + flags[-1:]


def check_plugin_visible() -> None:
    """Hydra finds ``hydra/launcher=campaign`` by scanning ``hydra_plugins``; an install that
    hides it (an editable install made before the namespace was listed) gets one line."""
    import importlib
    import pkgutil

    try:
        path = importlib.import_module("hydra_plugins").__path__
    except ImportError:
        path = []
    if not any(m.name == "campaign_launcher" for m in pkgutil.iter_modules(path)):
        raise CampaignError("Hydra cannot see campaign's launcher plugin (hydra_plugins/campaign_launcher); "
                            "reinstall campaign: bash scripts/setup.sh (or pip install -e .)")


def launch(argv: Sequence[str], prog: str) -> None:
    """Run the launch that ``argv`` (campaign's flags and Hydra's arguments) asks for, as
    ``prog``; raises ``CampaignError`` (its exit code says what was stored)."""
    from campaign.launch.savedplan import saving_to

    argv, save_to = save_plan_option(list(argv))
    argv = expand_flags(max_retries_override(argv))
    check_digit_runs(argv)
    if save_to is not None and not any(a.startswith("dry_run=") and not is_off(a.partition("=")[2])
                                       for a in argv):
        raise ConfigError(f"--save-plan {save_to} keeps a dry run's plan: add --dry-run (then submit it with "
                          f"campaign submit {save_to})")
    with saving_to(save_to):
        _hydra_app(argv, prog)


def save_plan_option(argv: list[str]) -> tuple[list[str], Optional[Path]]:
    """``--save-plan FILE`` (or ``--save-plan=FILE``) taken out of ``argv``: (the rest, FILE
    made absolute, or None). Hydra takes no option of ours."""
    out, path, i = [], None, 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--save-plan" or arg.startswith("--save-plan="):
            value = arg.partition("=")[2] if "=" in arg else (argv[i + 1] if i + 1 < len(argv) else "")
            i += 1 if "=" in arg else 2
            if not value or value.startswith("-"):
                raise ConfigError("--save-plan takes the file to write the plan to (--save-plan plan.json)")
            path = Path(value).expanduser().absolute()
            continue
        out.append(arg)
        i += 1
    return out, path


def check_digit_runs(argv: Sequence[str]) -> None:
    """Refuse an override holding a number longer than Python converts (Hydra's parser
    would raise ValueError from deep inside; anything past 19 digits is beyond 64 bits
    anyway, and the launch's own check names such a value: campaign/common/numbers.py)."""
    import re

    limit = sys.get_int_max_str_digits() if hasattr(sys, "get_int_max_str_digits") else 4300
    for arg in argv:
        m = re.search(r"\d{%d,}" % (limit + 1), arg)
        if m:
            key = arg.partition("=")[0]
            raise ConfigError(f"{key}: a number of {len(m.group()):,} digits is beyond a 64-bit integer "
                              f"(-9223372036854775808 to 9223372036854775807)")


def max_retries_override(argv: list[str]) -> list[str]:
    """``--max-retries K`` (or ``--max-retries=K``) -> the override ``max_retries=K``: Hydra
    takes no option of ours, the config key is where a point keeps its retry budget."""
    out, i = [], 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--max-retries" or arg.startswith("--max-retries="):
            value = arg.partition("=")[2] if "=" in arg else (argv[i + 1] if i + 1 < len(argv) else "")
            i += 1 if "=" in arg else 2
            if not value.isdigit():
                raise CampaignError(f"--max-retries takes a whole number of retries (>= 0), got {value!r}")
            out.append(f"max_retries={value}")
            continue
        out.append(arg)
        i += 1
    return out


def _hydra_app(argv: list[str], prog: str) -> None:
    # Hydra prints its own multi-line report and exits 1 unless this is set; we want
    # the exception, to turn it into one line.
    os.environ["HYDRA_FULL_ERROR"] = "1"
    from campaign.catalogue.config import register

    register()
    check_plugin_visible()
    import hydra
    import yaml
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from campaign.launch.hydra_errors import as_config_error

    raised: list[BaseException] = []

    def campaign_launch(cfg) -> None:
        """The foreground point (no -m); its errors are kept for the CLI to report, so
        that Hydra does not print its own 'Error executing job' line first."""
        from campaign.launch.run import run_single

        try:
            run_single(cfg)
        except BaseException as exc:  # noqa: BLE001 - re-raised below, outside Hydra
            raised.append(exc)

    app = hydra.main(version_base="1.3", config_path="pkg://campaign_conf", config_name="config")(campaign_launch)
    saved = sys.argv
    sys.argv = [prog, *argv]
    try:
        app()
        if raised:
            raise raised[0]
    except (HydraException, OmegaConfBaseException, yaml.YAMLError) as exc:
        raise as_config_error(exc) from exc
    finally:
        sys.argv = saved
