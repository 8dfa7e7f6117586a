"""The manual's reference pages, written from the code's own declarations.

Every config key's type, default and meaning come from the dataclasses behind the config
groups (campaign/catalogue/config.py, each trainer's ``params`` dataclass: one comment per
field, which is the key's meaning); every command's options from the parser ``campaign``
runs with (their ``help``); the environment from ``ENVIRONMENT`` below; the exit statuses
from campaign/common/errors.py's ``EXIT_*`` (their comments). The docs build
(scripts/docs_hooks.py) renders them as pages of the site, so the reference cannot fall
behind the code, and tests/test_reference_pages.py fails when a key or an option has no
meaning.
"""

from __future__ import annotations

import argparse
import dataclasses
import enum
import inspect
import io
import re
import textwrap
import tokenize
from dataclasses import dataclass
from typing import Any, Iterator, Optional

MISSING_MEANING = ""  # what an undeclared meaning reads as (tests/test_reference_pages.py refuses it)


@dataclass(frozen=True)
class Entry:
    """One line of a reference table: a key or option, its type, default and meaning."""

    name: str
    kind: str
    default: str
    meaning: str


# The variables campaign reads (name, who sets it, meaning). A CAMPAIGN_* name in the code
# that is not here fails tests/test_reference_pages.py.
ENVIRONMENT: tuple[tuple[str, str, str], ...] = (
    ("CAMPAIGN_RESULTS", "you", "the results folder of the default store (`<it>/campaign.db`) when no "
                                "`--store`/`CAMPAIGN_STORE` is given; a launch's `results_dir` default"),
    ("CAMPAIGN_STORE", "you", "the results store's SQLAlchemy URL, for every command (`--store` wins)"),
    ("CAMPAIGN_CONFIG_DIR", "you", "your private config folder (the signing key); default "
                                   "`$XDG_CONFIG_HOME/campaign`, else `~/.config/campaign`"),
    ("CAMPAIGN_QUERY_TIMEOUT_S", "you", "seconds any one query of a read may take (default 300); past it: one "
                                        "line, exit 2"),
    ("CAMPAIGN_JSON_MAX_MEMORY_MB", "you", "what all the stored JSON one command parses may take in memory "
                                           "(default 1024)"),
    ("CAMPAIGN_TRACE_MAX_MEMORY_MB", "you", "what one profiler trace may take in memory when read (default 1536)"),
    ("CAMPAIGN_IMAGES", "you", "the folder of the container images the reference preset runs in "
                               "(campaign-cu130.sif, campaign-cu126.sif for V100); default `<results_dir>/images`"),
    ("CAMPAIGN_LOCK_DIR", "you", "the folder of the lock local jobs take turns through (default: machine-wide)"),
    ("CAMPAIGN_SQLITE_JOURNAL", "you", "SQLite's journal mode for the store (default WAL; e.g. DELETE on a file "
                                       "system without shared memory)"),
    ("CAMPAIGN_EXT_DIR", "you", "where the C++ comm hook is built and cached (default: torch's extension folder)"),
    ("CAMPAIGN_PYTHON", "you", "the Python a local job's ranks run (default: the launch's own)"),
    ("CAMPAIGN_NO_SETUP", "you", "scripts/main-job.sh: use the environment as it is, install nothing"),
    ("CAMPAIGN_NO_BROWSER", "you", "scripts/setup.sh: do not install Chromium (its browser test then skips)"),
    ("CAMPAIGN_SETUP_AGAIN", "scripts/setup.sh", "set by setup.sh itself when it reinstalls once"),
    ("CAMPAIGN_TEST_WORKERS", "you", "scripts/run-tests.sh: pytest workers (default 3)"),
    ("CAMPAIGN_TEST_SERVICES", "you", "scripts/run-tests.sh: 0 starts no SLURM or PostgreSQL (their tests skip)"),
    ("CAMPAIGN_TEST_BASETEMP", "you", "scripts/run-tests.sh: the tests' folders (default: in /dev/shm when it has room)"),
    ("CAMPAIGN_TEST_CPU_LOG", "you", "scripts/cpulog: each Python process of a test run logs its CPU to this file"),
    ("CAMPAIGN_TEST_FORK", "you", "tests/forkserver.py: 0 runs every campaign command of the suite as a new interpreter"),
    ("CAMPAIGN_STORE_URL", "the launch", "a job's store URL, password included (never on a command line)"),
    ("CAMPAIGN_ID", "the launch", "a job's campaign id"),
    ("CAMPAIGN_ID_FORM", "the launch", "the campaign id form a job checks its folder against"),
    ("CAMPAIGN_JOB_FOLDER", "the launch", "a job's own folder (logs, pickles, spool)"),
    ("CAMPAIGN_SPOOL_DIR", "the launch", "where a job writes rows the store could not take (campaign ingest)"),
    ("CAMPAIGN_MASTER_ADDR", "the launch", "the rendezvous host of a multi-node job"),
    ("CAMPAIGN_METRICS", "the launch", "which per-rank figures a job records"),
    ("CAMPAIGN_INJECT_AWAIT_SIGNAL_AT", "tests", "fault injection for the suite: never set it"),
    ("CAMPAIGN_INJECT_PROFILER_ERROR", "tests", "fault injection for the suite: never set it"),
)


