"""``python -m campaign``: the same as the ``campaign`` command (campaign/cli)."""

from campaign.cli import exit_with, main

if __name__ == "__main__":
    exit_with(main())
