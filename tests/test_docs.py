"""The documentation site (docs/, Sphinx) builds with warnings as errors, its generated reference
holds every public name and every environment variable the code reads, and every code example in
the docs and the README runs as written."""

import importlib.util
import inspect
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
DOCS = REPO / "docs"
# An example's first line says how to run it (ringcomm-run's flags may come first); "with a
# GPU" ones run only where there is one.
EXAMPLE = re.compile(
    r"```python\n# (with a GPU and a CUDA build: )?"
    r"(ringcomm-run (?:--[a-z-]+ )*-np \d+ (\S+\.py))\n(.*?)```",
    re.S,
)


def env() -> dict:
    environment = dict(os.environ)
    paths = [str(REPO), os.environ.get("PYTHONPATH")]
    environment["PYTHONPATH"] = os.pathsep.join(filter(None, paths))
    return environment


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    if importlib.util.find_spec("sphinx") is None:
        pytest.skip("Sphinx is not installed (pip install -e '.[docs]')")
    out = tmp_path_factory.mktemp("site")
    done = subprocess.run(
        [sys.executable, "-m", "sphinx", "-E", "-W", "--keep-going", "-q", "-b", "html",
         str(DOCS), str(out)],
        capture_output=True, text=True, timeout=240, env=env(),
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    return out


def test_every_public_name_is_in_the_reference(site):
    import ringcomm
    import ringcomm.torch
    import ringcomm.torch.elastic

    page = (site / "reference" / "python.html").read_text()
    for module in (ringcomm, ringcomm.torch, ringcomm.torch.elastic):
        names = getattr(module, "__all__", None) or [n for n in dir(module) if n[0] != "_"]
        for name in names:
            if inspect.ismodule(getattr(module, name)):
                continue
            # Indexed once; a name re-exported from another module is described again.
            full = f"{module.__name__}.{name}"
            described = f'id="{full}"' in page or f"{module.__name__}.</span>" in page
            assert described and f">{name}<" in page, full


def variables_read() -> set:
    """Every RINGCOMM_ variable the code reads: the core's in src/common/config.cc, the Python
    package's wherever it looks at os.environ."""
    config = (REPO / "src/common/config.cc").read_text()
    names = set(re.findall(r'variable\("(RINGCOMM_[A-Z0-9_]+)"', config))
    for path in (REPO / "ringcomm").rglob("*.py"):
        text = path.read_text()
        names |= set(re.findall(r'environ(?:\.get)?[\[(]"(RINGCOMM_[A-Z0-9_]+)"', text))
        names |= set(re.findall(r'"(RINGCOMM_[A-Z0-9_]+)" in os\.environ', text))
    return names


def test_every_environment_variable_is_in_the_reference(site):
    page = (site / "reference" / "environment.html").read_text()
    found = variables_read()
    assert len(found) > 30, sorted(found)
    missing = sorted(name for name in found if name not in page)
    assert not missing, missing


def test_every_tool_is_in_the_reference(site):
    page = (site / "reference" / "cli.html").read_text()
    for option in ("--compare", "--hosts", "--link-rate", "--host-discovery-script", "--json"):
        assert option in page, option


def examples() -> list:
    found = []
    for path in [REPO / "README.md", *sorted(DOCS.rglob("*.md"))]:
        text = path.read_text()
        blocks = text.count("```python")
        runnable = EXAMPLE.findall(text)
        # Every Python example says how to run it, so that every one is run here.
        assert len(runnable) == blocks, f"{path}: a ```python block without its run line"
        for gpu, command, name, code in runnable:
            found.append(pytest.param(command, name, code, bool(gpu), id=f"{path.name}:{name}"))
    return found


@pytest.mark.timeout(120)
@pytest.mark.parametrize("command,name,code,gpu", examples())
def test_example_runs_as_written(command, name, code, gpu, tmp_path):
    if gpu:
        torch = pytest.importorskip("torch")
        if not torch.cuda.is_available():
            pytest.skip("no CUDA device")
    script = tmp_path / name
    script.write_text(f"# {command}\n{code}")
    launcher = Path(sys.executable).with_name("ringcomm-run")
    argv = command.split()
    argv[0] = str(launcher) if launcher.exists() else argv[0]
    done = subprocess.run(
        argv, cwd=tmp_path, capture_output=True, text=True, timeout=100, env=env()
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
