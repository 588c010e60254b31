"""The whole tree's import graph has no cycle (operator/src and jobs/src, every import: module level,
inside functions and under TYPE_CHECKING alike).

The import contracts (pyproject.toml, lint-imports) say which way each layer may import; this says
that no two modules, anywhere, import each other, directly or around a longer circle: a piece two
modules share is a module of its own. The graph is grimp's (the library import-linter builds on)."""

from __future__ import annotations

import grimp

PACKAGES = ("flashrl_api", "flashrl_jobs", "flashrl_operator", "flashrl_report")


def _cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """The graph's strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in sorted(graph.modules):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in graph.modules:
                    continue
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.find_modules_directly_imported_by(child)))))
                    advanced = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
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
    return found


def test_the_import_graph_of_the_whole_tree_has_no_cycle() -> None:
    graph = grimp.build_graph(*PACKAGES)
    assert len(graph.modules) > 100  # the whole tree, not an empty graph
    cycles = _cycles(graph)
    details = [
        " <-> ".join(cycle)
        + ": "
        + "; ".join(
            f"{i['importer']}:{i['line_number']} imports {i['imported']}"
            for a in cycle
            for b in cycle
            if a != b
            for i in graph.get_import_details(importer=a, imported=b)
        )
        for cycle in cycles
    ]
    assert not cycles, "import cycles:\n" + "\n".join(details)


def test_the_check_finds_a_cycle() -> None:
    """The search itself: a circle of three modules is found, a chain is not."""
    graph = grimp.ImportGraph()
    for name in ("a", "a.b", "a.c", "a.d"):
        graph.add_module(name)
    graph.add_import(importer="a.b", imported="a.c")
    graph.add_import(importer="a.c", imported="a.d")
    assert _cycles(graph) == []
    graph.add_import(importer="a.d", imported="a.b")
    assert _cycles(graph) == [["a.b", "a.c", "a.d"]]
