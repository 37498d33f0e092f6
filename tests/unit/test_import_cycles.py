"""No import circle anywhere in sbx: at the top of a module, inside a function or under
``TYPE_CHECKING``.

A circle in the use cases was held together by imports inside functions, and made the run, the
named sandboxes and the plan cache one tangle. A type that needs the module above it belongs
lower down (a small module both import), or is named by its shape (a ``Protocol``).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Set

import grimp

PACKAGE = "sbx"


def _graph() -> dict[str, set[str]]:
    graph = grimp.build_graph("sbx", exclude_type_checking_imports=False, cache_dir=None)
    inside = {m for m in graph.modules if m == PACKAGE or m.startswith(PACKAGE + ".")}
    return {m: {d for d in graph.find_modules_directly_imported_by(m) if d in inside}
            for m in inside}


def circles(edges: Mapping[str, Set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan's, without recursion)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(edges):
        if root in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    found.append(sorted(group))
    return found


def test_the_finder_finds_a_circle() -> None:
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_no_import_circle_in_the_package() -> None:
    edges = _graph()
    assert {"sbx.usecases.run.plan", "sbx.proxy.context", "sbx.seams.driver"} <= set(edges)
    # imports under TYPE_CHECKING and inside functions are edges too
    assert "sbx.proxy.refusal" in edges["sbx.proxy.recorder"]
    assert "sbx.seams.driver.registry_credentials" in edges["sbx.seams.registry_auth"]
    assert circles(edges) == []
