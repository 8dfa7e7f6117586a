"""One exception tree for everything campaign reports to a user.

Every message says what is wrong, where, and how to fix it, on one line: the CLI
prints ``error: <message>`` and exits with status 2 (``EXIT_USAGE``).
"""

EXIT_USAGE = 2


class CampaignError(Exception):
    """Base of every error campaign reports to a user as one line."""


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


def one_line(text: str) -> str:
    """Collapse a multi-line message (e.g. a scheduler's stderr) onto one line."""
    return " ".join(part.strip() for part in str(text).splitlines() if part.strip())
