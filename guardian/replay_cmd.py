"""``guardian replay FILE... --out DIR``, the command (docs/CONTRACTS.md §12, §13): its checks,
its messages and its exit codes; the replay itself is :func:`guardian.replay.replay_files`."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from config.exitcodes import Exit
from config.settings import Settings
from guardian.replay import ReplayInputError, StreamedReplay, check_inputs, replay_files
from guardian.replay_jobs import available_cpus, bounded_jobs
from guardian.replay_out import OutputError
from guardian.replay_progress import Progress, waiting_for_stdin

_PROG = "guardian replay"


def cmd_replay(args: argparse.Namespace, settings: Settings) -> int:
    out_dir = Path(args.out)
    requested = int(getattr(args, "jobs", None) or 1)
    if requested < 1:
        print(f"{_PROG}: --jobs must be at least 1", file=sys.stderr)
        return Exit.USAGE
    jobs, warning = bounded_jobs(requested, available_cpus())
    report = not getattr(args, "no_report", False)
    files = list(args.files)
    try:
        check_inputs(files, out_dir)
    except ReplayInputError as exc:
        print(f"{_PROG}: {exc}", file=sys.stderr)
        return Exit.BAD_INPUT
    except OutputError as exc:
        print(f"{_PROG}: {exc}", file=sys.stderr)
        return Exit.USAGE
    if warning is not None:
        print(f"{_PROG}: warning: {warning}", file=sys.stderr)
    waiting_for_stdin(files, sys.stdin, sys.stderr)
    progress = Progress(sys.stderr)
    try:
        done = _replay(args, settings, files, out_dir, jobs, report, progress)
    except ReplayInputError as exc:
        progress.close()
        print(f"{_PROG}: {exc}", file=sys.stderr)
        return Exit.BAD_INPUT
    except (OutputError, OSError) as exc:
        progress.close()
        print(f"{_PROG}: {_written(exc)}", file=sys.stderr)
        return Exit.USAGE
    progress.close()
    s = done.summary
    if done.records == 0:
        print(
            f"{_PROG}: warning: the input holds no records to replay; the outputs are empty", file=sys.stderr
        )
    print(
        f"replayed {done.records} records: {s['counts']['decisions']} decisions, "
        f"{s['counts']['dispatch']} dispatches, {s['counts']['timeline']} timeline entries, "
        f"{s['counts']['deadletter']} dead letters; {len(s['experiences'])} experiences; "
        f"{s['divergences']} divergences -> {out_dir}"
    )
    return Exit.OK


def _replay(
    args: argparse.Namespace,
    settings: Settings,
    files: list[str],
    out_dir: Path,
    jobs: int,
    report: bool,
    progress: Progress,
) -> StreamedReplay:
    if args.decisions == "model" and jobs == 1:
        from supervisor.sync import blocking_model_decider

        with blocking_model_decider(settings) as model:
            return replay_files(
                files,
                out_dir,
                settings=settings,
                mode="model",
                model_decider=model,
                report=report,
                progress=progress,
            )
    return replay_files(
        files, out_dir, settings=settings, mode=args.decisions, jobs=jobs, report=report, progress=progress
    )


def _written(exc: OSError | OutputError) -> str:
    """One line for an output that could not be written (a full disk, a folder gone meanwhile)."""
    if isinstance(exc, OutputError):
        return str(exc)
    where = f"{exc.filename}: " if exc.filename else ""
    return f"cannot write the outputs: {where}{exc.strerror or exc}"
