"""``campaign completion bash|zsh``: a shell completion script for ``campaign``.

Generated from the CLI's own parser (subcommands and their options) and from the
config groups installed with campaign (``campaign launch platform=<TAB>`` offers the
platforms), so it says what this installation has. Load it with
``eval "$(campaign completion bash)"`` (zsh: after ``compinit``).
"""

from __future__ import annotations

import argparse
import shlex
from importlib import resources

SHELLS = ("bash", "zsh")
# Launch words besides the group options: the sweep flag, the retry and common keys.
LAUNCH_WORDS = ("-m", "--multirun", "--retry", "--max-retries", "--help", "--cfg", "--dry-run", "--show-scripts", "--json", "gpus=",
                "nodes=", "repeats=", "seed=", "name=", "dry_run=true", "dry_run=scripts", "dry_run=json",
                "max_gpu_hours=", "results_dir=", "store.url=", "store.heartbeat_s=", "hydra.launcher.wait=true",
                "hydra.searchpath=")


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, list[str]]:
    """subcommand -> its long and short options."""
    out: dict[str, list[str]] = {}
    # argparse has no public accessor for its subparsers; _actions has been stable since
    # Python 2.7, and tests/test_cli_launch.py fails loudly if it stops listing them.
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                out[name] = sorted({o for a in sub._actions for o in a.option_strings})
    return out


def launch_words() -> list[str]:
    """``group=option`` for every installed config group option, then ``LAUNCH_WORDS``."""
    from campaign.catalogue.config import GROUPS

    words = []
    conf = resources.files("campaign_conf")
    for group in GROUPS:
        folder = conf / group
        if folder.is_dir():
            words += sorted(f"{group}={p.name[:-5]}" for p in folder.iterdir() if p.name.endswith(".yaml"))
    return words + list(LAUNCH_WORDS)


def completion_script(shell: str, parser: argparse.ArgumentParser) -> str:
    """The completion script for ``shell`` (bash or zsh)."""
    if shell not in SHELLS:
        raise ValueError(f"unknown shell {shell!r}; available: {', '.join(SHELLS)}")
    commands = _subcommands(parser)
    commands["launch"] = launch_words()
    commands["completion"] = list(SHELLS)
    top = sorted(commands) + ["--help", "--version"]
    if shell == "bash":
        return _bash(top, commands)
    return _zsh(top, commands)


def _bash(top: list[str], commands: dict[str, list[str]]) -> str:
    cases = "\n".join(f"        {shlex.quote(name)}) words={shlex.quote(' '.join(words))} ;;"
                      for name, words in sorted(commands.items()))
    return f'''# bash completion for campaign; load with: eval "$(campaign completion bash)"
_campaign() {{
    local line=${{COMP_LINE:0:$COMP_POINT}}
    local cur=${{line##* }}  # the whole word, '=' included (bash splits words at '=')
    local words
    if [[ $COMP_CWORD -le 1 ]]; then
        words={shlex.quote(' '.join(top))}
    else
        case "${{COMP_WORDS[1]}}" in
{cases}
        *) words="" ;;
        esac
    fi
    COMPREPLY=($(compgen -W "$words" -- "$cur"))
    if [[ "$cur" == *=* && "$COMP_WORDBREAKS" == *=* ]]; then
        COMPREPLY=("${{COMPREPLY[@]#"${{cur%=*}}="}}")  # bash completes the part after the last '='
    fi
    [[ ${{#COMPREPLY[@]}} -eq 1 && "${{COMPREPLY[0]}}" == *= ]] && compopt -o nospace 2>/dev/null
    return 0
}}
complete -o default -F _campaign campaign
'''


def _zsh_case(name: str, words: list[str]) -> str:
    open_ = " ".join(shlex.quote(w) for w in words if w.endswith("="))  # key= : no space after it
    done = " ".join(shlex.quote(w) for w in words if not w.endswith("="))
    adds = [f"compadd -S '' -- {open_}" if open_ else "", f"compadd -- {done}" if done else ""]
    return f"    {shlex.quote(name)}) {'; '.join(a for a in adds if a)} ;;"


def _zsh(top: list[str], commands: dict[str, list[str]]) -> str:
    cases = "\n".join(_zsh_case(name, words) for name, words in sorted(commands.items()))
    return f'''#compdef campaign
# zsh completion for campaign; load with: eval "$(campaign completion zsh)" (after compinit)
_campaign() {{
  if (( CURRENT == 2 )); then
    compadd -- {' '.join(shlex.quote(w) for w in top)}
    return
  fi
  case $words[2] in
{cases}
  esac
}}
if (( $+functions[compdef] )); then compdef _campaign campaign; fi
'''
