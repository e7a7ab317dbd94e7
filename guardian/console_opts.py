"""The options of ``guardian console`` (the command itself is ``console.command``)."""

from __future__ import annotations

import argparse
from collections.abc import Callable


def _int_in(low: int, high: int) -> Callable[[str], int]:
    def check(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"a whole number from {low} to {high}, not {text!r}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"a whole number from {low} to {high}, not {text!r}")
        return value

    return check


def add_console_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--from",
        dest="start_from",
        default="latest",
        metavar="latest|earliest|TIME",
        help="where to start reading the output topics: latest (default), earliest, or an ISO 8601 "
        "time with a zone (e.g. 2026-07-30T12:00:00Z)",
    )
    p.add_argument("--host", help="address to listen on; default: GUARDIAN_CONSOLE_HOST, else 127.0.0.1")
    p.add_argument(
        "--port", type=_int_in(0, 65535), help="port to listen on; default: GUARDIAN_CONSOLE_PORT, else 8765"
    )
    p.add_argument(
        "--worker",
        action="append",
        metavar="URL",
        help="a worker's web address (e.g. http://127.0.0.1:6066), for its /ready and /metrics; "
        "repeatable; default: GUARDIAN_CONSOLE_WORKERS (comma-separated)",
    )
    for flag, metavar, high, what, default in (
        ("--max-experiences", "N", 1_000_000, "lanes held (least recently updated evicted first)", 1000),
        ("--records-per-experience", "M", 100_000, "records held per lane (the last ones)", 300),
    ):
        setting = "GUARDIAN_CONSOLE_" + flag.removeprefix("--").replace("-", "_").upper()
        p.add_argument(
            flag, type=_int_in(10, high), metavar=metavar, help=f"{what}; default: {setting}, else {default}"
        )
