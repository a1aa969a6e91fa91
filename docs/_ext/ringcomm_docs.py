"""Sphinx directives that generate ringcomm's reference from the code, so that nothing is written
twice, and fail the build (a warning, and the build runs with -W) where the code lacks what the
reference needs.

    .. ringcomm-api:: ringcomm
       :data-from: ringcomm.ops

documents every public name of a module (its ``__all__``, else every name without a leading
underscore) with autodoc: functions, classes and exceptions by their docstrings, data by the
``#:`` comment in one of the ``:data-from:`` modules that defines it. A name with neither warns.

    .. ringcomm-environment::

is the table of every variable the core reads (src/common/config.cc, through
``Config.describe_environment``: name, default, meaning) and of those the Python package reads
(``ringcomm._info.PYTHON_VARIABLES``).
"""

from __future__ import annotations

import importlib
import inspect

from docutils import nodes
from docutils.parsers.rst import Directive, directives
from docutils.statemachine import StringList
from sphinx.pycode import ModuleAnalyzer
from sphinx.util import logging
from sphinx.util.nodes import nested_parse_with_titles

logger = logging.getLogger(__name__)


def public_names(module) -> list[str]:
    names = getattr(module, "__all__", None)
    if names is None:
        names = [n for n in dir(module) if not n.startswith("_")]
    return sorted(names, key=lambda n: (not inspect.isclass(getattr(module, n)), n.lower()))


def attribute_docs(module_names: list[str]) -> dict:
    """{(module, name): doc comment lines} of every ``#:`` comment in those modules."""
    found = {}
    for name in module_names:
        analyzer = ModuleAnalyzer.for_module(name)
        for (_, attribute), lines in analyzer.find_attr_docs().items():
            found[attribute] = [line for line in lines if line.strip()]
    return found


class ApiDirective(Directive):
    required_arguments = 1
    option_spec = {"data-from": directives.unchanged}

    def run(self):
        module_name = self.arguments[0]
        module = importlib.import_module(module_name)
        data_docs = attribute_docs(self.options.get("data-from", "").split())
        lines: list[str] = []
        where = self.state.document.current_source
        # A class or function a module re-exports from another documented here (ringcomm.torch's
        # HorovodInternalError in ringcomm.torch.elastic) is described again, not indexed again.
        documented = self.state.document.settings.env.temp_data.setdefault("ringcomm-api", set())
        for name in public_names(module):
            obj = getattr(module, name)
            full = f"{module_name}.{name}"
            if inspect.ismodule(obj):
                continue  # a submodule has a section of its own
            again = ["   :no-index:"] if id(obj) in documented else []
            if inspect.isclass(obj) or inspect.isfunction(obj) or inspect.isbuiltin(obj):
                documented.add(id(obj))
            if inspect.isclass(obj) and issubclass(obj, BaseException):
                lines += [f".. autoexception:: {full}", "   :show-inheritance:", *again, ""]
            elif inspect.isclass(obj):
                lines += [f".. autoclass:: {full}", "   :members:", *again, ""]
            elif inspect.isfunction(obj) or inspect.isbuiltin(obj):
                lines += [f".. autofunction:: {full}", *again, ""]
            else:
                doc = data_docs.get(name)
                if not doc:
                    logger.warning(f"{full} has no `#:` doc comment in {self.options}",
                                   location=where)  # fmt: skip
                    continue
                lines += [f".. py:data:: {full}", f"   :value: {obj!r}", ""]
                lines += [f"   {line}" for line in doc] + [""]
                continue
            if not (inspect.getdoc(obj) or "").strip():
                logger.warning(f"{full} has no docstring: the reference needs one", location=where)
        container = nodes.section()
        container.document = self.state.document
        nested_parse_with_titles(self.state, StringList(lines, source=where), container)
        return container.children


def _cell(text: str) -> str:
    return text.replace("|", "\\|") if text else ""


class EnvironmentDirective(Directive):
    def run(self):
        from ringcomm import _core
        from ringcomm._info import PYTHON_VARIABLES

        core = [row for row in _core.Config.describe_environment() if row["name"][0] != "("]
        lines = [
            ".. list-table:: Read by the core, once, in src/common/config.cc",
            "   :header-rows: 1",
            "   :widths: 25 45 30",
            "",
            "   * - variable",
            "     - meaning",
            "     - default",
        ]
        for row in core:
            if not row["meaning"]:
                logger.warning(f"{row['name']} says nothing of its meaning in config.cc")
            lines += [
                f"   * - ``{row['name']}``",
                f"     - {_cell(row['meaning'])}",
                f"     - ``{row['default']}``" if row["default"] else "     - ",
            ]
        lines += [
            "",
            ".. list-table:: Read by the Python package",
            "   :header-rows: 1",
            "   :widths: 25 45 30",
            "",
            "   * - variable",
            "     - meaning",
            "     - set or read by",
        ]
        for name, (reader, meaning) in PYTHON_VARIABLES.items():
            lines += [f"   * - ``{name}``", f"     - {_cell(meaning)}", f"     - {reader}"]
        container = nodes.section()
        container.document = self.state.document
        source = self.state.document.current_source
        nested_parse_with_titles(self.state, StringList(lines, source=source), container)
        return container.children


def setup(app):
    app.add_directive("ringcomm-api", ApiDirective)
    app.add_directive("ringcomm-environment", EnvironmentDirective)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
