"""A console state ``fed`` the report's sample records, as they would come off the output topics."""

from __future__ import annotations

from typing import Any

import orjson

from console.state import ConsoleState
from tests.unit.report_fixtures import sample_records


def fed(state: ConsoleState | None = None, extra_dead: list[dict[str, Any]] | None = None) -> ConsoleState:
    """The report's sample records fed as they would come off the output topics (dead letters last)."""
    state = state or ConsoleState()
    recs = sample_records()
    offset = 0
    for kind, name in (("timeline", "timeline"), ("decisions", "decisions"), ("dispatch", "dispatches")):
        for rec in recs[name]:
            offset += 1
            key = str(rec["device_id"]).encode()
            assert state.add(kind, 1, offset, 1785400000000 + offset, key, orjson.dumps(rec))
    for rec in [*recs["dead_letters"], *(extra_dead or [])]:
        offset += 1
        assert state.add("deadletter", 3, offset, rec["received_at_ms"], None, orjson.dumps(rec))
    return state
