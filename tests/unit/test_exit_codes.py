"""Every command keeps the README's exit-code table: the same cause gives the same code, in one line
on stderr and without a traceback (causes a unit test can produce: no broker is started here)."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.unit.kcat_exports import kcat_file
from topics.schema import cmd_schema_export


def guardian(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("GUARDIAN_")}
    return subprocess.run(
        [sys.executable, "-m", "guardian", *args],
        env={**clean, **(env or {})},
        capture_output=True,
        text=True,
        timeout=120,
    )


CLOSED = "127.0.0.1:1"  # no broker listens on port 1


@pytest.mark.parametrize(
    ("args", "env", "code", "says"),
    [
        # 2: a bad flag, setting or configuration file
        (["replay", "IN", "--out", "FILE/out"], {}, 2, "FILE is a file"),
        (["export", "--out", "FILE/x.jsonl", "--bootstrap", CLOSED], {}, 2, "FILE is a file"),
        (["schema", "export", "FILE/schemas"], {}, 2, "FILE is a file"),
        (["bench", "--out", "FILE/bench"], {}, 2, "FILE is a file"),
        (["demo", "--out", "FILE/demo"], {}, 2, "FILE is a file"),
        (["replay", "IN", "--out", "OUT"], {"GUARDIAN_CONTRACTS_FILE": "NOPE"}, 2, "broken registry"),
        (
            ["context", "summary", "IN", "--device", "airbot-0001"],
            {"GUARDIAN_CONTRACTS_FILE": "NOPE"},
            2,
            "NOPE",
        ),
        (
            ["start", "--device", "d1", "--bootstrap", CLOSED],
            {"GUARDIAN_CAPABILITIES_FILE": "NOPE"},
            2,
            "NOPE",
        ),
        (["replay", "IN", "--out", "OUT"], {"GUARDIAN_LANGUAGE": "fr"}, 2, "GUARDIAN_LANGUAGE"),
        # 3: no broker answered
        (["simulate", "--devices", "1", "--bootstrap", CLOSED, "--timeout", "30"], {}, 3, CLOSED),
        (["topics", "create", "--bootstrap", CLOSED], {}, 3, CLOSED),
        # 4: the input cannot be used as given
        (["replay", "NOPE", "--out", "OUT"], {}, 4, "NOPE: no such file"),
        (["replay", "BAD", "--out", "OUT"], {}, 4, "BAD:1: not a JSON line"),
        (["context", "summary", "NOPE", "--device", "airbot-0001"], {}, 4, "NOPE: no such file"),
        (["context", "summary", "BAD", "--device", "airbot-0001"], {}, 4, "BAD:1: not a JSON line"),
        (["context", "summary", "IN", "--device", "airbot-9999"], {}, 4, "no record of device"),
    ],
)
def test_each_cause_gives_its_code_in_one_line(
    tmp_path: Path, args: list[str], env: dict[str, str], code: int, says: str
) -> None:
    names = {
        "IN": str(kcat_file(tmp_path / "in.jsonl", "HG-05")),
        "OUT": str(tmp_path / "out"),
        "NOPE": str(tmp_path / "nope.json"),
        "BAD": str(tmp_path / "bad.jsonl"),
        "FILE": str(tmp_path / "a-file"),
    }
    (tmp_path / "a-file").write_text("x")
    (tmp_path / "bad.jsonl").write_text("{not json\n")

    def fill(text: str) -> str:
        for name, value in names.items():
            text = text.replace(name, value) if text.startswith(name) else text
        return text

    done = guardian(*(fill(a) for a in args), env={k: fill(v) for k, v in env.items()})
    assert done.returncode == code, done.stderr
    assert "Traceback" not in done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("guardian")]
    assert len(errors) == 1, done.stderr
    assert fill(says) in errors[0]


def test_schema_export_into_a_folder_it_cannot_write_is_a_usage_error(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("x")
    # past the argument checks (a folder can become unwritable between them and the export)
    assert cmd_schema_export(argparse.Namespace(dir=str(tmp_path / "a-file" / "schemas")), None) == 2
