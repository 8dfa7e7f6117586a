"""campaign: scaling studies of deep-learning training on HPC clusters.

The host side (this package) plans, submits, tracks and harvests; it never imports
torch. The job side lives in ``trainers``. ``campaign.__version__``: the installed
version (campaign.version), read when first asked.
"""

from typing import Any


def __getattr__(name: str) -> Any:
    if name == "__version__":
        from campaign.version import version

        return version()
    raise AttributeError(f"module 'campaign' has no attribute {name!r}")