# ---------------------------------------------------------------- config keys

def field_meanings(cls: type) -> dict[str, str]:
    """Each field of the dataclass ``cls`` -> the comment on its line (its meaning; a
    comment on the lines right above a field, when its own line has none)."""
    source = textwrap.dedent(inspect.getsource(cls))
    meanings: dict[str, str] = {}
    above: list[str] = []
    name: Optional[str] = None
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.NAME and name is None and tok.start[1] == 4 and tok.line.strip().partition(":")[0] \
                .strip().isidentifier() and ":" in tok.line:
            name = tok.string
        elif tok.type == tokenize.COMMENT:
            text = tok.string.lstrip("#").strip()
            if name is not None:
                meanings[name] = text
            elif tok.start[1] == 4:
                above.append(text)
        elif tok.type in (tokenize.NEWLINE, tokenize.NL) and tok.start[1] > 0:
            if name is not None:
                if name not in meanings and above:
                    meanings[name] = " ".join(above)
                name, above = None, []
    return {f.name: meanings.get(f.name, MISSING_MEANING) for f in dataclasses.fields(cls)}


def _type_name(kind: Any) -> str:
    text = kind if isinstance(kind, str) else getattr(kind, "__name__", str(kind))
    return re.sub(r"\btyping\.", "", str(text))


def _default(f: dataclasses.Field) -> str:
    if f.default is not dataclasses.MISSING:
        value = f.default
    elif f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
        value = f.default_factory()  # type: ignore[misc]
    else:
        return ""
    if isinstance(value, enum.Enum):
        value = value.value
    if dataclasses.is_dataclass(value):
        return ""
    if value == "???":
        return "(required)"
    return "null" if value is None else repr(value) if isinstance(value, (list, dict)) else str(value)


def dataclass_entries(cls: type, prefix: str = "") -> Iterator[Entry]:
    """Every key of the dataclass ``cls`` (nested dataclasses walked), dotted under ``prefix``."""
    hints = _hints(cls)
    meanings = field_meanings(cls)
    for f in dataclasses.fields(cls):
        kind = hints.get(f.name, f.type)
        if isinstance(kind, type) and dataclasses.is_dataclass(kind):
            yield Entry(prefix + f.name, "group", "", meanings[f.name])
            yield from dataclass_entries(kind, prefix + f.name + ".")
            continue
        yield Entry(prefix + f.name, _kind(kind), _default(f), meanings[f.name])


def _hints(cls: type) -> dict[str, Any]:
    import typing

    try:
        return typing.get_type_hints(cls)
    except Exception:  # a hint this Python cannot evaluate: the annotation's text
        return {f.name: f.type for f in dataclasses.fields(cls)}


def _kind(kind: Any) -> str:
    if isinstance(kind, type) and issubclass(kind, enum.Enum):
        return " \\| ".join(str(m.value) for m in kind)
    return _type_name(kind)


def config_entries() -> list[Entry]:
    """Every key of a campaign's config (``CampaignConfig``)."""
    from campaign.catalogue.config import CampaignConfig

    return list(dataclass_entries(CampaignConfig))


def trainer_entries() -> dict[str, tuple[str, list[Entry]]]:
    """Each built-in trainer -> (the study it serves, its ``trainer.params.*`` keys)."""
    from trainers import registry

    out = {}
    for name in registry.builtin_names():
        spec = registry.spec_of(name)
        out[name] = (spec.study, list(dataclass_entries(spec.params, "trainer.params.")))
    return out


# ---------------------------------------------------------------- commands

# launch parses its own arguments (Hydra's overrides): its options, as campaign/launch/main.py reads them
LAUNCH_OPTIONS = (
    Entry("-m, --multirun", "", "", "a sweep: every combination of comma-separated values is a point"),
    Entry("--dry-run", "", "", "print the points, their cost and checks; submit nothing (the override dry_run=true)"),
    Entry("--show-scripts", "", "", "a dry run that also prints each job's sbatch script and commands "
                                    "(dry_run=scripts)"),
    Entry("--json", "", "", "a dry run as JSON (dry_run=json)"),
    Entry("--max-retries K", "", "0", "resubmit a point that ends node_fail, preempted or boot_fail up to K times "
                                      "(the override max_retries=K)"),
    Entry("--retry [CAMPAIGN]", "", "", "campaign resume --state rejected,lost,waiting"),
    Entry("KEY=VALUE ...", "", "", "Hydra overrides: a group's option (platform=a100) or a key "
                                   "(experiment.base_iterations=600); see the configuration keys"),
)


