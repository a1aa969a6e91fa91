"""The documentation site (docs/, Sphinx) builds with warnings as errors and nitpicky (every type a
signature names resolves, or is an external one docs/conf.py lets through), its generated
reference holds every public name, every public member of their classes and every environment
variable the code reads, and every code example in the docs and the README runs as written."""

import importlib
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
        [sys.executable, "-m", "sphinx", "-E", "-W", "-n", "--keep-going", "-q", "-b", "html",
         str(DOCS), str(out)],
        capture_output=True, text=True, timeout=240, env=env(),
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    return out


# The modules the reference documents, each with every public name (None) or some of them.
DOCUMENTED = {
    "ringcomm": None,
    "ringcomm.torch": None,
    "ringcomm.torch.compression": None,
    "ringcomm.torch.errors": None,
    "ringcomm.torch.elastic": None,
    "ringcomm.elastic.worker": ["WorkerRemovedError"],
    "ringcomm.c10d": None,
    "ringcomm.c10d.hooks": None,
}


def documented_names():
    """(module, name, object) of every name the reference must describe."""
    for module_name, only in DOCUMENTED.items():
        module = importlib.import_module(module_name)
        names = only or getattr(module, "__all__", None) or [n for n in dir(module) if n[0] != "_"]
        for name in names:
            if not inspect.ismodule(getattr(module, name)):
                yield module_name, name, getattr(module, name)


def test_every_public_name_is_in_the_reference(site):
    page = (site / "reference" / "python.html").read_text()
    for module_name, name, _ in documented_names():
        # Indexed once; a name re-exported from another module is described again.
        full = f"{module_name}.{name}"
        described = f'id="{full}"' in page or f"{module_name}.</span>" in page
        assert described and f">{name}<" in page, full


def test_every_public_member_is_in_the_reference(site):
    """Every public method, property and class attribute of a documented class (its own, as
    autodoc's :members: takes them) has an entry: one without a docstring would be left out
    silently (docs/_ext/ringcomm_docs.py warns of it, and the build fails)."""
    page = (site / "reference" / "python.html").read_text()
    missing, checked = [], 0
    for module_name, name, obj in documented_names():
        full = f"{module_name}.{name}"
        if not inspect.isclass(obj) or issubclass(obj, BaseException):
            continue  # exceptions are shown with their bases, without members
        if f'id="{full}"' not in page:
            continue  # described again under the module that indexes it
        for member in vars(obj):
            if member[0] != "_":
                checked += 1
                if f'id="{full}.{member}"' not in page:
                    missing.append(f"{full}.{member}")
    assert checked > 50 and not missing, missing


def variables_read() -> set:
    """Every RINGCOMM_ variable the code reads, and every HOROVOD_ one it honours: the core's in
    src/common/config.cc (Horovod's names among them, as variable("RINGCOMM_X", "HOROVOD_X")),
    the Python package's wherever it looks at os.environ."""
    config = (REPO / "src/common/config.cc").read_text()
    names = set(re.findall(r'variable\("(RINGCOMM_[A-Z0-9_]+)"', config))
    horovod = r'variable\((?:"RINGCOMM_[A-Z0-9_]+", )?"(HOROVOD_[A-Z0-9_]+)"'
    names |= set(re.findall(horovod, config))
    for path in (REPO / "ringcomm").rglob("*.py"):
        text = path.read_text()
        read = r'environ(?:\.get)?[\[(]"((?:RINGCOMM|HOROVOD)_[A-Z0-9_]+)"'
        names |= set(re.findall(read, text))
        names |= set(re.findall(r'"(RINGCOMM_[A-Z0-9_]+)" in os\.environ', text))
    return names


def test_every_environment_variable_is_in_the_reference(site):
    page = (site / "reference" / "environment.html").read_text()
    found = variables_read()
    assert len(found) > 30 and "HOROVOD_FUSION_THRESHOLD" in found, sorted(found)
    missing = sorted(name for name in found if name not in page)
    assert not missing, missing


def test_every_tool_is_in_the_reference(site):
    page = (site / "reference" / "cli.html").read_text()
    for option in ("--compare", "--hosts", "--link-rate", "--host-discovery-script", "--json"):
        assert option in page, option
    for program in ("ringcomm.bench.ddp", "ringcomm.bench.training", "ringcomm.c10d"):
        assert f"python -m {program}" in page, program
    # Options as they are typed (smart quotes make "--" an en dash), and defaults as the help
    # says them, not as the machine that built the site evaluates them.
    assert not re.search(r"\u2013[a-z]", page), "an option rendered with an en dash"
    assert "one per core" in page


def test_the_landing_page_states_the_version_and_the_changelog_is_in(site):
    from ringcomm._version import __version__

    assert f"<strong>{__version__}</strong>" in (site / "index.html").read_text()
    assert "Experimental" in (site / "changelog.html").read_text()


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
