"""The parts of ``guardian bench``, in the order ``--only`` lists them."""

from __future__ import annotations

PARTS = (
    "pipeline",
    "latency",
    "passthrough",
    "faust",
    "broker",
    "core",
    "gate",
    "replay",
    "scaleout",
    "console",
)
