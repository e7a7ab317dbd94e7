"""The parser class of the ``guardian`` command line (one-line usage errors, exit status 2) and
the options several of its commands share."""

from __future__ import annotations

import argparse
from typing import NoReturn

from guardian.cli_values import checked, host_ports, int_at_least, new_dir, topic_prefix

#: Exit status of a usage error (a bad flag or value).
USAGE = 2


class Parser(argparse.ArgumentParser):
    """An argparse parser whose errors are one line: ``guardian replay: --out: ... (see --help)``."""

    def error(self, message: str) -> NoReturn:
        self.exit(USAGE, f"{self.prog}: {message} (see '{self.prog} --help')\n")


def bootstrap_opt(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--bootstrap",
        type=checked("HOST:PORT", host_ports),
        metavar="HOST:PORT[,…]",
        help="Kafka broker address(es); default: GUARDIAN_KAFKA_BOOTSTRAP, else the local broker "
        "of 'guardian kafka up'",
    )


def prefix_opt(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--topic-prefix",
        type=checked("a topic prefix", topic_prefix),
        metavar="PREFIX",
        help="prefix of every topic name; default: GUARDIAN_TOPIC_PREFIX, else 'guardian.'",
    )


def partitions_opt(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--partitions",
        type=int_at_least(1),
        metavar="N",
        help="partitions of every topic (at least 1); default: GUARDIAN_PARTITIONS, else 8",
    )


def data_dir_opt(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument(
        "--data-dir",
        type=checked("a directory", new_dir),
        metavar="DIR",
        help=f"{what}; default: GUARDIAN_DATA_DIR, else ~/.cache/guardian",
    )


def supervisor_opt(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument(
        "--supervisor",
        choices=["rules", "gemini"],
        help=f"{what}: 'rules' (deterministic) or 'gemini'; default: GUARDIAN_SUPERVISOR, else rules",
    )


def language_opt(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument("--language", choices=["ko", "en"], help=f"{what}; default: GUARDIAN_LANGUAGE, else ko")


def add_command(sub: argparse._SubParsersAction[Parser], name: str, summary: str, description: str) -> Parser:
    parser: Parser = sub.add_parser(name, help=summary, description=description)
    return parser
