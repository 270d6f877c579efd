"""The house's shape, read from its own imports (docs/explanation/architecture.md draws it).

The import graph is grimp's (the library behind import-linter): every `import` in the
project's packages, those inside functions included, so a lazy import is an edge too.
What holds:

- no import circle among the project's modules;
- no import from a lower layer to a higher one along the data flow (LAYERS, top
  first; the doors are independent of each other);
- the server imports no private `swarmrl._*` module and the SDK nothing of the server:
  both share only the contract package, `swarmrl_proto`;
- no module over 500 lines outside generated code;
- no environment variable named `*TEST*` read outside tests/;
- no module imports a test file (`test_*`): what tests share lives in support modules,
  and tests/ mirrors the packages it tests (tests/server/http/ tests
  swarmrl_server/http/).

KNOWN holds what still breaks a rule while the redesign lands; it may only shrink (a
listed violation that is gone fails the test, so the list is kept exact).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator

import grimp
import pytest

from tests.architecture_support import graph
from tests.helpers import REPO

S = "swarmrl_server."
LAYERS: list[tuple[str, ...]] = [
    # commands (launch: forked `swarmrl serve` processes; launch_preload: their imports)
    ("cli", "study", "launch", "launch_preload"),
    ("app", "wiring"),  # builds and wires one server (wiring: trainers to the swarm)
    ("grpc", "http"),  # the front doors: independent of each other
    ("observe.live", "observe.plots", "observe.viewer"),  # what the doors show
    ("scale",),  # placement: engine replicas and trainer workers on Ray
    ("trainer",),
    ("swarm",),  # the server's state, one object
    ("episodes",),  # sessions, episodes, request resolution, generation
    ("observe.metrics",),  # each training step's metrics
    ("hosting", "events", "pauses", "timelines"),
    ("config",),
    ("engine",),  # the engine registry and engines (hf, vllm, echo)
    ("models", "store", "limits", "security", "observe.telemetry"),
    ("errors", "heap", "logs", "net"),
]
"""The server's packages and modules, highest first: each may import only from its own
layer or the ones below it (along the data flow: commands, app, doors, swarm, episodes,
engine and timelines, store)."""

INDEPENDENT = {("grpc", "http")}

APART: dict[str, tuple[str, ...]] = {
    # The trainer sees the server only through its port (trainer.port), the swarm sees a
    # trainer only as a hosting.TrainerHandle; swarmrl_server.wiring joins the two.
    "trainer": ("swarm", "hosting"),
}
"""Packages kept apart, by any chain of imports, whatever their layers allow."""

KNOWN: dict[str, set[tuple[str, ...]]] = {
    # Circles among modules, by their members.
    "circles": set(),
    # Layer breaches, as (importer, imported) among LAYERS' names.
    "layers": set(),
    # Modules over 500 lines.
    "long": set(),
}

MAX_LINES = 500
GENERATED = ("sdk_python/swarmrl_proto/", "sdk_stubs/")
SOURCE_DIRS = ("sdk_python", "server", "examples", "benchmarks", "scripts", "tools", "tests")


def project_modules() -> list[str]:
    return sorted(m for m in graph().modules if not m.startswith("swarmrl_proto"))


def strongly_connected(nodes: list[str], edges: dict[str, set[str]]) -> list[set[str]]:
    """Tarjan's components, iteratively (the graph is deep enough to matter)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[set[str]] = []
    for root in nodes:
        if root in index:
            continue
        work = [(root, iter(sorted(edges.get(root, ()))))]
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
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                found.append(component)
    return found


def layered(module: str) -> bool:
    names = [S + name for layer in LAYERS for name in layer]
    return any(module == n or module.startswith(n + ".") for n in names) or any(
        n.startswith(module + ".") for n in names)  # a package split over layers


def test_the_graph_is_the_whole_project() -> None:
    modules = set(project_modules())
    assert {"swarmrl._cli", "swarmrl_server.app", "swarmrl_server.trainer.trainer"} <= modules
    unplaced = sorted(m for m in modules if m.startswith(S) and not layered(m))
    assert not unplaced, "place these in LAYERS"
    gone = [name for layer in LAYERS for name in layer if S + name not in modules]
    assert not gone


def test_strongly_connected_finds_a_circle() -> None:
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert [sorted(c) for c in strongly_connected(["a", "b", "c", "d"], edges)
            if len(c) > 1] == [["a", "b", "c"]]


def test_no_import_circle() -> None:
    modules = project_modules()
    edges = {m: graph().find_modules_directly_imported_by(m) & set(modules) for m in modules}
    circles = {tuple(sorted(c)) for c in strongly_connected(modules, edges) if len(c) > 1}
    assert circles == KNOWN["circles"], "circles (left: found, right: known)"


