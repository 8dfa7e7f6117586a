"""The rooms of the house, one way: conf -> launch -> backends -> (job) -> store ->
status/harvest. Asserted on the code itself: importing any ``campaign`` module never
imports torch nor a trainer's implementation (only the torch-free declarations), the
packages of the launch path import each other without a cycle, no two ``campaign``
modules import each other (lazy imports included), and the read paths (status, state,
harvest) never import the write paths (ingest, cancel, launch): the job folder's layout
they share is one leaf module, campaign.common.jobfolder."""

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
    "campaign.catalogue.config": "config",
    "campaign.backends": "backends",
    "campaign.store": "store",
    "campaign.observe.status": "status",
    "campaign.common.redact": "redact",
    "campaign.common.errors": "errors",
    "campaign.catalogue.container": "container",
    "campaign.cli.completion": "completion",
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
        # a __main__ module is a program's entry (python -m campaign.launch enters the CLI):
        # nothing imports it, so its imports close no cycle
        if src is None or path.name == "__main__.py":
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
    assert "plugin" not in graph["config"], "campaign/catalogue/config.py imports the Hydra plugin"
    assert "launch" not in graph["config"] and "launch" not in graph["backends"]
    assert "launch" in graph["plugin"] and "backends" in graph["launch"]
    assert not {"launch", "backends", "store", "status", "cli", "plugin"} & graph["declarations"], \
        "the trainers' declarations import nothing of campaign"
    assert not [n for n, imported in graph.items() if "cli" in imported], "only the CLI imports the CLI"


def test_only_the_cli_package_exits():
    """Library code raises; campaign/cli maps errors to exit statuses and alone calls sys.exit."""
    found = [f"{path.relative_to(ROOT)}:{i}" for path in [*ROOT.glob("campaign/**/*.py"), *ROOT.glob("hydra_plugins/**/*.py")]
             for i, line in enumerate(path.read_text().splitlines(), 1) if "sys.exit" in line]
    assert found and not [f for f in found if not f.startswith("campaign/cli/")], found


# The neutral packages both sides share: the store's schema and writer operations, the
# profiler-trace reader, the datasets' on-disk layouts, the sampled window's statistics,
# the one door for files in shared folders. Nothing else of the host side.
SHARED = ("campaign_sql", "campaign_trace", "campaign_datasets", "campaign_window", "campaign_door")


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


# ------------------------------------------------------------------ the module graph

# Every campaign module -> the campaign modules it imports, at the top or inside a
# function (a lazy import is still a dependency), or names in a registry
# (``"campaign.backends.local:LocalBackend"``, imported by name when used).
READ_PATHS = ("campaign.observe.state", "campaign.observe.status", "campaign.observe.progress", "campaign.harvest",
              "campaign.report")
WRITE_PATHS = ("campaign.observe.ingest", "campaign.observe.cancel", "campaign.launch")
LEAF = "campaign.common.jobfolder"  # the job folder's layout: the standard library and these only
LEAF_IMPORTS = {"campaign.common.ids", "campaign.common.errors"}


def _campaign_files() -> dict[str, Path]:
    return {_module_of(path): path for path in ROOT.glob("campaign/**/*.py") if path.stem != "__main__"}


def _module_graph() -> dict[str, set[str]]:
    files = _campaign_files()

    def resolve(name: str) -> str | None:  # the longest module prefix: ``from a.b import c`` is a.b.c or a.b
        while name and name not in files:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for module, path in files.items():
        edges = set()
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                assert node.level == 0, f"{path.relative_to(ROOT)}: a relative import"
                names = [f"{node.module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and "." in node.value:
                name = node.value.split(":")[0]  # a registry's "module:attribute"
                names = [name] if name in files else []
            edges.update(r for r in map(resolve, names) if r)
        graph[module] = edges - {module}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected set of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            scc = []
            while True:
                w = stack.pop()
                scc.append(w)
                if w == v:
                    break
            if len(scc) > 1:
                found.append(sorted(scc))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def _reach(graph: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for m in graph.get(todo.pop(), ()):
            if m not in seen:
                seen.add(m)
                todo.append(m)
    return seen


def _under(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def test_the_module_graph_sees_lazy_imports_and_registries():
    graph = _module_graph()
    assert "campaign.observe.state" in graph["campaign.harvest.completed"]  # a function-level import
    assert "campaign.backends.local" in graph["campaign.backends"]  # the executors' registry


def test_no_campaign_module_imports_another_that_imports_it_back():
    cycles = _cycles(_module_graph())
    assert not cycles, "import cycles (lazy imports included): " + "; ".join(" <-> ".join(c) for c in cycles)


def test_the_read_paths_never_import_a_write_path():
    graph = _module_graph()
    offenders = {m: sorted(w for w in _reach(graph, m) if _under(w, WRITE_PATHS))
                 for m in graph if _under(m, READ_PATHS)}
    assert not {m: w for m, w in offenders.items() if w}


def test_the_job_folder_layout_is_a_leaf():
    graph = _module_graph()
    assert _reach(graph, LEAF) <= LEAF_IMPORTS, sorted(_reach(graph, LEAF) - LEAF_IMPORTS)
    users = {m for m, edges in graph.items() if LEAF in edges}
    assert {"campaign.observe.state", "campaign.observe.ingest", "campaign.observe.status", "campaign.backends.joblogs"} <= users


def test_importing_a_harvest_module_or_the_state_leaves_ingest_unimported():
    modules = [m for m in _campaign_modules() if _under(m, ("campaign.harvest",))] + ["campaign.observe.state",
                                                                                       "campaign.observe.status"]
    code = ("import importlib, sys\n"
            f"for name in {modules!r}:\n"
            "    importlib.import_module(name)\n"
            "    if 'campaign.observe.ingest' in sys.modules:\n"
            "        print(name)\n"
            "        break\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout == "", f"importing {out.stdout.strip()} imports campaign.observe.ingest"
