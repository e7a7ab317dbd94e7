"""The console's web server (aiohttp): the page, its Server-Sent Events, a lane's drawing, an
experience's records and offline report. Read-only: every route is a GET and none sends anything
to a device or a topic.

Events: every ``FLUSH_S`` the state merges what changed (:meth:`ConsoleState.flush`) and each open
stream gets one ``update`` event with the lanes changed since the ID it last got; the ID is
``RUN.SEQ`` (``RUN`` names this console run), so a page that reconnects with ``Last-Event-ID`` (or
``?last=``) gets only what it lacks, and a page of another run gets a full snapshot (``reset``).
A comment line every ``HEARTBEAT_S`` keeps an idle stream open.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any, Final

import orjson
from aiohttp import web

from console.page import CONSOLE_CSP_HEADER, console_page
from console.reader import Link
from console.render import kcat_lines, lane_fragment, offline_report, overview_fragment
from console.state import ConsoleState, valid_key
from console.workers import WorkerTrack, WorkerView
from report.style import PAGE_CSP
from topics.names import TopicNames

FLUSH_S: Final = 0.5
HEARTBEAT_S: Final = 15.0
#: the overview is sent at least this often (worker readiness and lag change without records)
OVERVIEW_EVERY_S: Final = 2.0

_HEADERS: Final = {
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


@dataclass
class Hub:
    """The console's state and what the streams wait on."""

    state: ConsoleState
    topics: TopicNames
    link: Link
    workers: list[WorkerTrack]
    run_id: str = field(default_factory=lambda: str(int(time.time() * 1000)))
    tick: asyncio.Event = field(default_factory=asyncio.Event)
    overview_version: int = 0

    def worker_views(self) -> list[WorkerView]:
        return [w.view for w in self.workers if w.view is not None]

    def message(self, since: int, reset: bool) -> tuple[str, bytes]:
        changed, gone, full = self.state.since(since)
        views = self.worker_views()
        worker_of = {str(p): v.index for v in views for p in v.partitions}
        body = {
            "reset": reset or full,
            "lanes": changed,
            "removed": gone,
            "overview": overview_fragment(self.state, views),
            "down_since_ms": self.link.down_since_ms,
            "worker_of": worker_of,
        }
        return f"{self.run_id}.{self.state.seq}", orjson.dumps(body)

    async def pump(self) -> None:
        """Merge changes every FLUSH_S and wake the streams (at least every OVERVIEW_EVERY_S)."""
        last_seq, last_link, last_sent = -1, object(), 0.0
        while True:
            await asyncio.sleep(FLUSH_S)
            seq = self.state.flush()
            now = time.monotonic()
            link = self.link.down_since_ms
            if seq != last_seq or link != last_link or now - last_sent >= OVERVIEW_EVERY_S:
                last_seq, last_link, last_sent = seq, link, now
                self.tick.set()
                self.tick = asyncio.Event()


def _resume_from(request: web.Request, run_id: str) -> tuple[int, bool]:
    """The sequence a reconnecting page had (0 and a reset when it is of another run or none)."""
    last = request.headers.get("Last-Event-ID") or request.query.get("last") or ""
    run, _, seq = last.partition(".")
    if run == run_id and seq.isdigit():
        return int(seq), False
    return 0, True


def build_app(hub: Hub, title: str = "Guardian fleet console") -> web.Application:
    app = web.Application()

    async def page(_: web.Request) -> web.Response:
        return web.Response(
            text=console_page(title, hub.state.max_lanes),
            content_type="text/html",
            headers={**_HEADERS, "Content-Security-Policy": CONSOLE_CSP_HEADER},
        )

    async def events(request: web.Request) -> web.StreamResponse:
        seq, reset = _resume_from(request, hub.run_id)
        resp = web.StreamResponse(headers={**_HEADERS, "Content-Type": "text/event-stream"})
        await resp.prepare(request)
        try:
            await resp.write(b"retry: 2000\n\n")
            while True:
                event_id, data = hub.message(seq, reset)
                seq, reset = hub.state.seq, False
                await resp.write(b"id: " + event_id.encode() + b"\nevent: update\ndata: " + data + b"\n\n")
                tick = hub.tick
                while True:
                    try:
                        await asyncio.wait_for(tick.wait(), HEARTBEAT_S)
                        break
                    except TimeoutError:
                        await resp.write(b": heartbeat\n\n")
        except ConnectionResetError:  # the page went away (closed, reloaded, paused)
            return resp

    def _key(request: web.Request) -> str:
        key = request.match_info["key"]
        if not valid_key(key):
            raise web.HTTPBadRequest(text="not a lane key")
        return key

    async def lane(request: web.Request) -> web.Response:
        html = lane_fragment(hub.state, _key(request))
        if html is None:
            raise web.HTTPNotFound(text="this lane is not held")
        return web.Response(text=html, content_type="text/html", headers=_HEADERS)

    async def records(request: web.Request) -> web.Response:
        key = _key(request)
        if key not in hub.state.lanes:
            raise web.HTTPNotFound(text="this lane is not held")
        name = key.replace(":", "-")
        return web.Response(
            body=kcat_lines(hub.state, key, hub.topics),
            content_type="application/x-ndjson",
            headers={**_HEADERS, "Content-Disposition": f'attachment; filename="{name}.jsonl"'},
        )

    async def report(request: web.Request) -> web.Response:
        html = offline_report(hub.state, _key(request))
        if html is None:
            raise web.HTTPNotFound(text="this lane is not held")
        return web.Response(
            text=html, content_type="text/html", headers={**_HEADERS, "Content-Security-Policy": PAGE_CSP}
        )

    async def healthz(_: web.Request) -> web.Response:
        status: dict[str, Any] = {"status": "ok", "broker_down_since_ms": hub.link.down_since_ms}
        return web.json_response(status, headers=_HEADERS)

    app.router.add_get("/", page)
    app.router.add_get("/events", events)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/lane/{key}", lane)
    app.router.add_get("/lane/{key}/records.jsonl", records)
    app.router.add_get("/lane/{key}/report", report)
    return app
