"""Installing campaign from a wheel must not break Hydra: Hydra's plugin scan imports every
module under ``hydra_plugins`` of every installed distribution, for every Hydra app on the
machine, not only campaign's.

The editable install the other tests use registers the plugin another way, so only a real
wheel in a fresh environment shows what a ``pip install git+...`` on a cluster does.
"""

from __future__ import annotations

import ast
import os
import site
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# A plain app (not a campaign) that runs its points through the campaign launcher: each
# point a submitit job on this machine, waited for (Hydra's basic sweeper reads results).
LAUNCHER_APP = """
import os
import hydra

@hydra.main(version_base=None, config_path=None)
def main(cfg):
    with open(os.path.join(os.environ["OUT_DIR"], f"point-{cfg.x}.txt"), "w") as f:
        f.write(f"ran {cfg.x}")
    return cfg.x

if __name__ == "__main__":
    main()
"""

PLAIN_APP = """
import hydra

@hydra.main(version_base=None, config_path=None)
def main(cfg):
    print("ran", dict(cfg))

if __name__ == "__main__":
    main()
"""


def test_plugin_modules_have_no_postponed_annotations():
    """``from __future__ import annotations`` makes @dataclass look its module up in
    sys.modules, where Hydra's plugin scan (exec_module without registering) has not put
    it: AttributeError on import, i.e. every Hydra app on the machine crashes."""
    for path in sorted((ROOT / "hydra_plugins").rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        futures = [a.name for node in tree.body if isinstance(node, ast.ImportFrom) and node.module == "__future__"
                   for a in node.names]
        assert "annotations" not in futures, f"{path.relative_to(ROOT)}: no postponed annotations in hydra_plugins/"


@pytest.fixture(scope="module")
def wheel_env(tmp_path_factory) -> Path:
    """A fresh venv holding campaign's wheel; its dependencies come from this
    environment's site-packages as a plain path (not a site dir, so the editable
    install's finder there is not loaded)."""
    tmp = tmp_path_factory.mktemp("wheel")
    dist = tmp / "dist"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                    "-w", str(dist), str(ROOT)], check=True, capture_output=True, timeout=300)
    (wheel,) = dist.glob("campaign-*.whl")
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    py = venv / "bin" / "python"
    purelib = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             check=True, capture_output=True, text=True).stdout.strip()
    # every site-packages this interpreter reads (a worktree's venv reaches its dependencies
    # through a .pth of its own, which a plain path entry does not process)
    deps = [p for p in sys.path if p.rstrip("/").endswith("site-packages") and Path(p).is_dir()]
    (Path(purelib) / "deps.pth").write_text("\n".join(dict.fromkeys(deps or site.getsitepackages())) + "\n")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(py), "install", "-q", "--no-deps", "--no-index",
                    str(wheel)], check=True, capture_output=True, timeout=300)
    # The wheel, not this checkout, must be what the fresh environment imports.
    where = subprocess.run([str(py), "-c", "import hydra_plugins.campaign_launcher as m; print(m.__file__)"],
                           check=True, capture_output=True, text=True, cwd=tmp).stdout
    assert str(ROOT) not in where and "site-packages" in where, where
    (tmp / "app.py").write_text(PLAIN_APP)
    (tmp / "launcher_app.py").write_text(LAUNCHER_APP)
    return tmp


@pytest.mark.slow
@pytest.mark.parametrize("args,expect", [
    (["+x=1"], ["ran {'x': 1}"]),
    (["-m", "+x=1,2"], ["ran {'x': 1}", "ran {'x': 2}"]),
], ids=["single-run", "multirun"])
def test_plain_hydra_app_runs_with_the_wheel_installed(wheel_env, args, expect):
    py = wheel_env / "venv" / "bin" / "python"
    res = subprocess.run([str(py), "app.py", *args], cwd=wheel_env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "Traceback" not in res.stderr, res.stderr
    for line in expect:
        assert line in res.stdout, res.stdout


@pytest.mark.slow
def test_an_app_that_picks_the_campaign_launcher_runs_from_the_wheel(wheel_env, tmp_path):
    py = wheel_env / "venv" / "bin" / "python"
    out = tmp_path / "out"
    out.mkdir()
    env = {**os.environ, "OUT_DIR": str(out)}
    env.pop("PYTHONPATH", None)
    res = subprocess.run([str(py), "launcher_app.py", "-m", "hydra/launcher=campaign", "+x=1,2",
                          f"hydra.sweep.dir={tmp_path / 'sweep'}"], cwd=wheel_env, capture_output=True, text=True,
                         timeout=300, env=env)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "Traceback" not in res.stderr, res.stderr
    assert sorted(p.read_text() for p in out.iterdir()) == ["ran 1", "ran 2"]
    # the jobs ran campaign from the wheel too: their job folder is the sweep's .campaign/
    assert list((tmp_path / "sweep" / ".campaign").glob("*_0_log.out"))


def test_the_wheel_lists_every_package_folder():
    """pyproject's explicit package list holds every folder with an __init__.py: a package
    left out is missing from the wheel and the image (campaign.catalogue was, once)."""
    import tomllib

    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    roots = ("campaign", "trainers", "hydra_plugins", "campaign_trace", "campaign_datasets", "campaign_window")
    found = {".".join(p.parent.relative_to(ROOT).parts) for root in roots for p in (ROOT / root).rglob("__init__.py")
             if "egg-info" not in str(p)}
    assert found - listed == set()


@pytest.mark.slow
def test_the_wheel_carries_the_cpp_comm_hooks_source(wheel_env):
    # trainers/comm_cpp.py builds its hook where it runs, from the installed package's csrc/
    py = wheel_env / "venv" / "bin" / "python"
    out = subprocess.run([str(py), "-c", "from trainers import comm_cpp; print(comm_cpp.SOURCE, comm_cpp.SOURCE.is_file())"],
                         check=True, capture_output=True, text=True, cwd=wheel_env).stdout.split()
    assert out[1] == "True" and "site-packages" in out[0] and str(ROOT) not in out[0], out
