"""shared/ holds only what two or more processes use (issue 31, docs/architecture.md "shared/"):
for each module of shared/, the process packages (ingest, aggregate, alerts, serve, admin) that
import it, directly or through other modules of shared/ and people/ (people/ counts through its
users), must be at least two. A module with one user belongs in that user's package. The import
graph is grimp's (import-linter's), built from the tree; the rule has a negative case on a
made-up graph."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping

import grimp

PROCESSES = ("ingest", "aggregate", "alerts", "serve", "admin")
"""The packages that count as users: the four processes' and the operator's `sds`."""
PACKAGES = ("shared", "people", *PROCESSES)

NOT_CODE = {
    "shared.migrations": "the schema's SQL files, read by admin/migrate.py (`sds db upgrade`): "
                         "what every process meets the others in, not code they import",
}
"""Modules of shared/ that are data, not code any process imports, and why."""


def users_of(imports: Mapping[str, Iterable[str]]) -> dict[str, set[str]]:
    """For each module of shared/ in `imports` (module -> the modules it imports directly), the
    process packages whose modules import it directly or transitively."""
    importers: dict[str, set[str]] = defaultdict(set)
    for module, targets in imports.items():
        for target in targets:
            importers[target].add(module)
    known = set(imports) | set(importers)
    users = {}
    for module in sorted(m for m in known if m.startswith("shared.")):
        seen: set[str] = set()
        todo = [module]
        while todo:
            for importer in importers[todo.pop()] - seen:
                seen.add(importer)
                todo.append(importer)
        users[module] = {m.split(".")[0] for m in seen} & set(PROCESSES)
    return users


def single_user_modules(imports: Mapping[str, Iterable[str]]) -> dict[str, list[str]]:
    """Modules of shared/ used by fewer than two process packages (with those users), but the
    data packages of NOT_CODE."""
    return {m: sorted(u) for m, u in users_of(imports).items()
            if len(u) < 2 and m not in NOT_CODE}


def import_graph() -> dict[str, set[str]]:
    """The tree's import graph over the service's packages: module -> modules it imports."""
    graph = grimp.build_graph(*PACKAGES, cache_dir=None)
    return {m: set(graph.find_modules_directly_imported_by(m)) for m in graph.modules}


def test_every_module_of_shared_has_two_users() -> None:
    graph = import_graph()
    assert "shared.db" in graph and "serve.api.data" in graph  # the graph is the tree's
    assert single_user_modules(graph) == {}, (
        "a module of shared/ used by fewer than two processes: move it to its user's package")
    assert set(NOT_CODE) <= set(graph), "NOT_CODE names a module that is gone"


def test_the_rule_finds_a_single_user_module_in_a_made_up_graph() -> None:
    fake = {
        "serve.api.x": {"shared.only_serve", "people.links"},
        "admin.cli": {"people.links", "shared.unused_by_admin_too"},
        "people.links": {"shared.through_people"},
        "people.orphan": {"shared.only_people"},
        "shared.through_people": {"shared.deep"},
        "ingest.writer": {"shared.deep"},
        "shared.unused_by_admin_too": set(),
        "shared.nobody": set(),
    }
    users = users_of(fake)
    assert users["shared.through_people"] == {"serve", "admin"}  # people counts via its users
    assert users["shared.deep"] == {"serve", "admin", "ingest"}  # and through shared/ too
    assert single_user_modules(fake) == {"shared.only_serve": ["serve"],
                                         "shared.unused_by_admin_too": ["admin"],
                                         "shared.only_people": [], "shared.nobody": []}
