"""Reads of faust's and aiokafka's private state (nothing replaced): the producer, the committed
offsets, the assignment, the fetch state of each partition, the producer buffer's depth.

faust's producer buffer (what still goes through faust: owner-index writes, control records) stops
the stream whenever 100 messages wait, then drains them one by one: :func:`set_producer_buffer`
deepens it (a7c816b: latency p50 1.1 s -> 27 ms); faust still flushes it before every offset
commit.

Proved by: ``tests/unit/test_readiness.py``:
``test_the_fetch_state_of_a_partition_reads_faust_and_aiokafka``,
``test_the_reason_names_the_topics_from_the_real_consumer``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from faust.exceptions import ConsumerNotStarted

from streams.seam.parts import part_of


def aiokafka_producer(app: Any) -> Callable[[], Any]:
    """A function returning faust's running ``AIOKafkaProducer``."""
    return part_of(app.producer, "_ensure_producer", "faust.transport.drivers.aiokafka.Producer")  # type: ignore[no-any-return]


def committed_offsets(consumer: Any) -> Mapping[Any, int]:
    """TP -> committed offset, as faust's consumer keeps them (live: read it on every call)."""
    return part_of(consumer, "_committed_offset", "faust.transport.consumer.Consumer")  # type: ignore[no-any-return]


def set_producer_buffer(app: Any, max_messages: int) -> None:
    """How many messages faust's producer buffer holds before the stream waits for it."""
    buffer = part_of(app.producer, "buffer", "faust.transport.producer.Producer")
    part_of(buffer, "max_messages", "faust.transport.producer.ProducerBuffer")
    buffer.max_messages = max_messages


def assigned_topics(consumer: Any) -> list[str]:
    """The topics of the partitions assigned to faust's consumer, sorted (none while it has not
    started)."""
    try:
        assignment = consumer.assignment()
    except ConsumerNotStarted:
        return []
    return sorted({str(tp.topic) for tp in assignment})


def producer_started(app: Any) -> bool:
    """faust's aiokafka producer exists and has not stopped."""
    producer = part_of(app.producer, "_producer", "faust.transport.drivers.aiokafka.Producer")
    if producer is None:
        return False
    return not bool(part_of(producer, "_closed", "aiokafka.AIOKafkaProducer"))


def changelog_topic_names(tables: Iterator[Any] | list[Any]) -> list[str]:
    """The changelog topic of each faust table (public API: ``changelog_topic.get_topic_name``)."""
    return [str(t.changelog_topic.get_topic_name()) for t in tables]


@dataclass(frozen=True)
class FetchState:
    """Where the fetch of one assigned topic-partition stands, as faust's consumer and its aiokafka
    consumer keep it (aiokafka's side lives in faust's consumer thread: read from the worker's
    event loop, it is a snapshot that may be a moment old)."""

    #: the next offset aiokafka fetches from (None: no valid position yet, e.g. awaiting a reset)
    position: int | None
    #: records aiokafka fetched that faust has not taken yet
    fetched_unread: bool
    #: faust asks aiokafka for this partition's records (one of its active partitions)
    active: bool
    #: wall-clock time (ms) of the broker's last fetch answer for it (None: none yet)
    answered_ms: int | None


def fetch_states(consumer: Any) -> dict[tuple[str, int], FetchState]:
    """(topic, partition) -> :class:`FetchState` of every partition assigned to faust's consumer
    (empty while its aiokafka consumer is not running)."""
    thread = part_of(consumer, "_thread", "faust.transport.consumer.ThreadDelegateConsumer")
    aio = part_of(thread, "_consumer", "faust.transport.drivers.aiokafka.AIOKafkaConsumerThread")
    if aio is None:
        return {}
    active = part_of(consumer, "_active_partitions", "faust.transport.consumer.Consumer") or set()
    subscription = part_of(aio, "_subscription", "aiokafka.AIOKafkaConsumer").subscription
    records = part_of(part_of(aio, "_fetcher", "aiokafka.AIOKafkaConsumer"), "_records", "aiokafka.Fetcher")
    assignment = None if subscription is None else subscription.assignment
    if assignment is None:
        return {}
    states: dict[tuple[str, int], FetchState] = {}
    for tp in list(assignment.tps):
        state = assignment.state_value(tp)
        if state is None:
            continue
        states[(str(tp.topic), int(tp.partition))] = FetchState(
            position=int(state.position) if state.has_valid_position else None,
            fetched_unread=tp in records,
            active=tp in active,
            answered_ms=None if state.timestamp is None else int(state.timestamp),
        )
    return states
