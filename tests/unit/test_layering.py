"""The shape of the code: imports point one way, and the worker registers its agent and timers."""

from __future__ import annotations

import ast
from pathlib import Path

from config.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
#: package -> the project packages it may import
ALLOWED = {
    "topics": {"topics"},
    "tables": {"tables", "topics"},
    "supervisor": {"supervisor", "tables", "topics", "guardian"},
    "pipeline": {"pipeline", "supervisor", "tables", "topics"},
}
PROJECT = {
    "guardian",
    "topics",
    "tables",
    "pipeline",
    "supervisor",
    "streams",
    "simulator",
    "report",
    "bench",
}


def imported_packages(package: str) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for path in sorted((ROOT / package).rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            for name in names:
                top = name.split(".")[0]
                if top == "guardian" and name != "config.settings":
                    top = name  # only the settings leaf of the shell may be imported below it
                if top.split(".")[0] in PROJECT:
                    found.setdefault(str(path.relative_to(ROOT)), set()).add(top)
    return found


def test_imports_point_one_way() -> None:
    for package, allowed in ALLOWED.items():
        for path, tops in imported_packages(package).items():
            assert tops <= allowed, f"{path} imports {sorted(tops - allowed)}"


def test_the_worker_registers_its_pipeline_and_timers(tmp_path: Path) -> None:
    from streams.worker import build_worker_app

    settings = Settings.from_env({"GUARDIAN_DATA_DIR": str(tmp_path), "GUARDIAN_PARTITIONS": "4"})
    app, shell = build_worker_app(settings, bootstrap="127.0.0.1:9", worker_id="t")
    # the input topics and control go to the shell's inbox through faust's conductor, in batches
    assert app.topics.batch_sink == shell.receive
    assert set(app.topics.batch_topics) == {
        f"guardian.{s}" for s in ("plans", "device-context", "task-events", "observations", "control")
    }
    assert not app.agents
    assert shell.names.prefix == "guardian."
    assert {"devices", "seen", "owners"} <= set(app.tables.keys())
