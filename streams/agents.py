"""The faust agents: they move records between Kafka, the tables and the functional core.

One agent reads the four input topics and the internal ``control`` topic (all co-partitioned by
``device_id``), in batches. For each record it makes the record the current event (so table
writes go to the record's partition), hands it to :class:`pipeline.runner.Processor` and queues
the outputs on the producer. The outputs and the tables' changelog writes are flushed before the
input offsets are committed (faust flushes its producer before every commit), so a crash replays
records whose outputs may already be out: their IDs derive from their causes, so a replay
reproduces the same records.

Two timers turn wall-clock time into records on ``control`` (so their effects happen in stream
context, durably and in order with the device's records):

- ``confirm``: a quiet device's pending debounce change whose window has passed (§4.3 step 7);
- ``sweep``: prune dedup keys older than the dedup window, one partition at a time.

With an asynchronous decision backend (Gemini), promoted triggers go to
:class:`supervisor.lanes.Lanes`, which decides per device without blocking the stream and
writes each verdict back as a ``verdict`` record on ``control``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

from pipeline.core import Out
from pipeline.runner import Processed, Processor
from supervisor.verdict import Verdict
from tables.faust_tables import SEP, FaustStore, GuardianTables
from tables.state import Trigger
from topics.names import TopicNames

BATCH_MAX = 500
BATCH_WITHIN_S = 0.005
CONFIRM_EVERY_S = 0.2
SWEEP_EVERY_S = 60.0
SWEEP_MAX_DELETES = 20_000

VerdictSink = Callable[[str, int, Trigger, int], None]


@dataclass
class PipelineShell:
    """The per-app state of the shell (never module-global): store, pending confirmations, topics."""

    processor: Processor
    names: TopicNames
    tables: GuardianTables
    store: FaustStore
    out_topics: dict[str, Any]
    control_topic: Any
    #: device -> (partition, due receive-time ms) of its earliest pending debounce change
    pending_confirm: dict[str, tuple[int, int]] = field(default_factory=dict)
    #: partition -> latest Kafka timestamp processed (the partition's receive-time clock)
    stream_time: dict[int, int] = field(default_factory=dict)
    #: partition -> wall-clock seconds (monotonic) of the last record processed
    last_activity: dict[int, float] = field(default_factory=dict)
    #: an asynchronous decider: (device_id, partition, trigger, etag) -> None
    submit: VerdictSink | None = None
    processed: int = 0

    def emit(self, outs: list[Out]) -> None:
        for out in outs:
            self.out_topics[out.kind].send_soon(key=out.key.encode(), value=orjson.dumps(out.value))

    def track(self, done: Processed, partition: int) -> None:
        device_id = done.device_id
        if device_id is None:
            return
        dev = self.store.get_device(device_id)
        due: int | None = None
        if dev is not None and dev.debounce:
            for st in dev.debounce.values():
                if st.pending is not None:
                    at = st.pending.received_at_ms + st.window_ms
                    due = at if due is None else min(due, at)
        if due is None:
            self.pending_confirm.pop(device_id, None)
        else:
            self.pending_confirm[device_id] = (partition, due)
        if done.queued and self.submit is not None:
            exp = self.store.get_experience(device_id)
            etag = exp.etag if exp is not None else 0
            for trigger in done.queued:
                self.submit(device_id, partition, trigger, etag)

    def handle(self, msg: Any) -> None:
        """One consumed message (the current event is already set by the caller)."""
        partition = int(msg.partition)
        received_at_ms = round(msg.timestamp * 1000)
        suffix = self.names.suffix_of(msg.topic)
        if suffix != "control":
            if received_at_ms > self.stream_time.get(partition, 0):
                self.stream_time[partition] = received_at_ms
            self.last_activity[partition] = time.monotonic()
        if suffix == "control":
            self.control(msg.value, partition, received_at_ms)
            return
        if suffix is None:
            return
        done = self.processor.process(
            self.store,
            suffix,
            msg.key,
            msg.value,
            source_topic=msg.topic,
            partition=partition,
            offset=int(msg.offset),
            received_at_ms=received_at_ms,
        )
        self.processed += 1
        self.emit(done.outs)
        self.track(done, partition)

    def control(self, raw: bytes, partition: int, received_at_ms: int) -> None:
        try:
            cmd = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return
        if not isinstance(cmd, dict):
            return
        op = cmd.get("op")
        if op == "confirm":
            device_id = str(cmd.get("device_id"))
            now_ms = int(cmd.get("now_ms", received_at_ms))
            done = self.processor.confirm_quiet(self.store, device_id, now_ms)
            self.emit(done.outs)
            self.track(done, partition)
        elif op == "sweep":
            self.sweep(partition, received_at_ms)
        elif op == "verdict":
            device_id = str(cmd["device_id"])
            trigger = Trigger.from_dict(cmd["trigger"])
            v = cmd["verdict"]
            verdict = Verdict(
                decision=v["decision"],
                reason_code=v["reason_code"],
                rationale=v["rationale"],
                backend=v["backend"],
                replan_steps=tuple(v.get("replan_steps") or ()),
                keep_areas=tuple(v["keep_areas"]) if v.get("keep_areas") is not None else None,
                fallback_reason=v.get("fallback_reason"),
            )
            done = self.processor.apply(
                self.store,
                device_id,
                trigger,
                verdict,
                int(cmd["etag"]),
                int(cmd.get("at_ms", received_at_ms)),
            )
            self.emit(done.outs)
            self.track(done, partition)

    def sweep(self, partition: int, now_ms: int) -> int:
        now_ms = min(now_ms, self.stream_time.get(partition, now_ms))
        """Delete dedup keys of this partition older than the dedup window (bounded per call)."""
        window = self.processor.pipeline.dedup_window_ms
        store = self.tables.seen.data
        try:
            db = store._db_for_partition(partition)
        except (AttributeError, KeyError):
            return 0
        expired: list[bytes] = []
        for key, value in db.items():
            if SEP.encode() not in key:
                continue
            try:
                seen_at = int(value)
            except (TypeError, ValueError):
                continue
            if now_ms - seen_at > window:
                expired.append(bytes(key))
                if len(expired) >= SWEEP_MAX_DELETES:
                    break
        for key in expired:
            del self.tables.seen[key]
        return len(expired)

    def due_confirmations(self, wall_ms: int, idle_s: float = 1.0) -> list[tuple[str, int, int]]:
        """Devices whose pending debounce change is due: (device, partition, now_ms to confirm at).

        The clock is the partition's receive-time clock (the latest Kafka timestamp processed
        there), so a worker catching up on old records confirms exactly where a replay would; a
        partition that has been idle for ``idle_s`` follows the wall clock (a quiet device)."""
        due: list[tuple[str, int, int]] = []
        mono = time.monotonic()
        for device_id, (partition, at) in self.pending_confirm.items():
            now_ms = self.stream_time.get(partition, 0)
            if now_ms < at and mono - self.last_activity.get(partition, 0.0) >= idle_s:
                now_ms = max(now_ms, wall_ms)
            if at <= now_ms:
                due.append((device_id, partition, now_ms))
        for device_id, _, _ in due:
            del self.pending_confirm[device_id]
        return due

    def send_control(self, partition: int, key: str, cmd: dict[str, Any]) -> None:
        self.control_topic.send_soon(key=key.encode(), value=orjson.dumps(cmd), partition=partition)


def register_agents(app: Any, shell: PipelineShell) -> list[str]:
    """Declare the agent and timers on ``app``; returns the registered agent names."""
    names = shell.names
    inputs = app.topic(
        names.plans,
        names.device_context,
        names.task_events,
        names.observations,
        names.control,
        key_serializer="raw",
        value_serializer="raw",
        acks=True,
    )

    async def pipeline(stream: Any) -> None:
        async for events in stream.take_events(BATCH_MAX, within=BATCH_WITHIN_S):
            for event in events:
                stream._set_current_event(event)
                shell.handle(event.message)
            stream._set_current_event(None)

    app.agent(inputs, name="guardian.pipeline")(pipeline)

    async def confirm_quiet_devices() -> None:
        for device_id, partition, now_ms in shell.due_confirmations(int(time.time() * 1000)):
            shell.send_control(
                partition, device_id, {"op": "confirm", "device_id": device_id, "now_ms": now_ms}
            )

    app.timer(CONFIRM_EVERY_S, name="guardian.confirm")(confirm_quiet_devices)

    async def sweep_dedup_memory() -> None:
        for partition in sorted(shell.stream_time):
            shell.send_control(partition, f"sweep-{partition}", {"op": "sweep"})

    app.timer(SWEEP_EVERY_S, name="guardian.sweep")(sweep_dedup_memory)

    def on_rebalance(*_: Any, **__: Any) -> None:
        shell.store.clear_cache()

    app.on_partitions_revoked.connect(on_rebalance)
    app.on_partitions_assigned.connect(on_rebalance)
    return sorted(app.agents.keys())
