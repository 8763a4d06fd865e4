"""The import graph of dptensor has no cycle, imports inside functions included.

The layers themselves are an import-linter contract in ``pyproject.toml`` (``lint-imports``, run by
``.ci/run``); this test adds what a layers contract cannot see: a circle between two modules of the
same layer (``a`` imports ``b`` at the top, ``b`` imports ``a`` inside a function). grimp, the graph
library behind import-linter, records every import statement wherever it stands.

Package ``__init__`` modules are nodes like any other: an edge into one is an import of the names
it re-exports. Only the root package re-exports from every layer (the public API); no module of the
package imports it (``__version__`` lives in the leaf ``dptensor._version``), so it closes no
cycle, and nothing needs to be left out.
"""

from __future__ import annotations

import grimp  # import-linter's graph library (the test extra)


def strongly_connected_components(edges: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm, iterative: the components of the directed graph with more than one node,
    or one node with an edge to itself."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components: list[list[str]] = []
    counter = 0
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, successors = work[-1]
            for successor in successors:
                if successor not in index:
                    index[successor] = low[successor] = counter
                    counter += 1
                    stack.append(successor)
                    on_stack.add(successor)
                    work.append((successor, iter(sorted(edges[successor]))))
                    break
                if successor in on_stack:
                    low[node] = min(low[node], index[successor])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1 or node in edges[node]:
                        components.append(sorted(component))
    return components


def test_strongly_connected_components_finds_cycles_and_only_cycles():
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": {"e"}, "e": set(), "f": {"f"}}
    assert sorted(strongly_connected_components(edges)) == [["a", "b", "c"], ["f"]]
    assert strongly_connected_components({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle_between_modules():
    graph = grimp.build_graph("dptensor", cache_dir=None)
    edges = {module: set(graph.find_modules_directly_imported_by(module)) for module in graph.modules}
    cycles = []
    for component in strongly_connected_components(edges):
        members = set(component)
        lines = [
            f"  {importer} -> {imported} (line {', '.join(str(d['line_number']) for d in details)})"
            for importer in component
            for imported in sorted(edges[importer] & members)
            for details in [graph.get_import_details(importer=importer, imported=imported)]
        ]
        cycles.append("\n".join([" <-> ".join(component), *lines]))
    assert not cycles, "import cycles (move the shared code to a module both can import):\n" + "\n".join(
        cycles
    )
