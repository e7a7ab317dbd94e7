"""The shape of the code: imports point one way, and the worker registers its agent and timers."""

from __future__ import annotations

import ast
from pathlib import Path

from config.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
#: layer (a package, or a sub-package named with a dot) -> the project layers it may import; the
#: layers stack: config <- topics <- tables <- supervisor <- pipeline <- streams <- guardian
ALLOWED = {
    "config": {"config"},
    "topics": {"topics"},
    "tables": {"tables", "topics"},
    "tables.store": {"tables.store", "tables", "topics"},
    "supervisor": {"supervisor", "tables", "topics", "config"},
    "pipeline": {"pipeline", "supervisor", "tables", "topics"},
    "streams": {"streams", "pipeline", "supervisor", "tables", "tables.store", "topics", "config"},
    "simulator": {"simulator", "topics", "config"},
    "report": {"report", "topics"},
    "guardian": {
        "guardian",
        "streams",
        "pipeline",
        "supervisor",
        "tables",
        "tables.store",
        "topics",
        "config",
        "simulator",
        "report",
        "bench",
    },
    # the live console reads the outputs and the workers from outside, and draws lanes with report's code
    "console": {"console", "guardian", "streams", "report", "topics", "config"},
    # the chaos run drives the product from outside: processes, the broker, export and replay
    "chaos": {"chaos", "guardian", "streams", "topics", "config"},
}
#: the layers holding the judgement and the state model: plain Python, no faust and no Kafka client
PURE = {"config", "topics", "tables", "supervisor", "pipeline", "report"}
STREAM_LIBRARIES = {"faust", "mode", "aiokafka", "rocksdict"}
PROJECT = {
    "config",
    "console",
    "guardian",
    "topics",
    "tables",
    "pipeline",
    "supervisor",
    "streams",
    "simulator",
    "report",
    "bench",
    "chaos",
}


def layer_of(module: str) -> str:
    """The layer of a dotted module or file path (``tables.store.writes`` -> ``tables.store``)."""
    parts = module.split(".")
    return "tables.store" if parts[:2] == ["tables", "store"] else parts[0]


def imports_by_file(package: str) -> dict[Path, set[str]]:
    """Every absolute import of each file of ``package`` (module-level or inside a function)."""
    found: dict[Path, set[str]] = {}
    for path in sorted((ROOT / package).rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                found.setdefault(path, set()).update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                found.setdefault(path, set()).add(node.module)
    return found


def file_layer(path: Path) -> str:
    return layer_of(".".join(path.relative_to(ROOT).with_suffix("").parts))


def test_imports_point_one_way() -> None:
    for package in ALLOWED:
        if "." in package:
            continue
        for path, modules in imports_by_file(package).items():
            layer = file_layer(path)
            project = {layer_of(m) for m in modules if m.split(".")[0] in PROJECT}
            assert project <= ALLOWED[layer], (
                f"{path.relative_to(ROOT)} imports {sorted(project - ALLOWED[layer])}"
            )


def test_the_pure_layers_import_no_stream_library() -> None:
    checked = 0
    for package in PURE:
        for path, modules in imports_by_file(package).items():
            if file_layer(path) not in PURE:
                continue  # tables.store: the faust/RocksDB store is the one impure part of tables
            checked += 1
            libraries = {m.split(".")[0] for m in modules} & STREAM_LIBRARIES
            assert not libraries, f"{path.relative_to(ROOT)} imports {sorted(libraries)}"
    assert checked > 20


def test_the_layering_rule_catches_a_wrong_import() -> None:
    """The checks above are not vacuous: the store is its own layer, and the state model below it."""
    assert layer_of("tables.store.faust_tables") == "tables.store"
    assert "tables.store" not in ALLOWED["pipeline"] and "tables.store" not in ALLOWED["supervisor"]
    assert not any("streams" in ALLOWED[layer] for layer in PURE)
    store_imports = set().union(*imports_by_file("tables/store").values())
    assert {m.split(".")[0] for m in store_imports} & STREAM_LIBRARIES


def test_the_worker_registers_its_pipeline_and_timers(tmp_path: Path) -> None:
    from streams.worker import build_worker_app

    settings = Settings.from_env({"GUARDIAN_DATA_DIR": str(tmp_path), "GUARDIAN_PARTITIONS": "4"})
    app, shell = build_worker_app(settings, bootstrap="127.0.0.1:9", worker_id="t")
    # the input topics and control go to the shell's inbox through faust's conductor, in batches
    assert app.topics.batch_sink == shell.inbox.receive
    assert set(app.topics.batch_topics) == {
        f"guardian.{s}" for s in ("plans", "device-context", "task-events", "observations", "control")
    }
    assert not app.agents
    assert shell.names.prefix == "guardian."
    assert {"devices", "seen", "owners"} <= set(app.tables.keys())


def module_graph() -> dict[str, set[str]]:
    """Every project module (``pipeline.core``) -> the project modules it imports, anywhere in the
    file (``from pipeline import dispatch`` names ``pipeline.dispatch`` when that is a module)."""
    files = {
        ".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__"): p
        for package in PROJECT
        for p in (ROOT / package).rglob("*.py")
    }
    graph: dict[str, set[str]] = {}
    for module, path in files.items():
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                found.update(a.name for a in node.names if a.name in files)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for a in node.names:
                    sub = f"{node.module}.{a.name}"
                    if sub in files:
                        found.add(sub)
                    elif node.module in files:
                        found.add(node.module)
        graph[module] = found - {module}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import loops of ``graph`` (one path per loop found)."""
    loops: list[list[str]] = []
    state: dict[str, int] = {}

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                loops.append([*path[path.index(nxt) :], nxt])
            elif nxt not in state:
                visit(nxt, [*path, nxt])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    return loops


def test_no_import_circles() -> None:
    graph = module_graph()
    assert len(graph) > 100
    assert circles(graph) == []


def test_the_circle_check_finds_a_loop() -> None:
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == [["a", "b", "c", "a"]]