def command_entries() -> dict[str, tuple[str, list[Entry]]]:
    """Each command -> (its one-line help, its options), in ``campaign --help``'s order."""
    from campaign.cli import build_parser
    from campaign.cli.launch import resume_parser

    top = build_parser()
    out: dict[str, tuple[str, list[Entry]]] = {"campaign": ("the command itself", _options(top))}
    for action in top._actions:  # argparse keeps its actions there: a documented attribute of the parser's API
        if not isinstance(action, argparse._SubParsersAction):
            continue
        helps = {choice.dest: choice.help or "" for choice in action._choices_actions}
        for name, parser in action.choices.items():
            if name == "launch":
                entries = list(LAUNCH_OPTIONS)
            elif name == "resume":
                entries = _options(resume_parser("campaign resume"))
            else:
                entries = _options(parser)
            out[name] = (helps.get(name, ""), entries)
    return out


def _options(parser: argparse.ArgumentParser) -> list[Entry]:
    entries = []
    for action in parser._actions:
        if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
            continue
        name = ", ".join(action.option_strings) or (action.metavar if isinstance(action.metavar, str) else action.dest)
        if action.option_strings and action.nargs != 0:
            name += f" {action.metavar or action.dest.upper()}"
        default = "" if action.default in (None, False, argparse.SUPPRESS) else str(action.default)
        meaning = (action.help or MISSING_MEANING) if action.help != argparse.SUPPRESS else "(hidden)"
        meaning = meaning.replace("%(default)s", default).replace("%%", "%")
        entries.append(Entry(name, "", default, meaning))
    return entries


# ---------------------------------------------------------------- exit statuses

def exit_entries() -> list[Entry]:
    """``EXIT_*`` of campaign/common/errors.py with their comments."""
    from campaign.common import errors

    source = inspect.getsource(errors)
    out = []
    for match in re.finditer(r"^(EXIT_[A-Z_]+) = (\d+)(?:\s*#\s*(.*))?$", source, re.M):
        out.append(Entry(match.group(1), "", match.group(2), match.group(3) or
                         ("success" if match.group(2) == "0" else MISSING_MEANING)))
    return out


# ---------------------------------------------------------------- pages

def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


GENERATED = "<!-- generated by campaign/cli/reference.py at each docs build: edit the code's declarations -->\n"


def config_page() -> str:
    rows = [(f"`{e.name}`", e.kind, f"`{e.default}`" if e.default else "", e.meaning) for e in config_entries()]
    parts = [GENERATED, "# Configuration keys\n\n",
             "Every key of a point's config: its type, default and meaning, from the dataclasses in "
             "`campaign/catalogue/config.py`. A config group's option (`conf/<group>/<name>.yaml`) picks "
             "values; an override on the launch line (`experiment.base_iterations=600`) sets one.\n\n",
             "## The campaign's keys\n\n", _table(("key", "type", "default", "meaning"), rows)]
    for trainer, (study, entries) in trainer_entries().items():
        parts += [f"\n## trainer={trainer}\n\n", f"{study}.\n\n" if study else "",
                  _table(("key", "type", "default", "meaning"),
                         [(f"`{e.name}`", e.kind, f"`{e.default}`" if e.default else "", e.meaning) for e in entries])]
    return "".join(parts)


def commands_page() -> str:
    parts = [GENERATED, "# Command options\n\n",
             "Every command and its options, as `campaign COMMAND --help` lists them. What each command does, "
             "with examples: [the commands](../commands.md).\n"]
    for name, (helptext, entries) in command_entries().items():
        title = "campaign" if name == "campaign" else f"campaign {name}"
        parts += [f"\n## {title}\n\n", f"{helptext[:1].upper() + helptext[1:]}.\n\n" if helptext else "",
                  _table(("option", "default", "meaning"), [(f"`{e.name}`", e.default, e.meaning) for e in entries])
                  if entries else "No options.\n"]
    return "".join(parts)


def environment_page() -> str:
    rows = [(f"`{name}`", who, meaning) for name, who, meaning in ENVIRONMENT]
    return "".join([GENERATED, "# Environment variables\n\n",
                    "What campaign reads from the environment. Those set by the launch reach a job's ranks; "
                    "setting them yourself does nothing useful.\n\n", _table(("variable", "set by", "meaning"), rows)])


def exit_page() -> str:
    rows = [(e.default, f"`{e.name}`", e.meaning) for e in exit_entries()]
    return "".join([GENERATED, "# Exit statuses\n\n",
                    "Every command ends with one of these (what each command's own statuses mean: "
                    "[failures and exit status](../failures.md)).\n\n", _table(("status", "name", "meaning"), rows)])


PAGES = {"reference/config.md": config_page, "reference/commands.md": commands_page,
         "reference/environment.md": environment_page, "reference/exit-status.md": exit_page}


def pages() -> dict[str, str]:
    """Each reference page's path under docs/ -> its markdown."""
    return {path: make() for path, make in PAGES.items()}
