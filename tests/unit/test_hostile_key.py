"""Hostile Kafka keys (docs/CONTRACTS.md §2 rule 3, §10): a huge or non-text key is ``key_invalid``,
its dead letter shows and is published under a bounded form of it, and nothing a worker hands to
the producer is over Kafka's default message limit (a last-resort ``output_invalid`` dead letter
replaces an output that would be)."""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiokafka.errors import MessageSizeTooLargeError

from pipeline.core import Pipeline
from pipeline.runner import MemoryStore, Processor
from supervisor import rules
from tests.unit.seed_records import SEED_OBSERVATION, SEED_PLAN
from tests.unit.shell_fakes import Acked, shell_over
from tests.unit.table_fakes import Meta, RecordingProducer
from topics.envelope import Out
from topics.gate import Gate, Rejected
from topics.kafka_key import MAX_KEY_BYTES, bounded_key, key_problem, shown_key
from topics.outbound import KAFKA_DEFAULT_MESSAGE_BYTES, OUTPUT_MAX_BYTES, Cause, encode_output
from topics.records import DeadLetter
from topics.registry import load_registry

REGISTRY = load_registry()
GATE = Gate(REGISTRY)
#: the keys of the adversarial review: 600 KB, and 160 KB of control characters (six bytes each
#: once escaped in JSON)
HUGE = b"airbot-0001" + b"k" * 600_000
CONTROL = b"\x01" * 160_000
HOSTILE_KEYS = [
    pytest.param(HUGE, id="600KB"),
    pytest.param(CONTROL, id="160KB-control"),
    pytest.param(b"a" * (MAX_KEY_BYTES + 1), id="one-byte-over"),
    pytest.param(b"airbot-\xff\xfe", id="not-utf8"),
    pytest.param("airbot-\ud800", id="lone-surrogate-str"),
]


def admit(key: Any, value: bytes, kind: Any = "observations") -> Any:
    return GATE.admit(
        kind, key, value, source_topic="g.observations", partition=3, offset=7, received_at_ms=5
    )


def key_bytes(key: bytes | str) -> bytes:
    return key if isinstance(key, bytes) else key.encode("utf-8", "surrogatepass")


@pytest.mark.parametrize("key", HOSTILE_KEYS)
def test_an_oversized_or_non_text_key_is_key_invalid_and_never_copied_whole(key: bytes | str) -> None:
    for value in (orjson.dumps(SEED_OBSERVATION), b"not json", b"x" * 20_000):
        verdict = admit(key, value)
        assert isinstance(verdict, Rejected)
        letter = verdict.dead_letter
        assert letter.reason_code == "key_invalid"
        raw = key_bytes(key)
        assert letter.key is not None and letter.key == bounded_key(key)
        assert len(letter.key) < 100 and letter.key.isascii() and letter.key.isprintable()
        assert f"<key of {len(raw)} bytes, sha256 {hashlib.sha256(raw).hexdigest()[:16]}>" in letter.key
        assert letter.payload is None and letter.payload_sha256 == hashlib.sha256(value).hexdigest()
        assert len(orjson.dumps(verdict.value)) < 2_000


