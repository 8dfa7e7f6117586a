"""``campaign completion bash|zsh``: a shell completion script for ``campaign``.

Generated from the CLI's own parser (subcommands, their options, and the values of an
option that has a fixed set: ``harvest --table <TAB>`` offers the tables, ``--to`` the
formats) and from the config groups installed with campaign (``campaign launch
platform=<TAB>`` offers the platforms, ``study=<TAB>`` the study presets), so it says what
this installation has. A command that takes a campaign completes its names and ids from
the default store (``campaign completion campaigns``: ``$CAMPAIGN_STORE``, else
``$CAMPAIGN_RESULTS``/``results``; read only, nothing printed when there is none). Load it
with ``eval "$(campaign completion bash)"`` (zsh: after ``compinit``).
"""

from __future__ import annotations

import argparse
import re
import shlex
from importlib import resources

SHELLS = ("bash", "zsh")
# The commands whose first word is a campaign (id, prefix or name): completed from the store.
TAKES_CAMPAIGN = ("status", "harvest", "figures", "plan", "report", "cancel", "ingest", "resume")
# A campaign's name or id offered to the shell only when it is made of these: bash's
# ``compgen -W`` expands the words it is given ($(...), `...`, ${...}), and a shared store's
# names are whoever wrote them; a name with anything else is not offered.
SAFE_WORD = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:+@-]{0,127}")
MAX_CAMPAIGNS = 50  # the latest ones: what a completion offers
# Launch words besides the group options: the sweep flag, the retry and common keys.
LAUNCH_WORDS = ("-m", "--multirun", "--retry", "--max-retries", "--help", "--cfg", "--dry-run", "--show-scripts", "--json", "--save-plan", "gpus=",
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


def option_values(parser: argparse.ArgumentParser) -> dict[str, dict[str, list[str]]]:
    """subcommand -> {option: the values it takes} for each option with a fixed set
    (argparse ``choices``; ``harvest --to``: the registered export formats)."""
    out: dict[str, dict[str, list[str]]] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                values = {o: [str(c) for c in a.choices] for a in sub._actions if a.choices and a.option_strings
                          for o in a.option_strings}
                if name == "harvest":
                    from campaign.harvest.export import FORMATS

                    values["--to"] = list(FORMATS)
                if values:
                    out[name] = values
    return out


def launch_words() -> list[str]:
    """``group=option`` for every installed config group's option (every folder of conf/:
    the study presets too), then ``LAUNCH_WORDS``."""
    words = []
    conf = resources.files("campaign_conf")
    for folder in sorted(conf.iterdir(), key=lambda f: f.name):
        if folder.is_dir() and not folder.name.startswith(("_", ".")):
            words += sorted(f"{folder.name}={p.name[:-5]}" for p in folder.iterdir() if p.name.endswith(".yaml"))
    return words + list(LAUNCH_WORDS)


def campaign_words(store_url: str) -> list[str]:
    """The latest campaigns' ids and names in the store at ``store_url`` that are safe to hand
    a shell (``SAFE_WORD``); [] when there is no store or it cannot be read (a completion
    never says why, and never makes a store)."""
    from campaign.store import open_store

    try:
        with open_store(store_url, readonly=True) as store:
            rows = store.campaigns(limit=MAX_CAMPAIGNS)
    except Exception:  # no store here, another's shape, a locked file: nothing to offer
        return []
    words: list[str] = []
    for row in rows:
        for word in (row.get("name"), row.get("id")):
            if isinstance(word, str) and SAFE_WORD.fullmatch(word) and word not in words:
                words.append(word)
    return words


def completion_script(shell: str, parser: argparse.ArgumentParser) -> str:
    """The completion script for ``shell`` (bash or zsh)."""
    if shell not in SHELLS:
        raise ValueError(f"unknown shell {shell!r}; available: {', '.join(SHELLS)}")
    commands = _subcommands(parser)
    commands["launch"] = launch_words()
    commands["completion"] = list(SHELLS)
    top = sorted(commands) + ["--help", "--version"]
    values = option_values(parser)
    values.pop("completion", None)
    if shell == "bash":
        return _bash(top, commands, values)
    return _zsh(top, commands, values)


def _value_cases(values: dict[str, dict[str, list[str]]], indent: str, line) -> str:
    return "\n".join(line(indent, command, option, words) for command, options in sorted(values.items())
                     for option, words in sorted(options.items()))


def _bash(top: list[str], commands: dict[str, list[str]], values: dict[str, dict[str, list[str]]]) -> str:
    cases = "\n".join(f"        {shlex.quote(name)}) words={shlex.quote(' '.join(words))} ;;"
                      for name, words in sorted(commands.items()))
    value_cases = _value_cases(values, "        ", lambda i, c, o, w: f"{i}{shlex.quote(c + ' ' + o)}) "
                                                                     f"words={shlex.quote(' '.join(w))} ;;")
    takes = "|".join(TAKES_CAMPAIGN)
    return f'''# bash completion for campaign; load with: eval "$(campaign completion bash)"
_campaign() {{
    local line=${{COMP_LINE:0:$COMP_POINT}}
    local cur=${{line##* }}  # the whole word, '=' included (bash splits words at '=')
    local words
    local prev=${{COMP_WORDS[COMP_CWORD-1]}}
    if [[ $COMP_CWORD -le 1 ]]; then
        words={shlex.quote(' '.join(top))}
    else
        case "${{COMP_WORDS[1]}} $prev" in
{value_cases}
        *)
            case "${{COMP_WORDS[1]}}" in
{cases}
            *) words="" ;;
            esac
            if [[ "$cur" != -* && "$cur" != *=* && "${{COMP_WORDS[1]}}" == @({takes}) ]]; then
                words="$words $(campaign completion campaigns 2>/dev/null)"  # SAFE_WORD only: compgen expands
            fi ;;
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


def _zsh(top: list[str], commands: dict[str, list[str]], values: dict[str, dict[str, list[str]]]) -> str:
    cases = "\n".join(_zsh_case(name, words) for name, words in sorted(commands.items()))
    value_cases = _value_cases(values, "    ", lambda i, c, o, w: f"{i}{shlex.quote(c + ' ' + o)}) compadd -- "
                                                                  f"{' '.join(shlex.quote(x) for x in w)}; return ;;")
    takes = "|".join(TAKES_CAMPAIGN)
    return f'''#compdef campaign
# zsh completion for campaign; load with: eval "$(campaign completion zsh)" (after compinit)
_campaign() {{
  if (( CURRENT == 2 )); then
    compadd -- {' '.join(shlex.quote(w) for w in top)}
    return
  fi
  case "$words[2] $words[CURRENT-1]" in
{value_cases}
  esac
  case $words[2] in
{cases}
  esac
  if [[ $words[2] == ({takes}) && $PREFIX != -* && $PREFIX != *=* ]]; then
    compadd -- ${{(f)"$(campaign completion campaigns 2>/dev/null)"}}
  fi
}}
if (( $+functions[compdef] )); then compdef _campaign campaign; fi
'''
