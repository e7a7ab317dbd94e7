"""The simulated device fleet behind ``guardian simulate`` and ``guardian demo``: N home robots on a
real Kafka broker that play the device side honestly and speak only the wire contract (JSON records
of docs/CONTRACTS.md §3–§5, §9). The simulator also plays the cloud planner (it publishes each
device's §3 plan; the device plays it only once Guardian has started it, and never one Guardian
blocked or refused, obeying meanwhile what is dispatched to it); each device validates the plan
against its own catalog (device policy is authoritative), follows it with task events whose
``sequence`` increases, emits routine observations that reflect its own state, obeys the
dispatches addressed to it and answers with physical evidence only once the simulated action has
finished. Devices play the 17 stories of docs/SCENARIOS.md by id (HG-01..HG-16 and HG-04-B: a
durable outbox that re-sends with the same event IDs, buffering during a disconnect, invalid
records, cross-device correlation, device context before a plan and in answer to a refresh, ...)
on a simulated clock that is also the records' Kafka timestamp, seeded and reproducible; the fleet
watches the pipeline's outputs, and checks every experience against the expected outcomes of
:data:`simulator.scenarios.EXPECTED`.
"""
