"""`guardian replay` never loses an analyst's data: inputs inside --out, failed replays, staging."""

from __future__ import annotations

import io
import os
import pty
import select
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from config.settings import Settings
from guardian import replay_out
from guardian.replay import OUTPUT_FILES, replay_files
from guardian.replay_jobs import bounded_jobs
from guardian.replay_out import OutputError, staged_outputs
from guardian.replay_progress import Progress
from tests.scenario_scripts import build
from tests.unit.kcat_exports import fleet, with_recorded_decisions, write
from tests.unit.replay_runs import replay

SETTINGS = Settings.from_env({})


def snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


def no_staging_left(*folders: Path) -> bool:
    return not any(p.name.startswith(".guardian-replay-") for f in folders for p in f.iterdir())


def one_line(text: str) -> str:
    lines = text.strip().splitlines()
    assert len(lines) == 1, text
    return lines[0]


# -- finding 9: an export named like an output ----------------------------------------------------
@pytest.mark.parametrize("name", ["timeline.jsonl", "decisions.jsonl", "summary.json"])
def test_an_input_inside_out_named_like_an_output_is_refused_and_kept(tmp_path: Path, name: str) -> None:
    export = tmp_path / "incident"
    export.mkdir()
    source = write(export / name, build("HG-05").records)
    other = write(export / "plans.jsonl", build("HG-01").records)
    kept = snapshot(export)
    for spelled in (str(source), f"{export}/./{name}", os.path.relpath(source)):
        done = replay(str(other), spelled, "--out", str(export))
        assert done.returncode == 2, done.stderr
        line = one_line(done.stderr)
        assert line.startswith("guardian replay: ") and spelled in line and "--out" in line
        assert snapshot(export) == kept  # nothing deleted, nothing written
        assert no_staging_left(export, tmp_path)


def test_an_input_reaching_out_through_a_link_is_refused(tmp_path: Path) -> None:
    export = tmp_path / "incident"
    export.mkdir()
    source = write(export / "timeline.jsonl", build("HG-05").records)
    (tmp_path / "link").symlink_to(export)
    done = replay(str(source), "--out", str(tmp_path / "link"))
    assert done.returncode == 2 and "timeline.jsonl" in one_line(done.stderr)
    assert source.read_bytes() == write(tmp_path / "again.jsonl", build("HG-05").records).read_bytes()


