"""``python -m campaign.launch``: the same as ``campaign launch`` (campaign/launch/main.py)."""

import sys

from campaign.launch.main import main

if __name__ == "__main__":
    sys.exit(main(prog="python -m campaign.launch"))
