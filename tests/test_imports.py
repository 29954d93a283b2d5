"""No import cycles in `chock/`: every import counts, wherever it stands. And no name twice: two modules (or
packages) in different packages, or two classes in different modules, never share a name, so that a name in
docs/, a traceback or a grep means one thing.

A lazy import inside a function and one under `TYPE_CHECKING` still say that one module needs the other, so
both count as much as an import at the top. The one exception is a package's `__init__` importing a module
inside its own package, which is how a package names its public face. `from chock.x import y` counts as
importing `chock.x.y` when `y` is a module.
"""

from __future__ import annotations

import ast
from pathlib import Path

import chock

ROOT = Path(chock.__file__).parent


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def all_modules() -> dict[str, Path]:
    return {module_name(path): path for path in sorted(ROOT.rglob("*.py"))}


def imported(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The modules of `chock` that `name` imports anywhere in its file, its own package's excepted when it
    is a package's `__init__`."""
    is_package = path.name == "__init__.py"
    package = name if is_package else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                found.add(submodule if submodule in modules else base)
    found = {target for target in found if target in modules and target != name}
    if is_package:
        found = {target for target in found if not target.startswith(name + ".")}
    return found


def import_graph() -> dict[str, set[str]]:
    modules = all_modules()
    return {name: imported(name, path, modules) for name, path in modules.items()}


def knots(graph: dict[str, set[str]]) -> list[set[str]]:
    """Every group of two or more modules that reach each other through imports (Tarjan's strongly connected
    components): each holds at least one cycle, and together they hold every cycle there is."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[set[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.add(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(group)

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(groups, key=min)


def circle(graph: dict[str, set[str]], group: set[str]) -> list[str]:
    """The shortest path from the group's first module back to itself, staying inside the group."""
    start = min(group)
    paths = {start: [start]}
    queue = [start]
    while queue:
        node = queue.pop(0)
        for target in sorted(graph[node] & group):
            if target == start:
                return [*paths[node], start]
            if target not in paths:
                paths[target] = [*paths[node], target]
                queue.append(target)
    raise AssertionError(f"{sorted(group)} is not a cycle")


def report(graph: dict[str, set[str]]) -> list[str]:
    """Each knot as one circle through it, then every import inside it: the ones to cut from."""
    lines = []
    for group in knots(graph):
        lines.append(" -> ".join(circle(graph, group)))
        lines.extend(f"    {name} imports {target}" for name in sorted(group) for target in sorted(graph[name] & group))
    return lines


def names_in(root: Path) -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """Under the package at `root`: each module or package name with the modules that have it, and each class
    name (a class inside a function too) with the modules that define one."""
    modules: dict[str, set[str]] = {}
    classes: dict[str, set[str]] = {}
    for path in sorted(root.rglob("*.py")):
        dotted = ".".join(path.relative_to(root.parent).with_suffix("").parts).removesuffix(".__init__")
        modules.setdefault(dotted.rpartition(".")[2], set()).add(dotted)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.ClassDef):
                classes.setdefault(node.name, set()).add(dotted)
    return modules, classes


def shared(names: dict[str, set[str]]) -> list[str]:
    return [f"{name}: {', '.join(sorted(places))}" for name, places in sorted(names.items()) if len(places) > 1]


def test_a_name_given_twice_is_reported(tmp_path: Path) -> None:
    for package in ("pkg", "pkg/log", "pkg/session"):
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("")
    (tmp_path / "pkg/log/index.py").write_text("class Entry:\n    pass\n")
    (tmp_path / "pkg/session/index.py").write_text("def make():\n    class Entry:\n        pass\n")
    (tmp_path / "pkg/session/tree.py").write_text("class Tree:\n    pass\nclass Tree:\n    pass\n")
    modules, classes = names_in(tmp_path / "pkg")
    assert shared(modules) == ["index: pkg.log.index, pkg.session.index"]
    assert shared(classes) == ["Entry: pkg.log.index, pkg.session.index"]  # one module's own repeat is ruff's


def test_no_name_is_given_twice_in_chock() -> None:
    modules, classes = names_in(ROOT)
    for what, found in (("modules", shared(modules)), ("classes", shared(classes))):
        assert not found, (
            f"{what} of the same name in chock/ (rename one to a name that says what it is):\n" + "\n".join(found)
        )


def test_the_walk_counts_every_kind_of_import(tmp_path: Path) -> None:
    package = tmp_path / "__init__.py"
    package.write_text("from pkg import inner\nfrom pkg.base import thing\n")
    module = tmp_path / "user.py"
    module.write_text(
        "from typing import TYPE_CHECKING\n"
        "import pkg.base\n"
        "from . import inner\n"
        "from .sub import leaf\n"
        "if TYPE_CHECKING:\n"
        "    from pkg.typed import Shape\n"
        "def later():\n"
        "    from pkg import lazy\n"
    )
    names = ["pkg", "pkg.base", "pkg.inner", "pkg.lazy", "pkg.typed", "pkg.user", "pkg.sub", "pkg.sub.leaf"]
    modules = {name: tmp_path for name in names}
    assert imported("pkg.user", module, modules) == {
        "pkg.base",
        "pkg.inner",
        "pkg.sub.leaf",
        "pkg.typed",
        "pkg.lazy",
    }
    # A package's __init__ naming its own modules is its public face, not a cycle with them.
    assert imported("pkg", package, modules) == set()


def test_a_knot_is_reported_with_every_import_inside_it() -> None:
    graph = {"a": {"b"}, "b": {"c", "a"}, "c": {"a", "d"}, "d": set(), "e": {"f"}, "f": set()}
    assert report(graph) == [
        "a -> b -> a",
        "    a imports b",
        "    b imports a",
        "    b imports c",
        "    c imports a",
    ]


def test_no_import_cycles_in_chock() -> None:
    found = report(import_graph())
    assert not found, "import cycles in chock/:\n" + "\n".join(found)
