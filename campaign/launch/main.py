"""``campaign launch [-m] [overrides...]`` (and ``python -m campaign.launch``): the Hydra app.

With ``-m`` the campaign launcher plugin composes every point, validates them all,
registers the campaign, submits the jobs and returns. Without ``-m`` one point runs
in the foreground and its status is printed. ``--retry CAMPAIGN`` submits the points
of a stored campaign that never reached their scheduler (``campaign resume`` reruns
every point that did not complete); ``--max-retries K`` is the override ``max_retries=K``.
``--dry-run``, ``--show-scripts`` and ``--json`` are ``dry_run=true|scripts|json``.

This is the launch's CLI layer: the one place that turns exceptions into a line on
stderr and an exit status (``campaign/errors.py``: 0, 2, 3, 130).
"""

from __future__ import annotations

import os
import sys
from typing import Optional, Sequence

from campaign.errors import EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, CampaignError

PROG = "campaign launch"
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


def _error(message: object) -> None:
    from campaign.text import shown

    print(f"error: {shown(message)}", file=sys.stderr)


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


def main(argv: Optional[Sequence[str]] = None, prog: str = PROG) -> int:
    """Run a launch with ``argv`` (default: this process's arguments); returns its exit status."""
    from campaign.backends.entry import private_umask

    argv = list(sys.argv[1:] if argv is None else argv)
    private_umask()  # the store, results, logs and job folders made from here on are the user's alone
    try:
        if argv[:1] == ["--retry"]:
            from campaign.launch.retry import retry_main

            return retry_main(argv[1:], prog=f"{prog} --retry")
        return _hydra_app(expand_flags(max_retries_override(argv)), prog)
    except CampaignError as exc:
        _error(exc)
        return exc.exit_code
    except KeyboardInterrupt:
        _error("interrupted; nothing more was submitted")
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # `campaign launch ... | head` closed our stdout: end quietly, as Unix tools do
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_OK


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


def _hydra_app(argv: list[str], prog: str) -> int:
    # Hydra prints its own multi-line report and exits 1 unless this is set; we want
    # the exception, to turn it into one line.
    os.environ["HYDRA_FULL_ERROR"] = "1"
    from campaign.config import register

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
        from campaign.launch.single import run_single

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
        _error(as_config_error(exc))
        return EXIT_USAGE
    finally:
        sys.argv = saved
    return EXIT_OK