def test_a_key_within_the_bound_is_judged_on_as_before() -> None:
    """256 bytes of text is not ``key_invalid``: it fails the key comparison like any other key,
    and its dead letter shows it as it is."""
    key = "é" * (MAX_KEY_BYTES // 2)
    assert key_problem(key.encode()) is None and key_problem(key) is None
    letter = admit(key.encode(), orjson.dumps(SEED_OBSERVATION)).dead_letter
    assert (letter.reason_code, letter.key) == ("key_mismatch", key)
    assert key_problem("x" * 200 + "é" * 30) == "the record key of 260 bytes is over 256"
    assert admit(None, orjson.dumps(SEED_OBSERVATION)).dead_letter.reason_code == "key_mismatch"


def test_the_bounded_form_keeps_the_keys_leading_id_characters_its_size_and_hash() -> None:
    key = b"airbot-0001" + b"\x00" * 1000
    digest = hashlib.sha256(key).hexdigest()[:16]
    assert bounded_key(key) == f"airbot-0001<key of 1011 bytes, sha256 {digest}>"
    assert bounded_key(b"x" * 5000).startswith("x" * 32 + "<key of 5000 bytes")
    assert bounded_key("my alarm code 4711" * 20).startswith("my<key of 360 bytes")
    assert shown_key(None) is None and shown_key(b"airbot-0001") == "airbot-0001"


@pytest.mark.parametrize("key", HOSTILE_KEYS)
def test_the_dead_letter_of_a_hostile_key_is_published_under_its_bounded_form(key: bytes | str) -> None:
    processor = Processor(REGISTRY, Pipeline(REGISTRY), rules.decide)
    done = processor.process(
        MemoryStore(),
        "plans",
        key_bytes(key),
        orjson.dumps(SEED_PLAN),
        "g.plans",
        0,
        1,
        5,
    )
    (out,) = done.outs
    assert out.kind == "deadletter" and out.key == bounded_key(key) == out.value["key"]
    DeadLetter.model_validate(out.value)


class LimitedProducer(RecordingProducer):
    """A producer whose broker refuses a record batch over Kafka's default ``message.max.bytes``,
    as a real one does (``MessageSizeTooLargeError``)."""

    async def send_batch(self, builder: Any, topic: str, *, partition: int) -> asyncio.Future[Meta]:
        fut = await super().send_batch(builder, topic, partition=partition)
        size = sum(len(k or b"") + len(v or b"") for k, v in builder.records)
        if size > KAFKA_DEFAULT_MESSAGE_BYTES:
            fut = asyncio.get_running_loop().create_future()
            fut.set_exception(MessageSizeTooLargeError())
        return fut


class Message:
    def __init__(self, topic: str, partition: int, offset: int, key: bytes | None, value: bytes) -> None:
        self.topic, self.partition, self.offset = topic, partition, offset
        self.key, self.value, self.timestamp = key, value, 1785400000.1 + offset


def test_a_worker_dead_letters_hostile_keys_and_goes_on(tmp_path: Path) -> None:
    """The records of the review through the worker's shell to a producer with Kafka's limit: both
    dead-lettered ``key_invalid`` (published under bounded keys, each record far below the limit),
    nothing lost, and the plan after them in the same partition starts its experience."""

    async def main() -> None:
        producer = LimitedProducer(capacity=10**7)
        shell, lost = shell_over(tmp_path, producer, Acked())
        for offset, key in enumerate((HUGE, CONTROL)):
            shell.handle(Message("g.observations", 0, offset, key, orjson.dumps(SEED_OBSERVATION)))
        shell.handle(Message("g.plans", 0, 0, b"airbot-0001", orjson.dumps(SEED_PLAN)))
        shell.batch.unacked = ["m"]
        await shell.flush()
        await asyncio.gather(*shell.batch.acking)
        assert lost == []
        letters = [
            (k, orjson.loads(v or b""))
            for t, _, recs in producer.batches
            if t == "g.deadletter"
            for k, v in recs
        ]
        assert [d["reason_code"] for _, d in letters] == ["key_invalid", "key_invalid"]
        assert [k for k, _ in letters] == [bounded_key(HUGE).encode(), bounded_key(CONTROL).encode()]
        timeline = [
            orjson.loads(v or b"") for t, _, recs in producer.batches if t == "g.timeline" for _, v in recs
        ]
        assert any(e["stage"] == "goal" and e["device_id"] == "airbot-0001" for e in timeline)
        for _, _, records in producer.batches:
            assert all(len(k or b"") + len(v or b"") < 100_000 for k, v in records)

    asyncio.run(main())


def test_an_output_kafka_would_refuse_goes_as_its_output_invalid_dead_letter(tmp_path: Path) -> None:
    """The last resort: an output over the output limit (or one that cannot be encoded) is replaced
    by a small dead letter about the record that caused it; the worker goes on."""

    async def main() -> None:
        producer = LimitedProducer(capacity=10**7)
        shell, lost = shell_over(tmp_path, producer, Acked())
        cause = Cause("g.observations", 2, 41, b'{"event_id": "e"}', 1785400000100)
        shell.emit(
            [
                Out("timeline", "airbot-0001", {"summary": "x" * (KAFKA_DEFAULT_MESSAGE_BYTES + 1)}),
                Out("timeline", "airbot-0001", {"seq": 2}),
                Out("decisions", "airbot-0001", {"n": 2**70}),
            ],
            cause=cause,
        )
        shell.batch.unacked = ["m"]
        await shell.flush()
        await asyncio.gather(*shell.batch.acking)
        assert lost == []
        sent = {t: [orjson.loads(v or b"") for _, v in recs] for t, _, recs in producer.batches}
        assert sent["g.timeline"] == [{"seq": 2}]
        letters = sent["g.deadletter"]
        assert [(d["reason_code"], d["source_topic"], d["partition"], d["offset"]) for d in letters] == [
            ("output_invalid", "g.observations", 2, 41)
        ] * 2
        assert letters[0]["detail"].startswith("its timeline output of 1048")
        assert letters[1]["detail"] == "its decisions output cannot be encoded as JSON"
        for d in letters:
            DeadLetter.model_validate(d)
            assert d["key"] == "airbot-0001"
            assert d["payload_sha256"] == hashlib.sha256(cause.value or b"").hexdigest()

    asyncio.run(main())


def test_encode_output_keeps_what_fits() -> None:
    out = Out("timeline", "airbot-0001", {"summary": "y" * (OUTPUT_MAX_BYTES - 100)})
    enc = encode_output(out, None)
    assert enc.refused is None and enc.out is out and enc.key == b"airbot-0001"
    assert enc.value == orjson.dumps(out.value)
    over = encode_output(Out("timeline", "airbot-0001", {"summary": "y" * OUTPUT_MAX_BYTES}), None)
    assert over.refused is not None and over.out.kind == "deadletter" and len(over.value) < 2_000
