"""The functional core: docs/CONTRACTS.md §4.3 steps 5–11, task events, local decisions, decision application,
dispatch building and the timeline, as deterministic functions of state and one record
(``pipeline.core``, a facade over one module per step), and the processor that runs a raw
record through the gate and the core against a state store (``pipeline.runner``). Used alike by
the live worker and ``guardian replay``.
"""
