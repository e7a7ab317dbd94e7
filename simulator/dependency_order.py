"""The order a device carries out a plan's steps or a dispatch's requests in: :func:`topo_order`,
by their ``depends_on``."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any


def topo_order(items: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Steps or requests in dependency order (``depends_on``), stable; unknown dependencies are ignored."""
    pending = list(items)
    ids = {str(i.get("step_id")) for i in pending}
    done: set[str] = set()
    ordered: list[Mapping[str, Any]] = []
    while pending:
        progressed = False
        for item in list(pending):
            deps = [str(d) for d in item.get("depends_on") or () if str(d) in ids]
            if all(d in done for d in deps):
                ordered.append(item)
                done.add(str(item.get("step_id")))
                pending.remove(item)
                progressed = True
        if not progressed:  # a cycle: the gate rejects those plans; keep the given order
            ordered.extend(pending)
            break
    return ordered
