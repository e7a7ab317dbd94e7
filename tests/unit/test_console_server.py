"""The console's web server without a broker: the page and its policy, events that resume where a
page was, a heartbeat on an idle stream, and the per-lane routes (read-only)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import orjson
import pytest
from aiohttp import ClientResponse
from aiohttp.test_utils import TestClient, TestServer

from console import server
from console.reader import Link
from console.server import Hub, build_app
from console.state import ConsoleState
from console.workers import WorkerTrack, parse_metrics
from tests.unit.console_fixtures import fed
from tests.unit.report_fixtures import EXP_DONE, sample_records
from topics.names import TopicNames


async def next_event(resp: ClientResponse) -> tuple[str, dict[str, object]]:
    """The next ``update`` event (id, data) of a stream."""
    event_id, data = "", b""
    while True:
        line = await asyncio.wait_for(resp.content.readline(), 10)
        if line.startswith(b"id: "):
            event_id = line[4:].strip().decode()
        elif line.startswith(b"data: "):
            data = line[6:].strip()
        elif line == b"\n" and data:
            return event_id, orjson.loads(data)


@pytest.fixture
async def client() -> AsyncIterator[tuple[TestClient[object, object], Hub]]:
    hub = Hub(fed(), TopicNames("guardian."), Link(), [])
    hub.state.flush()
    pump = asyncio.create_task(hub.pump())
    async with TestClient(TestServer(build_app(hub))) as c:
        yield c, hub
    pump.cancel()


async def test_the_page_carries_the_reports_policy_and_sends_nothing_elsewhere(
    client: tuple[TestClient[object, object], Hub],
) -> None:
    c, _ = client
    resp = await c.get("/")
    page = await resp.text()
    policy = resp.headers["Content-Security-Policy"]
    assert "default-src 'none'" in policy and "connect-src 'self'" in policy
    assert policy.endswith("; frame-ancestors 'none'")
    meta = policy.removesuffix("; frame-ancestors 'none'")
    assert f'content="{meta}"' in page
    assert "http://" not in page and "https://" not in page


async def test_events_resume_from_the_last_event_id_without_repeating_lanes(
    client: tuple[TestClient[object, object], Hub],
) -> None:
    c, hub = client
    async with c.get("/events") as resp:
        assert resp.headers["Content-Type"].startswith("text/event-stream")
        first_id, first = await next_event(resp)
    assert first["reset"] is True and len(first["lanes"]) == len(hub.state.lanes)  # type: ignore[arg-type]
    base = sample_records()["timeline"][0]
    hub.state.add("timeline", 1, 999, 1, None, orjson.dumps(dict(base, seq=77)))
    async with c.get("/events", headers={"Last-Event-ID": first_id}) as resp:
        _, again = await next_event(resp)
        while not again["lanes"]:  # the record is merged at the next flush
            _, again = await next_event(resp)
    assert again["reset"] is False
    assert [lane["key"] for lane in again["lanes"]] == [f"e:{base['experience_id']}"]  # type: ignore[index, union-attr]
    # a page of another console run (a restart) gets a full snapshot instead
    async with c.get("/events?last=1.5") as resp:
        _, other = await next_event(resp)
    assert other["reset"] is True


async def test_an_idle_stream_gets_a_heartbeat(
    client: tuple[TestClient[object, object], Hub], monkeypatch: pytest.MonkeyPatch
) -> None:
    c, _ = client
    monkeypatch.setattr(server, "HEARTBEAT_S", 0.05)
    monkeypatch.setattr(server, "OVERVIEW_EVERY_S", 3600.0)
    async with c.get("/events") as resp:
        await next_event(resp)
        lines = [await asyncio.wait_for(resp.content.readline(), 10) for _ in range(6)]
    assert b": heartbeat\n" in lines


async def test_lane_routes(client: tuple[TestClient[object, object], Hub]) -> None:
    c, _ = client
    assert (await c.get(f"/lane/e:{EXP_DONE}")).status == 200
    assert (await c.get("/lane/e:nope")).status == 404
    assert (await c.get("/lane/x:%3Cb%3E")).status == 400
    resp = await c.get(f"/lane/e:{EXP_DONE}/records.jsonl")
    assert resp.status == 200 and "attachment" in resp.headers["Content-Disposition"]
    assert all(
        orjson.loads(line)["topic"].startswith("guardian.") for line in (await resp.read()).splitlines()
    )
    report = await c.get(f"/lane/e:{EXP_DONE}/report")
    assert report.status == 200 and "connect-src" not in report.headers["Content-Security-Policy"]
    # read-only: nothing but GET
    assert (await c.post("/", data=b"x")).status == 405


def test_the_state_starts_empty_and_the_hub_says_so() -> None:
    hub = Hub(ConsoleState(), TopicNames("guardian."), Link(), [])
    event_id, body = hub.message(0, True)
    assert event_id.endswith(".0") and orjson.loads(body)["lanes"] == []


def test_the_overview_names_each_workers_partitions() -> None:
    """A lane links to the worker that holds its partition (the page's ``worker_of``)."""
    track = WorkerTrack(0, "http://127.0.0.1:9")
    track.observe(
        0.0, True, True, (), parse_metrics('guardian_consumer_lag_records{topic="t",partition="2"} 4\n')
    )
    hub = Hub(fed(), TopicNames("guardian."), Link(), [track])
    body = orjson.loads(hub.message(0, True)[1])
    assert body["worker_of"] == {"2": 0}
    assert 'id="worker-0"' in body["overview"] and "http://127.0.0.1:9" in body["overview"]
