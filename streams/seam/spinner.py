"""faust's terminal spinner kept off (:func:`new_worker`, :func:`restore_log_level`).

What faust does: ``faust.Worker`` draws a spinner (cursor escape codes) on its output, adds a
spinner log handler at DEBUG and lowers the root logger to DEBUG.

Why we differ: every ``log.debug`` of faust and aiokafka (several per produced message) then built
a LogRecord that only advanced a spinner: a noticeable share of a busy worker's CPU
(docs/PERFORMANCE.md); and escape codes in a log file. The spinner runs only on a terminal and the
root level goes back to the configured ``--loglevel``. Private part:
``faust.utils.terminal.spinners.SpinnerHandler``.

Upstream issue: none filed.

Proved by: ``tests/integration/test_worker_startup.py`` (the worker's log lines).
"""

from __future__ import annotations

import logging
from typing import Any

import faust


def new_worker(app: Any, loglevel: str) -> Any:
    """faust's Worker for ``app``; its terminal spinner (cursor escape codes) only on a terminal."""
    worker = faust.Worker(app, loglevel=loglevel, quiet=True)
    if not worker.stdout.isatty():
        worker.spinner = None
    return worker


def is_spinner_handler(handler: logging.Handler) -> bool:
    from faust.utils.terminal.spinners import SpinnerHandler

    return isinstance(handler, SpinnerHandler)


def restore_log_level(root: logging.Logger) -> None:
    """Undo faust's terminal spinner setting the root logger to DEBUG.

    ``faust.Worker`` adds a spinner handler at DEBUG and lowers the root logger to DEBUG, so every
    ``log.debug`` of faust and aiokafka (several per produced message) builds a LogRecord that only
    advances a spinner: a noticeable share of a busy worker's CPU (docs/PERFORMANCE.md). The root
    level goes back to the lowest level of the other handlers (the configured ``--loglevel``); what
    is logged does not change."""
    levels = [h.level for h in root.handlers if not is_spinner_handler(h) and h.level]
    if levels and root.level < min(levels):
        root.setLevel(min(levels))
