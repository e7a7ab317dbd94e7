"""What the worker reports about itself (:class:`WorkerReports`): its Prometheus metrics
(``/metrics``) and its readiness (``/ready``), both None outside a worker."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from streams.metrics import GuardianMetrics


@dataclass
class WorkerReports:
    """The worker's metrics and readiness, held by the shell for the worker's watchdog
    (``streams.health.watchdog`` takes both) and counted into by the shell's objects."""

    #: the worker's Prometheus metrics (None: not counted, e.g. unit tests)
    metrics: GuardianMetrics | None = None
    #: the worker's readiness (``streams.health.Readiness``; None outside a worker)
    readiness: Any = None
