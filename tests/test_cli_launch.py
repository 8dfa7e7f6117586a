"""The front door: ``campaign launch`` is ``python -m campaign.launch``; ``campaign --version``;
``campaign completion bash|zsh`` prints a script that completes the subcommands, their
options and the launch's config groups."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from campaign import __version__
from conftest import TINY

SUBCOMMANDS = ("launch", "status", "harvest", "cancel", "ingest", "completion")


def test_version(ws):
    res = ws.campaign("--version")
    assert res.returncode == 0 and res.stdout.strip() == f"campaign {__version__}"


def test_campaign_launch_is_python_m_campaign_launch(ws):
    args = ["-m", "gpus=1,2", "dry_run=true", *TINY]
    front = ws.campaign("launch", *args)
    module = ws.launch(*args)
    assert front.returncode == module.returncode == 0, front.stderr + module.stderr
    assert front.stdout == module.stdout and "dry run: 2 point(s) in 2 local job(s)" in front.stdout


def test_campaign_launch_refusals_and_help(ws):
    res = ws.campaign("launch", "platform=nosuch")
    assert res.returncode == 2 and res.stderr.startswith("error: unknown platform 'nosuch'")
    helped = ws.campaign("launch", "--help")
    assert helped.returncode == 0 and "examples:" in helped.stdout and "campaign launch -m" in helped.stdout
    listed = ws.campaign("--help")
    for name in SUBCOMMANDS:
        assert f"    {name}" in listed.stdout


@pytest.mark.parametrize("shell", ["bash", "zsh"])
def test_completion_script_names_every_subcommand(ws, shell):
    res = ws.campaign("completion", shell)
    assert res.returncode == 0, res.stderr
    for name in SUBCOMMANDS:
        assert name in res.stdout
    for word in ("platform=v100", "trainer=synthetic", "--store", "--wait", "--json", "hydra.launcher.wait=true"):
        assert word in res.stdout
    checker = shutil.which(shell)
    if checker:
        syntax = subprocess.run([checker, "-n"], input=res.stdout, capture_output=True, text=True)
        assert syntax.returncode == 0, syntax.stderr


def test_completion_of_an_unknown_shell_is_one_line(ws):
    res = ws.campaign("completion", "fish")
    assert res.returncode == 2 and res.stderr.startswith("error: argument shell: invalid choice: 'fish'")


def _complete(script: str, line: str) -> list[str]:
    """Run the bash completion function on ``line`` (cursor at its end) and return COMPREPLY."""
    words = line.split(" ")
    code = (script + f"\nCOMP_LINE={line!r}; COMP_POINT={len(line)}; COMP_WORDS=({' '.join(repr(w) for w in words)}); "
            f"COMP_CWORD={len(words) - 1}; _campaign; printf '%s\\n' \"${{COMPREPLY[@]}}\"\n")
    out = subprocess.run(["bash", "-c", code], capture_output=True, text=True, check=True)
    return [w for w in out.stdout.splitlines() if w]


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash")
def test_bash_completion_completes_commands_options_and_group_options():
    from campaign.cli import build_parser
    from campaign.cli.completion import completion_script

    script = completion_script("bash", build_parser())
    assert _complete(script, "campaign la") == ["launch"]
    assert _complete(script, "campaign status --w") == ["--wait", "--watch"]
    # bash splits words at '=': the reply is the part after it
    assert _complete(script, "campaign launch platform=a100_nv") == ["a100_nvlink_40", "a100_nvlink_80"]
    assert "--retry" in _complete(script, "campaign launch --")
    assert _complete(script, "campaign completion z") == ["zsh"]


def test_completion_reads_the_clis_own_parser():
    """The script is built from argparse's subparsers (tests fail here if that stops working)."""
    from campaign.cli import build_parser
    from campaign.cli.completion import _subcommands

    found = _subcommands(build_parser())
    assert set(SUBCOMMANDS) <= set(found) and "--store" in found["status"]
    assert sys.modules["campaign.cli"]


# ------------------------------------------------------------------ the one error mapper

@pytest.mark.parametrize("error,code", [("ConfigError", 2), ("StoreError", 2), ("LaunchIncomplete", 3),
                                        ("PointFailed", 3), ("Interrupted", 130)])
def test_each_error_exits_with_its_own_code_on_one_line(capsys, error, code):
    import campaign.common.errors as errors
    from campaign.cli.exits import guarded

    def command():
        raise getattr(errors, error)("what went wrong\nand where")

    assert guarded(command) == code
    assert capsys.readouterr().err == "error: what went wrong\\nand where\n"


def test_a_file_or_database_error_is_one_line_only_for_a_command_with_a_store(capsys):
    from campaign.cli.exits import guarded

    def command():
        raise PermissionError(13, "Permission denied", "/results/campaign.db")

    assert guarded(command, store_url="sqlite:///results/campaign.db") == 2
    assert capsys.readouterr().err == "error: /results/campaign.db: Permission denied\n"
    with pytest.raises(PermissionError):  # elsewhere a bug: its traceback is what to report
        guarded(command)


def test_ctrl_c_and_a_closed_pipe(capsys):
    from campaign.cli.exits import guarded
    from campaign.cli.launch import LAUNCH_INTERRUPTED

    def interrupted():
        raise KeyboardInterrupt

    assert guarded(interrupted) == 130 and capsys.readouterr().err == "interrupted (Ctrl-C)\n"
    assert guarded(interrupted, interrupted_message=LAUNCH_INTERRUPTED) == 130
    assert capsys.readouterr().err == "error: interrupted; nothing more was submitted\n"
    assert guarded(lambda: None) == 0 and guarded(lambda: 124) == 124


def test_launch_resume_and_retry_refusals_exit_through_the_cli(ws):
    """``launch --max-retries`` (campaign's flag), ``resume`` and ``launch --retry`` refuse as the CLI does."""
    res = ws.launch("--max-retries", "x")
    assert res.returncode == 2 and res.stderr == "error: --max-retries takes a whole number of retries (>= 0), got 'x'\n"
    res = ws.campaign("resume", "a", "b")
    assert res.returncode == 2 and res.stderr == "error: one campaign at a time, got a, b; overrides are KEY=VALUE\n"
    res = ws.campaign("launch", "--retry", "--bogus")
    assert res.returncode == 2 and res.stderr.splitlines() == [
        "note: campaign launch --retry is campaign resume --state rejected,lost,waiting (campaign resume reruns every "
        "point that did not complete)", "error: unrecognized arguments: --bogus; see campaign resume --help"]
