"""The rooms of the house, one way: conf -> launch -> backends -> (job) -> store ->
status/harvest. Asserted on the code itself: importing any ``campaign`` module never
imports torch nor a trainer's implementation (only the torch-free declarations), and
the packages of the launch path import each other without a cycle."""

from __future__ import annotations

import ast
import pkgutil
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import campaign

ROOT = Path(__file__).resolve().parents[1]
# What `campaign` may import from the job-side package: the declarations, not the trainers.
TRAINER_DECLARATIONS = ("trainers", "trainers.spec", "trainers.registry", "trainers.specs")


def _campaign_modules() -> list[str]:
    return sorted(m.name for m in pkgutil.walk_packages(campaign.__path__, "campaign.")
                  if not m.name.endswith("__main__"))


def test_no_campaign_module_imports_torch_or_a_trainer_implementation():
    code = (
        "import importlib, sys\n"
        f"for name in {_campaign_modules()!r}:\n"
        "    importlib.import_module(name)\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'torchvision', 'timm', 'mmseg', "
        "'mmengine', 'mmcv', 'deepspeed'))\n"
        f"ours = sorted(m for m in sys.modules if m.split('.')[0] == 'trainers' and m not in {TRAINER_DECLARATIONS!r} "
        "and not m.startswith('trainers.specs.'))\n"
        "print(heavy, ours)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[] []", out.stdout


def test_the_cli_and_the_plugin_start_without_the_job_side():
    code = ("import sys, campaign.cli, campaign.launch.main, hydra_plugins.campaign_launcher.campaign_launcher, "
            "hydra_plugins.campaign_launcher.campaign_sweeper\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'trainers', 'polars', 'campaign')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    loaded = eval(out.stdout)  # a printed list of module names
    assert not [m for m in loaded if m.split(".")[0] in ("torch", "trainers", "polars")]
    # the plugin modules stay light: Hydra's scan imports them for every Hydra app on the machine
    assert "campaign.launch.launcher" not in loaded and "campaign.store" not in loaded


# ------------------------------------------------------------------ the static graph

# Packages of the launch path (module prefix -> node); an import of a module under a
# prefix is an edge to its node, lazy (function-level) imports included.
NODES = {
    "hydra_plugins.campaign_launcher": "plugin",
    "campaign.launch": "launch",
    "campaign.config": "config",
    "campaign.backends": "backends",
    "campaign.store": "store",
    "campaign.status": "status",
    "campaign.redact": "redact",
    "campaign.errors": "errors",
    "campaign.container": "container",
    "campaign.completion": "completion",
    "campaign.cli": "cli",
    "trainers.spec": "declarations",
    "trainers.registry": "declarations",
    "trainers.specs": "declarations",
}


def _node(module: str) -> str | None:
    best = max((p for p in NODES if module == p or module.startswith(p + ".")), key=len, default=None)
    return NODES.get(best) if best else None


def _module_of(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names)
    return found


def _graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = defaultdict(set)
    files = [*ROOT.glob("campaign/**/*.py"), *ROOT.glob("hydra_plugins/**/*.py"), ROOT / "trainers" / "spec.py",
             ROOT / "trainers" / "registry.py", *ROOT.glob("trainers/specs/*.py")]
    for path in files:
        src = _node(_module_of(path))
        if src is None:
            continue
        for imported in _imports(path):
            dst = _node(imported)
            if dst is not None and dst != src:
                graph[src].add(dst)
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(n: str) -> list[str] | None:
        state[n] = 1
        stack.append(n)
        for m in sorted(graph.get(n, ())):
            if state.get(m) == 1:
                return stack[stack.index(m):] + [m]
            if m not in state and (found := visit(m)):
                return found
        stack.pop()
        state[n] = 2
        return None

    for n in sorted(graph):
        if n not in state and (found := visit(n)):
            return found
    return None


def test_the_launch_path_has_no_import_cycle():
    graph = _graph()
    assert _cycle(graph) is None, " -> ".join(_cycle(graph) or [])


def test_the_rooms_are_one_way():
    graph = _graph()
    assert "plugin" not in graph["config"], "campaign/config.py imports the Hydra plugin"
    assert "launch" not in graph["config"] and "launch" not in graph["backends"]
    assert "launch" in graph["plugin"] and "backends" in graph["launch"]
    assert not {"launch", "backends", "store", "status", "cli", "plugin"} & graph["declarations"], \
        "the trainers' declarations import nothing of campaign"


# The neutral packages both sides share: the store's schema and writer operations, the
# profiler-trace reader, the datasets' on-disk layouts, the sampled window's statistics.
# Nothing else of the host side.
SHARED = ("campaign_sql", "campaign_trace", "campaign_datasets", "campaign_window")


def test_the_job_side_imports_nothing_of_the_host_side():
    """trainers/ (the job side, with torch) depend on nothing of ``campaign`` but the
    neutral shared packages; host and job meet only in the store and those packages."""
    offenders = []
    for path in sorted(ROOT.glob("trainers/**/*.py")):
        for imported in _imports(path):
            top = imported.split(".")[0]
            if top == "campaign" or (top.startswith("campaign_") and top not in SHARED + ("campaign_conf",)):
                offenders.append(f"{path.relative_to(ROOT)}: {imported}")
    assert not offenders, "; ".join(sorted(set(offenders)))


FOLDER = {"campaign_sql": "sql"}  # pyproject.toml's package-dir: the package's folder when it is not its name


def test_the_shared_packages_import_neither_side():
    for pkg in SHARED:
        folder = ROOT / FOLDER.get(pkg, pkg)
        assert (folder / "__init__.py").is_file(), f"{pkg}: no package at {folder}"
        for path in sorted(folder.rglob("*.py")):
            tops = {i.split(".")[0] for i in _imports(path)}
            assert not tops & {"campaign", "trainers", "torch"}, f"{path.relative_to(ROOT)} imports {tops}"
