"""``BrokerError``: the local Kafka broker cannot be fetched, started or stopped. Its message is one
line that names a way out (``WAYS_OUT``), printed by ``say``."""

from __future__ import annotations

import sys

WAYS_OUT = (
    "install Java 17+ and Maven (apt-get install openjdk-17-jre-headless maven), "
    "or run 'docker compose up -d kafka' and set GUARDIAN_KAFKA_BOOTSTRAP=127.0.0.1:9092, "
    "or set GUARDIAN_KAFKA_BOOTSTRAP to an existing cluster"
)


class BrokerError(RuntimeError):
    """The local broker cannot be fetched, started or stopped; the message is one line naming the way out."""


def say(message: str) -> None:
    print(f"guardian: {message}", file=sys.stderr, flush=True)
