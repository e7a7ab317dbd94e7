"""The simulated device fleet behind ``guardian simulate`` and ``guardian demo``: N home robots on a
real Kafka broker that play the device side honestly and speak only the wire contract (JSON records
of docs/CONTRACTS.md §3–§5). The simulator also plays the cloud planner (it publishes each device's §3
plan and hands it to the device once Guardian has accepted it); each device validates the plan
against its own catalog (device policy is authoritative), follows it with task events whose
``sequence`` increases, emits routine observations that reflect its own state, obeys the
dispatches addressed to it and answers with physical evidence only once the simulated action has
finished. Devices play the stories of docs/SCENARIOS.md by id (HG-01..HG-12: a durable outbox that
re-sends with the same event IDs, buffering during a disconnect, invalid records, cross-device
correlation, ...) on a simulated clock that is also the records' Kafka timestamp, seeded and
reproducible; the fleet watches the pipeline's outputs, and checks every experience against the
expected outcomes of :data:`simulator.scenarios.EXPECTED`.
"""
