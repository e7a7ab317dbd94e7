"""A simulated device obeying the pipeline's dispatches: :class:`DispatchHandler` takes them from
its inbox in the order they came and carries out their requests (a stop, a replan, a question)."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from simulator.dependency_order import topo_order
from simulator.device_actions import Actions
from simulator.device_records import DeviceRecords
from simulator.device_state import DeviceState
from simulator.device_tasks import TaskRunner


@dataclass(eq=False)
class DispatchHandler:
    """The device's inbox of dispatches, and how it obeys each."""

    records: DeviceRecords
    state: DeviceState
    actions: Actions
    runner: TaskRunner
    inbox: asyncio.Queue[dict[str, Any]] = field(default_factory=asyncio.Queue, init=False)

    async def obey_inbox(self) -> None:
        """Obey the dispatches in the order they came."""
        while True:
            await self.obey(await self.inbox.get())

    async def obey(self, dispatch: Mapping[str, Any]) -> None:
        """Carry out one dispatch of this device's experience; requests in ``depends_on`` order."""
        r, s = self.records, self.state
        if dispatch.get("experience_id") != r.experience_id or dispatch.get("device_id") != r.device_id:
            return
        dispatch_id = str(dispatch.get("dispatch_id"))
        requests = topo_order(dispatch.get("requests") or ())
        ops = {(str(q.get("capability")), str(q.get("operation"))) for q in requests}
        if ("security_patrol", "stop") in ops or ("movement", "return_to_station") in ops:
            await self._wind_down()
        moves = [
            q for q in requests if (q.get("capability"), q.get("operation")) == ("movement", "move_to_room")
        ]
        if moves:
            await self._reroute(moves, dispatch_id)
        failed: set[str] = set()
        for req in requests:
            if req in moves:
                continue
            deps = {str(d) for d in req.get("depends_on") or ()}
            if deps & failed:
                await r.task_event(
                    str(req.get("capability")),
                    str(req.get("operation")),
                    "blocked",
                    step_id=str(req.get("step_id")),
                    dispatch_id=dispatch_id,
                    reason_code="dependency_failed",
                )
                failed.add(str(req.get("step_id")))
                continue
            if not await self.actions.execute(req, dispatch_id):
                failed.add(str(req.get("step_id")))
        if s.winding_down and s.docked and s.security != "running":
            self.runner.finish()

    async def _wind_down(self) -> None:
        """A stop or a return: the patrol ends here (the plan's own remaining steps are dropped)."""
        self.state.winding_down = True
        self.state.phase = "winding down"
        await self.runner.stop_plan()
        self.state.route.clear()
        self.state.running.set()

    async def _reroute(self, moves: list[Mapping[str, Any]], dispatch_id: str) -> None:
        """A replan: the remaining route becomes the requested rooms (in dependency order)."""
        route: list[str] = []
        for req in moves:
            area = str((req.get("args") or {}).get("area_id"))
            step_id = str(req.get("step_id"))
            if area == self.state.current_area and self.state.security == "running":
                # already there: arrived
                await self.records.task_event(
                    "movement",
                    "move_to_room",
                    "completed",
                    step_id=step_id,
                    dispatch_id=dispatch_id,
                    signal="movement.arrived",
                    area_id=area,
                )
                continue
            self.state.route_requests[area] = (dispatch_id, step_id)
            route.append(area)
        self.state.route = deque(route)
