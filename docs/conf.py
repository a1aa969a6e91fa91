"""Sphinx configuration of ringcomm's documentation.

    pip install -e ".[docs]" && python -m sphinx -W -b html docs docs/_build/html

Sphinx rather than MkDocs: the reference is generated from the code through autodoc (Python
docstrings), sphinx-argparse (the command-line tools' own parsers) and a directive of ours
(docs/_ext/ringcomm_docs.py: every configuration variable from the one place that reads them),
and its -W turns every broken reference or undocumented public name into a failed build, which
the test suite relies on (tests/test_docs.py). Pages are Markdown (MyST), as the README was; the
theme is Furo, with its search.
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "_ext"))

project = "ringcomm"
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
myst_enable_extensions = ["colon_fence"]
autodoc_member_order = "bysource"
autodoc_typehints = "description"
# Quotes and ellipses made typographic, dashes not: "--compare" and "-np" are options to type,
# which an en dash would break.
smartquotes_action = "qe"
# The documentation builds offline: no intersphinx, nothing fetched.
html_theme = "furo"
html_title = "ringcomm"
html_static_path = ["_static"]
