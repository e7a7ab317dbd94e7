"""The value types of the ``guardian`` command line: converters that check one argument's text
and say, in one line, what is wrong with it."""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable, Sequence
from pathlib import Path

from guardian.cli_checks import check_creatable

_ID = re.compile(r"[A-Za-z0-9_.:-]{1,128}")
_TOPIC_PREFIX = re.compile(r"[A-Za-z0-9._-]{0,200}")
_HOST_PORT = re.compile(r"\[?[A-Za-z0-9_.:-]+\]?:(\d{1,5})")


def checked(kind: str, check: Callable[[str], object]) -> Callable[[str], object]:
    def convert(text: str) -> object:
        try:
            return check(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc) or f"not {kind}: {text!r}") from None

    convert.__name__ = kind  # argparse names the type in its messages
    return convert


def int_at_least(low: int) -> Callable[[str], object]:
    def check(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise ValueError(f"{text!r} is not a whole number") from None
        if value < low:
            raise ValueError(f"{value} is below {low}")
        return value

    return checked(f"a whole number >= {low}", check)


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{text!r} is not a number") from None
    if not value > 0 or value == float("inf"):
        raise ValueError(f"{text} must be a number above 0")
    return value


def identifier(text: str) -> str:
    if not _ID.fullmatch(text):
        raise ValueError(f"{text!r} is not an ID (1-128 characters of A-Z a-z 0-9 _ . : -)")
    return text


def host_ports(text: str) -> str:
    for part in text.split(","):
        m = _HOST_PORT.fullmatch(part.strip())
        if m is None or not 0 < int(m.group(1)) < 65536:
            raise ValueError(f"{part.strip()!r} is not HOST:PORT")
    return text


def topic_prefix(text: str) -> str:
    if not _TOPIC_PREFIX.fullmatch(text):
        raise ValueError(f"{text!r} is not a topic prefix (letters, digits, '.', '_', '-')")
    return text


def csv_of(allowed: Sequence[str]) -> Callable[[str], object]:
    def check(text: str) -> str:
        items = [s.strip() for s in text.split(",") if s.strip()]
        unknown = [s for s in items if s not in allowed]
        if not items or unknown:
            raise ValueError(f"{text!r}: choose from {', '.join(allowed)}")
        return ",".join(items)

    return checked("a comma-separated list", check)


def worker_counts(text: str) -> str:
    counts = [int(s) for s in text.split(",") if s.strip()]
    if not counts or not all(1 <= n <= 16 for n in counts):
        raise ValueError(f"{text!r}: worker counts from 1 to 16")
    return ",".join(str(n) for n in counts)


def scenario(text: str) -> list[str]:
    ids = [s.strip().upper() for s in text.split(",") if s.strip()]
    if not ids or not all(re.fullmatch(r"HG-\d{2}(-[A-Z])?", s) for s in ids):
        raise ValueError(f"{text!r} is not a scenario ID such as HG-05")
    return ids


def new_dir(text: str) -> str:
    """A directory to write into: it may exist (as a directory) or not yet."""
    if not text.strip():
        raise ValueError("needs a directory")
    path = Path(text)
    if path.exists() and not path.is_dir():
        raise ValueError(f"{text} exists and is not a directory")
    check_creatable(text)
    return text


def new_file(text: str) -> str:
    """A file to write ('-': standard output): not an existing directory."""
    if not text.strip():
        raise ValueError("needs a file name, or '-' for standard output")
    if text != "-" and Path(text).is_dir():
        raise ValueError(f"{text} is a directory; name a file")
    if text != "-":
        check_creatable(text)
    return text
