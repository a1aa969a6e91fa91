"""Sphinx directives that generate ringcomm's reference from the code, so that nothing is written
twice, and fail the build (a warning, and the build runs with -W) where the code lacks what the
reference needs.

    .. ringcomm-api:: ringcomm
       :data-from: ringcomm.ops

documents every public name of a module (its ``__all__``, else every name without a leading
underscore; ``:names: A B`` for only those) with autodoc: functions, classes and exceptions by
their docstrings, data by the ``#:`` comment in one of the ``:data-from:`` modules that defines
it. A name with neither warns, and so does a public member of a class (a method, property or
class attribute in the class's own namespace) that autodoc's ``:members:`` would leave out for
want of a docstring or ``#:`` comment.

A class whose constructor takes one of our private types (``Communicator(core:
"_core.Communicator", ...)``) is made by the library, not by its users: it is shown without a
signature. Enum values (pybind11's ``<ReduceOp.SUM: 0>``) read as their names, ``ReduceOp.SUM``,
in signatures and values.

    .. ringcomm-environment::

is the table of every variable the core reads (src/common/config.cc, through
``Config.describe_environment``: name, default, meaning; with the Horovod name it also reads,
``ringcomm._info.HOROVOD_ALIASES``) and of those the Python package reads
(``ringcomm._info.PYTHON_VARIABLES``).
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import re

from docutils import nodes
from docutils.parsers.rst import Directive, directives
from docutils.statemachine import StringList
from sphinx.errors import PycodeError
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


def undocumented_members(cls: type) -> list[str]:
    """The public members of ``cls`` (its own namespace, as autodoc's ``:members:`` takes them)
    that the reference would silently leave out: methods and properties without a docstring
    (their own or one they inherit, as autodoc reads it), class attributes without a ``#:``
    comment. A class attribute that is a class is shown as an alias, and needs neither."""
    try:
        comments = ModuleAnalyzer.for_module(cls.__module__).find_attr_docs()
    except PycodeError:
        comments = {}
    missing = []
    for name, value in vars(cls).items():
        if name.startswith("_") or (cls.__qualname__, name) in comments:
            continue
        if isinstance(value, (staticmethod, classmethod)):
            value = value.__func__
        if isinstance(value, property) or inspect.isroutine(value):
            if not (inspect.getdoc(getattr(cls, name)) or "").strip():
                missing.append(name)
        elif not inspect.isclass(value):
            missing.append(name)
    return missing


_ENUM_REPR = re.compile(r"<([A-Za-z_][\w.]*): -?\d+>")


def readable(text: str) -> str:
    """``<ReduceOp.SUM: 0>`` (an enum's repr) as ``ReduceOp.SUM``."""
    return _ENUM_REPR.sub(r"\1", text)


def _takes_private_type(cls: type) -> bool:
    init = vars(cls).get("__init__")
    if not inspect.isfunction(init):
        return False
    parameters = list(inspect.signature(init).parameters.values())[1:]  # after self
    annotations = [str(p.annotation) for p in parameters if p.annotation is not p.empty]
    return any(re.search(r"(?<!\w)_[a-z]", a) for a in annotations)


def process_signature(app, what, name, obj, options, signature, return_annotation):
    if what == "class" and inspect.isclass(obj) and _takes_private_type(obj):
        # Nor its parameters' types under the description (autodoc_typehints = "description"),
        # recorded before this event (Sphinx >= 8.2: current_document; before: temp_data).
        document = getattr(app.env, "current_document", None)
        recorded = getattr(document, "autodoc_annotations", None)
        if recorded is None:
            recorded = app.env.temp_data.get("annotations", {})
        recorded.pop(name, None)
        return "", None
    if signature:
        return readable(signature), return_annotation
    return None


class ApiDirective(Directive):
    required_arguments = 1
    option_spec = {"data-from": directives.unchanged, "names": directives.unchanged}

    def run(self):
        module_name = self.arguments[0]
        module = importlib.import_module(module_name)
        data_docs = attribute_docs(self.options.get("data-from", "").split())
        names = self.options.get("names", "").split() or public_names(module)
        lines: list[str] = []
        where = self.state.document.current_source
        # A class or function a module re-exports from another documented here (ringcomm.torch's
        # HorovodInternalError in ringcomm.torch.elastic) is described again, not indexed again.
        documented = self.state.document.settings.env.temp_data.setdefault("ringcomm-api", set())
        for name in names:
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
                for member in undocumented_members(obj):
                    logger.warning(f"{full}.{member} has no docstring (or #: comment): the "
                                   "reference would leave it out", location=where)  # fmt: skip
            elif inspect.isfunction(obj) or inspect.isbuiltin(obj):
                lines += [f".. autofunction:: {full}", *again, ""]
            else:
                doc = data_docs.get(name)
                if not doc:
                    logger.warning(f"{full} has no `#:` doc comment in {self.options}",
                                   location=where)  # fmt: skip
                    continue
                lines += [f".. py:data:: {full}", f"   :value: {readable(repr(obj))}", ""]
                lines += [f"   {line}" for line in doc] + [""]
                continue
            if not (inspect.getdoc(obj) or "").strip():
                logger.warning(f"{full} has no docstring: the reference needs one", location=where)
        container = nodes.section()
        container.document = self.state.document
        nested_parse_with_titles(self.state, StringList(lines, source=where), container)
        return container.children


class _ParserFoundError(Exception):
    """Carries the parser out of the program's main() (parser_of)."""


def parser_of(main) -> argparse.ArgumentParser:
    """The parser a command-line program's ``main(argv)`` builds, for one that builds it inline
    instead of in a ``build_parser()`` of its own: caught where ``main`` would parse, before it
    runs anything."""

    def found(parser, *args, **kwargs):
        raise _ParserFoundError(parser)

    parse_args = argparse.ArgumentParser.parse_args
    argparse.ArgumentParser.parse_args = found  # type: ignore[method-assign]
    try:
        main([])
    except _ParserFoundError as caught:
        return caught.args[0]
    finally:
        argparse.ArgumentParser.parse_args = parse_args  # type: ignore[method-assign]
    raise RuntimeError(f"{main.__module__}.main() returned without parsing its arguments")


def training_parser() -> argparse.ArgumentParser:
    """``python -m ringcomm.bench.training``'s parser (docs/reference/cli.md)."""
    from ringcomm.bench import training

    return parser_of(training.main)


def _cell(text: str) -> str:
    return text.replace("|", "\\|") if text else ""


class EnvironmentDirective(Directive):
    def run(self):
        from ringcomm import _core
        from ringcomm._info import HOROVOD_ALIASES, PYTHON_VARIABLES

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
            alias = HOROVOD_ALIASES.get(row["name"])
            also = f" (or Horovod's ``{alias}``)" if alias else ""
            lines += [
                f"   * - ``{row['name']}``{also}",
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
    app.connect("autodoc-process-signature", process_signature)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
