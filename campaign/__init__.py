"""campaign: scaling studies of deep-learning training on HPC clusters.

The host side (this package) plans, submits, tracks and harvests; it never imports
torch. The job side lives in ``trainers``.
"""

__version__ = "0.1.0"
