"""The plan parts shared between experiences (:class:`PlanParts`), and :func:`compact`, which copies
an encoded value into bytes of its own length for what is kept in memory for long."""

from __future__ import annotations

from typing import Any

import orjson


def compact(raw: bytes) -> bytes:
    """``raw`` copied into a bytes object of its own length, for what is kept in memory for long:
    an ``orjson.dumps`` result keeps the whole buffer it was written in (about 4 KiB for a few
    hundred bytes, 8 KiB for 3 KB), so ten thousand of them cost 40-80 MB more than their length."""
    return memoryview(raw).tobytes()


class PlanParts:
    """Identical parts of plans, shared between the experiences that hold them.

    Plans are never changed in place, and a fleet's plans mostly differ only in their IDs: sharing
    their equal parts (steps, observation policy, budgets, ...) makes a cached device state several
    times smaller. Bounded: past ``limit`` distinct parts it starts over. Parts are shared only when
    their keys come in the same order too: a shared part is encoded (and iterated) exactly as the
    part it stands for, so what a device's outputs say never depends on another device's plan."""

    def __init__(self, limit: int = 4_096) -> None:
        self.limit = limit
        self.parts: dict[bytes, Any] = {}

    def share(self, plan: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name, value in plan.items():
            if isinstance(value, (dict, list)) and value:
                raw = orjson.dumps(value)
                shared = self.parts.get(raw)
                if shared is None:
                    if len(self.parts) >= self.limit:
                        self.parts.clear()
                    shared = self.parts[compact(raw)] = value
                out[name] = shared
            else:
                out[name] = value
        return out