def test_an_input_inside_out_under_another_name_is_read_and_kept(tmp_path: Path) -> None:
    out = tmp_path / "incident"
    out.mkdir()
    source = write(out / "export.jsonl", build("HG-05").records)
    before = source.read_bytes()
    done = replay(str(source), "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert source.read_bytes() == before
    assert sorted(p.name for p in out.iterdir()) == sorted(
        ["export.jsonl", *(n for n in OUTPUT_FILES if n != "divergences.jsonl")]
    )


# -- a failed replay leaves the previous outputs --------------------------------------------------
@pytest.mark.parametrize(
    ("cause", "code"),
    [("unreadable line", 4), ("missing contracts file", 2), ("missing input", 4), ("no --out", 2)],
)
def test_a_failed_replay_leaves_the_previous_outputs_as_they_were(
    tmp_path: Path, cause: str, code: int
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    good = write(tmp_path / "good.jsonl", build("HG-05").records)
    assert replay(str(good), "--out", str(out)).returncode == 0
    before = snapshot(out)
    records = build("HG-01").records
    args = [str(write(tmp_path / "later.jsonl", records)), "--out", str(out)]
    env: dict[str, str] = {}
    if cause == "unreadable line":  # found late: the first file is replayed before it
        bad = write(tmp_path / "bad.jsonl", records)
        bad.write_bytes(bad.read_bytes() + b"{not json\n")
        args.insert(1, str(bad))
    elif cause == "missing contracts file":
        env["GUARDIAN_CONTRACTS_FILE"] = str(tmp_path / "nope.json")
    elif cause == "missing input":
        args.insert(1, str(tmp_path / "nope.jsonl"))
    else:
        (tmp_path / "plain").write_text("x")
        args[-1] = str(tmp_path / "plain" / "out")
    done = replay(*args, env=env)
    assert done.returncode == code, done.stderr
    assert "Traceback" not in done.stderr
    one_line(done.stderr)
    assert snapshot(out) == before
    assert no_staging_left(out, tmp_path)


def test_an_interrupted_replay_leaves_the_previous_outputs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "out"
    source = write(tmp_path / "in.jsonl", build("HG-05").records)
    replay_files([str(source)], out, settings=SETTINGS, report=False)
    before = snapshot(out)

    def interrupted(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr("guardian.replay.write_report", interrupted)
    with pytest.raises(KeyboardInterrupt):
        replay_files([str(write(tmp_path / "other.jsonl", build("HG-01").records))], out, settings=SETTINGS)
    assert snapshot(out) == before and no_staging_left(out, tmp_path)


def test_a_replay_into_a_new_folder_that_fails_leaves_no_folder(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(b"{not json\n")
    done = replay(str(bad), "--out", str(tmp_path / "new" / "out"))
    assert done.returncode == 4
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.jsonl"]


def test_a_folder_named_like_an_output_in_out_is_a_one_line_error(tmp_path: Path) -> None:
    out = tmp_path / "out"
    (out / "report.html").mkdir(parents=True)
    (out / "report.html" / "mine.txt").write_text("keep")
    done = replay(str(write(tmp_path / "in.jsonl", build("HG-05").records)), "--out", str(out))
    assert done.returncode == 2 and "report.html" in one_line(done.stderr)
    assert (out / "report.html" / "mine.txt").read_text() == "keep"


def test_outputs_are_staged_inside_out_when_its_parent_cannot_be_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    real = replay_out.tempfile.mkdtemp
    places: list[Path] = []

    def mkdtemp(prefix: str, dir: Path) -> str:
        places.append(Path(dir))
        if Path(dir) == tmp_path:
            raise PermissionError(13, "Permission denied")
        return real(prefix=prefix, dir=dir)

    monkeypatch.setattr(replay_out.tempfile, "mkdtemp", mkdtemp)
    with staged_outputs(out) as stage:
        (stage / "summary.json").write_text("{}")
    assert places == [tmp_path, out]
    assert sorted(p.name for p in out.iterdir()) == ["summary.json"]


def test_a_rename_that_fails_while_publishing_puts_the_previous_outputs_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    for name in ("decisions.jsonl", "summary.json", "divergences.jsonl"):
        (out / name).write_text(f"old {name}")
    before = snapshot(out)
    real = os.replace
    calls: list[str] = []

    def replace(src: Path, dst: Path) -> None:
        calls.append(str(dst))
        if len(calls) == 5:  # three moved aside, one new file in, then a failure
            raise OSError(28, "No space left on device")
        real(src, dst)

    monkeypatch.setattr(replay_out.os, "replace", replace)
    with pytest.raises(OutputError, match="No space left"), staged_outputs(out) as stage:
        for name in ("decisions.jsonl", "timeline.jsonl", "summary.json"):
            (stage / name).write_text(f"new {name}")
    assert snapshot(out) == before and no_staging_left(out, tmp_path)


# -- --jobs, progress, stdin, empty input, provenance ---------------------------------------------
def test_jobs_is_bounded_by_the_cpus_with_a_warning(tmp_path: Path) -> None:
    assert bounded_jobs(2, 8) == (2, None)
    jobs, warning = bounded_jobs(10**9, 2)
    assert jobs == 2 and warning is not None and "--jobs 1000000000" in warning
    source = write(tmp_path / "in.jsonl", build("HG-05").records)
    done = replay(str(source), "--out", str(tmp_path / "out"), "--jobs", "1000000")
    assert done.returncode == 0, done.stderr
    line = one_line(done.stderr)
    assert line.startswith("guardian replay: warning: --jobs 1000000 is more than the")
    assert orjson.loads((tmp_path / "out" / "summary.json").read_bytes())["counts"]["decisions"] == 1


def test_a_replay_whose_stderr_is_no_terminal_writes_nothing_there(tmp_path: Path) -> None:
    done = replay(str(write(tmp_path / "in.jsonl", fleet())), "--out", str(tmp_path / "out"))
    assert done.returncode == 0 and done.stderr == ""


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_shows_on_a_terminal_after_a_while_and_is_erased() -> None:
    now = [0.0]
    quiet = Progress(io.StringIO(), after_s=0, every_s=0)
    quiet.replaying(1, 2)
    assert quiet.stream.getvalue() == ""  # type: ignore[attr-defined]
    term = _Terminal()
    progress = Progress(term, after_s=3, every_s=0.5, clock=lambda: now[0])
    progress.replaying(10, 100)
    assert term.getvalue() == ""  # a short replay shows nothing
    now[0] = 3.0
    progress.replaying(50, 100)
    now[0] = 3.2
    progress.replaying(60, 100)  # too soon after the last update
    assert term.getvalue() == "\rreplaying: 50 of 100 records (50%) (3 s)\x1b[K"
    progress.close()
    assert term.getvalue().endswith("\r\x1b[K")


def test_a_replay_reports_its_progress_on_a_terminal(tmp_path: Path) -> None:
    term = _Terminal()
    source = write(tmp_path / "in.jsonl", fleet())
    replay_files(
        [str(source)], tmp_path / "out", settings=SETTINGS, progress=Progress(term, after_s=0, every_s=0)
    )
    assert "reading " in term.getvalue() and "replaying: " in term.getvalue()


def test_stdin_on_a_terminal_says_it_waits_and_an_empty_input_warns(tmp_path: Path) -> None:
    controller, terminal = pty.openpty()
    env = {k: v for k, v in os.environ.items() if not k.startswith("GUARDIAN_")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "guardian", "replay", "-", "--out", str(tmp_path / "out")],
        stdin=terminal,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    os.close(terminal)
    try:
        assert proc.stderr is not None
        ready, _, _ = select.select([proc.stderr], [], [], 60)  # a bounded wait for the notice
        assert ready, "no notice on stderr"
        first = proc.stderr.readline().decode()
        assert first.startswith("guardian replay: reading kcat -C -J lines from standard input")
        os.write(controller, b"\x04")  # Ctrl-D: end of input
        _, err = proc.communicate(timeout=60)
    finally:
        os.close(controller)
        proc.kill()
        proc.communicate()
    assert proc.returncode == 0, err
    assert one_line(err.decode()) == (
        "guardian replay: warning: the input holds no records to replay; the outputs are empty"
    )
    assert orjson.loads((tmp_path / "out" / "summary.json").read_bytes())["made_from"]["records"] == 0


def test_an_empty_file_warns_in_one_line(tmp_path: Path) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    done = replay(str(empty), "--out", str(tmp_path / "out"))
    assert done.returncode == 0
    assert "holds no records" in one_line(done.stderr)


def test_summary_and_report_say_what_they_were_made_from(tmp_path: Path) -> None:
    records = with_recorded_decisions(fleet())
    source = write(tmp_path / "in.jsonl", records)
    done = replay(str(source), "--out", str(tmp_path / "out"), env={"SOURCE_DATE_EPOCH": "1785400000"})
    assert done.returncode == 0, done.stderr
    made = orjson.loads((tmp_path / "out" / "summary.json").read_bytes())["made_from"]
    times = [r.ts for r in records if r.suffix != "decisions"]
    assert made["inputs"] == [{"file": str(source), "bytes": source.stat().st_size}]
    assert made["records"] == len(times)
    assert made["first_record_at"].startswith("2026-") and made["first_record_at"] < made["last_record_at"]
    assert made["made_at"] == "2026-07-30T08:26:40.000Z"
    assert made["guardian_version"] and made["guardian_version"] != "unknown"
    page = (tmp_path / "out" / "report.html").read_text(encoding="utf-8")
    assert f"Replayed from {source}" in page and "2026-07-30T08:26:40.000Z" in page
    # every divergence names its device and experience
    for line in (tmp_path / "out" / "divergences.jsonl").read_bytes().splitlines():
        entry = orjson.loads(line)
        assert entry["device_id"].startswith("airbot-") and entry["experience_id"].startswith("exp_")


def test_made_at_is_now_without_source_date_epoch(tmp_path: Path) -> None:
    done = replay_files(
        [str(write(tmp_path / "in.jsonl", build("HG-05").records))],
        tmp_path / "out",
        settings=SETTINGS,
        report=False,
        env={},
    )
    assert done.made_from["made_at"] > "2025-" and done.made_from["made_at"].endswith("Z")
    with pytest.raises(ValueError, match="SOURCE_DATE_EPOCH"):
        replay_files(
            [str(tmp_path / "in.jsonl")],
            tmp_path / "out",
            settings=SETTINGS,
            env={"SOURCE_DATE_EPOCH": "soon"},
        )
