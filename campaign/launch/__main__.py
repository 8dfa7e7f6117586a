"""``python -m campaign.launch``: the same as ``campaign launch`` (campaign/cli/launch.py)."""

from campaign.cli import exit_with
from campaign.cli.launch import launch_main

if __name__ == "__main__":
    exit_with(launch_main(prog="python -m campaign.launch"))
