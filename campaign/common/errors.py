"""One exception tree for everything campaign reports to a user.

Every message says what is wrong, where, and how to fix it, on one line: the CLI
prints ``error: <message>`` and exits with the error's ``exit_code``. Library code
raises; only the CLI (``campaign.cli``) exits.

Exit codes of a launch (README, "Exit codes"):

====  =========================================================================
0     every point submitted (foreground, or ``hydra.launcher.wait=true``: completed)
2     refused before anything was stored (bad input, a point that cannot run)
3     stored, but some points were not submitted or failed (named, with the retry)
130   interrupted (Ctrl-C)
====  =========================================================================
"""

EXIT_OK = 0
EXIT_NOTHING = 1  # a read found nothing of what it was asked: harvest or plan with nothing completed, status --wait with a point that did not complete, ingest that quarantined a spool file
EXIT_USAGE = 2  # refused: bad input or an impossible action; nothing stored or changed
EXIT_INCOMPLETE = 3  # stored, but some points were not submitted or did not complete
EXIT_INTERRUPTED = 130  # Ctrl-C (128 + SIGINT), as shells report it
EXIT_TIMEOUT = 124  # campaign status --wait --timeout ran out with points unfinished (as timeout(1) exits)


class CampaignError(Exception):
    """Base of every error campaign reports to a user as one line."""

    exit_code = EXIT_USAGE


class ConfigError(CampaignError):
    """A sweep point, override or config value is invalid."""


class InfeasiblePoint(ConfigError):
    """A valid point that its platform cannot hold (too many GPUs for a node, ...).

    In a sweep that also has points that fit, such points are left out with their
    reason and the rest is submitted; a launch where nothing fits is refused.
    """


class StoreError(CampaignError):
    """The results store cannot be opened, read or written."""


class SchemaVersionError(StoreError):
    """The results store was written with another schema version."""


class SubmitError(CampaignError):
    """A job could not be handed to the scheduler."""


class SchedulerError(CampaignError):
    """The scheduler could not be queried or commanded."""


class NotFoundError(CampaignError):
    """A campaign or point named by the user does not exist."""


class PointFailed(CampaignError):
    """One point that was not submitted, or whose job failed: the exception a launch's
    ``JobReturn`` carries for it (status FAILED)."""

    exit_code = EXIT_INCOMPLETE

    def __init__(self, message: str, *, campaign_id: str | None = None, idx: int | None = None,
                 overrides: "list[str] | None" = None, submitted: bool = False):
        super().__init__(message)
        self.campaign_id = campaign_id
        self.idx = idx
        self.overrides = list(overrides or [])
        self.submitted = submitted  # False: it never reached its scheduler


class Interrupted(CampaignError):
    """Ctrl-C during a launch, after its campaign was stored (the message says what runs on)."""

    exit_code = EXIT_INTERRUPTED


class LaunchIncomplete(CampaignError):
    """A campaign was stored, but some of its points were not submitted or failed."""

    exit_code = EXIT_INCOMPLETE


def one_line(text: str) -> str:
    """Collapse a multi-line message (e.g. a scheduler's stderr) onto one line."""
    return " ".join(part.strip() for part in str(text).splitlines() if part.strip())
