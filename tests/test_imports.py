"""The Python package's modules import each other in one direction: no import circles, and the
benchmark (ringcomm.bench) a leaf that nothing else in the library imports.

Imports are read from the source (every import statement, at module level or inside a
function), so a circle hidden in a function body counts too. `from package import name` is an
edge to the module `package.name` when there is one, else to the package itself.
"""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "ringcomm"
# Compiled modules beside the Python ones (they import nothing of the package).
EXTENSIONS = {"ringcomm._core"}


def module_names() -> dict:
    """{dotted name: source path} of every module of the package."""
    names = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        names[".".join(parts)] = path
    return names


def imports_of(name: str, path: Path, known: set) -> set:
    """The package's modules that module `name` imports."""
    found = set()
    is_package = path.name == "__init__.py"
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: from its package (or a parent of it)
                base = name.split(".") if is_package else name.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                prefix = ".".join(base + ([node.module] if node.module else []))
            else:
                prefix = node.module or ""
            for alias in node.names:
                child = f"{prefix}.{alias.name}"
                found.add(child if child in known else prefix)
    return {module for module in found if module in known and module != name}


def import_graph() -> dict:
    sources = module_names()
    known = set(sources) | EXTENSIONS
    graph = {name: set() for name in EXTENSIONS}
    for name, path in sources.items():
        graph[name] = imports_of(name, path, known)
    return graph


def circles(graph: dict) -> list:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in sorted(graph[node]):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_package_has_no_import_circles():
    graph = import_graph()
    assert len(graph) > 50, "the walk found too few modules"
    assert circles(graph) == []


def test_the_library_does_not_import_the_benchmark():
    graph = import_graph()
    importers = {
        name: sorted(m for m in imported if m.startswith("ringcomm.bench"))
        for name, imported in graph.items()
        if not name.startswith("ringcomm.bench")
    }
    assert {name: found for name, found in importers.items() if found} == {}


def test_the_walk_sees_a_circle():
    """The detector itself: a circle through a function-level import is found."""
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
