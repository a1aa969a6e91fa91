"""Sphinx configuration of ringcomm's documentation.

    pip install torch==2.13.0 -e ".[docs]" && python -m sphinx -W -n -b html docs docs/_build/html

Sphinx rather than MkDocs: the reference is generated from the code through autodoc (Python
docstrings), sphinx-argparse (the command-line tools' own parsers) and a directive of ours
(docs/_ext/ringcomm_docs.py: every configuration variable from the one place that reads them),
and its -W turns every broken reference, undocumented public name or undocumented public member
of a class into a failed build, which the test suite relies on (tests/test_docs.py); -n
(nitpicky) does the same for a type a signature names that the site does not document. Pages
are Markdown (MyST), as the README was; the theme is Furo, with its search.
"""

import os
import runpy
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "_ext"))

project = "ringcomm"
# The package's own number (ringcomm/_version.py), read without importing the package.
release = runpy.run_path(os.path.join(ROOT, "ringcomm", "_version.py"))["__version__"]
version = release
author = "the ringcomm developers"
copyright = "2026, the ringcomm developers"  # noqa: A001 (Sphinx's name)

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinxarg.ext",
    "ringcomm_docs",
]
source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
exclude_patterns = ["_build", "_ext"]
myst_heading_anchors = 4
myst_enable_extensions = ["colon_fence", "substitution"]
# {{ release }} in a page: the landing page states the version it documents.
myst_substitutions = {"release": release}
autodoc_member_order = "bysource"
autodoc_typehints = "description"
# Quotes and ellipses made typographic, dashes not: "--compare" and "-np" are options to type,
# which an en dash would break.
smartquotes_action = "qe"
# The documentation builds offline: no intersphinx, nothing fetched. So the types of other
# projects that signatures name have no target here; the build runs nitpicky (-n, which
# tests/test_docs.py does too) and these, and only these, are let through. A reference to one
# of ringcomm's own names must resolve.
nitpick_ignore = [
    # NumPy: ringcomm.empty / zeros return arrays.
    ("py:class", "numpy.ndarray"),
    # torch: the tensors, dtypes and optimizers of the Horovod API (ringcomm.torch).
    ("py:class", "torch.Tensor"),
    ("py:class", "torch.dtype"),
    ("py:class", "torch.optim.optimizer.Optimizer"),
    # torch.distributed: the process group, bucket and future of a DDP comm hook
    # (ringcomm.c10d.hooks), as the annotations resolve them.
    ("py:class", "torch.distributed.distributed_c10d.ProcessGroup"),
    ("py:class", "torch._C._distributed_c10d.GradBucket"),
    ("py:class", "torch.jit.Future"),
]
html_theme = "furo"
html_title = f"ringcomm {release}"
html_static_path = ["_static"]