def test_no_import_up_the_layers() -> None:
    layers = [grimp.Layer(*(S + name for name in layer), independent=layer in INDEPENDENT)
              for layer in LAYERS]
    found = {}
    for dep in graph().find_illegal_dependencies_for_layers(layers=layers):
        routes = sorted(f"{sorted(r.heads)} -> {sorted(r.tails)}" for r in dep.routes)
        found[(dep.importer.removeprefix(S), dep.imported.removeprefix(S))] = routes
    # A new breach: import downwards instead (pass the thing in from above).
    assert set(found) == KNOWN["layers"], found


@pytest.mark.parametrize("importer, imported",
                         [(a, b) for a, bs in APART.items() for b in bs])
def test_kept_apart(importer: str, imported: str) -> None:
    chain = graph().find_shortest_chain(importer=S + importer, imported=S + imported,
                                        as_packages=True)
    assert chain is None, chain


def test_kept_apart_sees_a_chain() -> None:
    """The check above can fail: the app does reach the trainer and the swarm."""
    for imported in ("trainer", "swarm"):
        assert graph().find_shortest_chain(importer=S + "wiring", imported=S + imported,
                                           as_packages=True)


def imports_of(prefix: str) -> Iterator[tuple[str, str]]:
    for module in project_modules():
        if module == prefix or module.startswith(prefix + "."):
            for imported in graph().find_modules_directly_imported_by(module):
                yield module, imported


def test_the_server_imports_no_private_sdk_module() -> None:
    private = [(a, b) for a, b in imports_of("swarmrl_server")
               if b.startswith("swarmrl.") and any(p.startswith("_") for p in b.split(".")[1:])]
    assert not private


def test_the_sdk_imports_nothing_of_the_server() -> None:
    assert not [(a, b) for a, b in imports_of("swarmrl") if b.startswith("swarmrl_server")]
    # Nor names it (an import by string would not show in the graph).
    named = [p for p in (REPO / "sdk_python/swarmrl").rglob("*.py")
             if "swarmrl_server" in p.read_text()]
    assert not named


def test_the_http_door_imports_nothing_of_the_grpc_door() -> None:
    found = {(a, b) for a, b in imports_of(S + "http") if b.startswith(S + "grpc")}
    known = ("http", "grpc") in KNOWN["layers"]
    assert bool(found) == known, sorted(found)


def python_files() -> Iterator[tuple[str, str]]:
    for folder in SOURCE_DIRS:
        for path in sorted((REPO / folder).rglob("*.py")):
            rel = path.relative_to(REPO).as_posix()
            if not rel.startswith(GENERATED) and "node_modules" not in rel:
                yield rel, path.read_text()


def module_name(rel: str) -> str:
    for root in ("sdk_python/", "server/"):
        rel = rel.removeprefix(root)
    return rel.removesuffix(".py").removesuffix("/__init__").replace("/", ".")


def test_no_module_over_500_lines() -> None:
    long = {(module_name(rel),) for rel, text in python_files()
            if text.count("\n") > MAX_LINES}
    assert long == KNOWN["long"], sorted(long)


ENV_NAME = re.compile(r"[A-Z][A-Z0-9_]*TEST[A-Z0-9_]*")


def test_no_test_env_var_outside_tests() -> None:
    """No `*TEST*` name, as any string, where an environment could be read with it."""
    found = []
    for rel, text in python_files():
        if rel.startswith("tests/"):
            continue
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                found += [(rel, name) for name in ENV_NAME.findall(node.value)]
    assert not found


@pytest.mark.parametrize("text, hit", [('os.environ.get("SWARMRL_TEST_X")', True),
                                       ('os.environ.get("SWARMRL_HOST")', False)])
def test_the_env_scan_sees_a_test_variable(text: str, hit: bool) -> None:
    names = [n.value for n in ast.walk(ast.parse(text)) if isinstance(n, ast.Constant)]
    assert bool([m for name in names for m in ENV_NAME.findall(name)]) == hit


def imported_test_files(text: str) -> list[str]:
    """The test modules (`...test_*`) that `text` imports."""
    names = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.append(node.module)
        elif isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
    return [n for n in names if n.split(".")[-1].startswith("test_")]


def test_no_module_imports_a_test_file() -> None:
    found = [(rel, name) for rel, text in python_files() for name in imported_test_files(text)]
    assert not found


@pytest.mark.parametrize("text, hit", [("from tests.server.study.test_study_run import finish", True),
                                       ("from tests.server.study.study_support import finish", False)])
def test_the_import_scan_sees_a_test_file(text: str, hit: bool) -> None:
    assert bool(imported_test_files(text)) == hit


def test_tests_mirror_the_packages() -> None:
    """Every folder of tests/server names a package of the server (tests/server/http/ for
    swarmrl_server/http/), so a package's tests are found where the package is."""
    server = REPO / "server" / "swarmrl_server"
    for folder in (REPO / "tests" / "server").rglob("*"):
        if folder.is_dir() and folder.name != "__pycache__":
            rel = folder.relative_to(REPO / "tests" / "server")
            assert (server / rel / "__init__.py").is_file(), f"tests/server/{rel} names no package"
