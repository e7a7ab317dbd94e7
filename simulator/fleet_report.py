"""The end of a simulated fleet's run: :class:`FleetReport`, its :class:`Row` per experience and
totals, and :func:`format_table`, the final table as plain text."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any


@dataclass
class Row:
    """One line of the final table."""

    device: str
    experience: str
    scenario: str
    status: str
    expected: str
    decisions: int
    dispatches: int
    dead_letters: int
    ok: bool
    problems: list[str]


@dataclass
class FleetReport:
    """The fleet's final table and totals."""

    rows: list[Row]
    wall_s: float
    sim_s: float
    timed_out: bool
    config: dict[str, Any]
    totals: dict[str, int]
    errors: list[str]

    @property
    def ok(self) -> bool:
        return not self.timed_out and not self.errors and all(r.ok for r in self.rows)

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "wall_s": round(self.wall_s, 2),
            "sim_s": round(self.sim_s, 2),
            "timed_out": self.timed_out,
            "config": self.config,
            "totals": self.totals,
            "errors": self.errors,
            "experiences": [asdict(r) for r in self.rows],
        }


def format_table(rows: Sequence[Row], *, with_device: bool = True) -> str:
    """The final table as aligned plain text."""
    head = [
        "device",
        "experience",
        "scenario",
        "status",
        "expected",
        "decisions",
        "dispatches",
        "dead letters",
        "",
    ]
    if not with_device:
        head = head[1:]
    lines: list[list[str]] = [head]
    for r in rows:
        cells = [
            r.device,
            r.experience,
            r.scenario,
            r.status,
            r.expected,
            str(r.decisions),
            str(r.dispatches),
            str(r.dead_letters),
            "OK" if r.ok else "FAIL",
        ]
        lines.append(cells if with_device else cells[1:])
    widths = [max(len(line[i]) for line in lines) for i in range(len(head))]
    out = ["  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip() for line in lines]
    out.insert(1, "  ".join("-" * w for w in widths).rstrip())
    for r in rows:
        for p in r.problems:
            out.append(f"  {r.experience} ({r.scenario}): {p}")
    return "\n".join(out)
