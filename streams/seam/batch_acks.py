"""The acks of a delivered batch at once (:func:`ack_all`).

What faust does: ``Message.ack`` per message: three lock holds and four calls each, the offset
joining the acked offsets its commit timer commits.

Why we differ: the pipeline acks a whole delivered batch (thousands of messages) at once; faust's
own final-ack bookkeeping, once per batch (part of ``guardian bench``'s floors gain,
docs/PERFORMANCE.md). Offsets are still committed by faust's commit timer, only for messages acked
here. Private parts: ``_acked``, ``_acked_index``, ``_committed_offset``, ``_n_acked``,
``_waiting_for_ack``, ``faust.types.tuples.ack_lock``.

Upstream issue: none (a cost, not a bug).

Proved by: ``tests/unit/test_consumer_offsets.py``:
``test_a_delivered_batch_is_acked_as_faust_acks_each_message``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from faust.types.tuples import ack_lock
from mode.utils.futures import notify


def ack_all(consumer: Any, messages: Iterable[Any]) -> int:
    """Release ``messages`` (handed over by :class:`BatchConductor`) to faust's consumer: faust's
    final-ack bookkeeping (``faust.transport.consumer.Consumer.ack``: the offset joins the acked
    offsets its commit timer commits), once per batch instead of three lock holds and four calls
    per message. Returns how many were acked now (not before, not below the committed offset)."""
    acked_index = consumer._acked_index
    acked = consumer._acked
    committed = consumer._committed_offset
    acks_enabled_for = consumer.app.topics.acks_enabled_for
    count = 0
    with ack_lock:
        for message in messages:
            if message.acked:
                continue
            message.acked = True
            message.refcount = 0
            if not acks_enabled_for(message.topic):
                continue
            tp, offset = message.tp, message.offset
            floor = committed[tp]
            if floor is None or offset >= floor:
                index = acked_index[tp]
                if offset not in index:
                    index.add(offset)
                    acked[tp].append(offset)
                    count += 1
        consumer._n_acked += count
    notify(consumer._waiting_for_ack)
    return count
