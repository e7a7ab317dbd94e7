"""The workers as the console sees them: each worker's ``/ready`` and ``/metrics``, read by URL.

:func:`parse_metrics` and :class:`WorkerTrack` are plain (text and samples in, a view out);
:func:`poll` is the thin shell that fetches both pages, each request with a timeout.

Lag: ``guardian_consumer_lag_records`` summed over the worker's partitions. Its seconds behind are
an estimate: the lag divided by the rate at which the worker read input over the last samples
(``guardian_input_records_total``); the trend says whether the lag grew or shrank over the last
``TREND_SAMPLES`` samples.

A worker URL whose host name stands for several addresses (a compose service with replicas,
``http://worker:6066``) is one worker per address (:class:`WorkerRoster`), looked up again at
every poll, so that a replica scaled in or out is shown or dropped.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Final
from urllib.parse import urlsplit, urlunsplit

import aiohttp

TREND_SAMPLES: Final = 6
REQUEST_TIMEOUT_S: Final = 2.0
RESOLVE_TIMEOUT_S: Final = 2.0

#: a host name and port in, the addresses it stands for out (raises OSError or TimeoutError)
Resolve = Callable[[str, int], Awaitable[list[str]]]


@dataclass(frozen=True)
class Metrics:
    lag_records: int | None
    input_records: float
    model_calls: int
    fallbacks: int
    partitions: tuple[int, ...]


@dataclass(frozen=True)
class WorkerView:
    index: int
    url: str
    reachable: bool
    ready: bool
    missing: tuple[str, ...]
    lag_records: int | None
    lag_seconds: float | None
    trend: str
    partitions: tuple[int, ...]
    model_calls: int
    fallbacks: int


def _labels(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for part in text.split(","):
        name, _, value = part.partition("=")
        if name.strip():
            out[name.strip()] = value.strip().strip('"')
    return out


def parse_metrics(text: str) -> Metrics:
    """The few series the console shows, from a Prometheus text page (unknown lines ignored)."""
    lag: int | None = None
    partitions: set[int] = set()
    inputs = 0.0
    calls = fallbacks = 0
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        head, _, value_text = line.rpartition(" ")
        name, _, labels = head.partition("{")
        try:
            value = float(value_text)
        except ValueError:
            continue
        if name == "guardian_consumer_lag_records":
            lag = (lag or 0) + int(value)
            partition = _labels(labels.rstrip("}")).get("partition", "")
            if partition.isdigit():
                partitions.add(int(partition))
        elif name == "guardian_input_records_total":
            inputs += value
        elif name == "guardian_model_calls_total":
            calls += int(value)
        elif name == "guardian_model_fallbacks_total":
            fallbacks += int(value)
    return Metrics(lag, inputs, calls, fallbacks, tuple(sorted(partitions)))


@dataclass
class WorkerTrack:
    """One worker's last samples: (time in seconds, lag, input records read)."""

    index: int
    url: str
    samples: deque[tuple[float, int, float]] = field(default_factory=lambda: deque(maxlen=TREND_SAMPLES))
    view: WorkerView | None = None

    def observe(
        self, now_s: float, reachable: bool, ready: bool, missing: tuple[str, ...], metrics: Metrics | None
    ) -> WorkerView:
        if metrics is not None and metrics.lag_records is not None:
            self.samples.append((now_s, metrics.lag_records, metrics.input_records))
        lag_s: float | None = None
        trend = "—"
        if len(self.samples) >= 2:
            (t0, lag0, in0), (t1, lag1, in1) = self.samples[0], self.samples[-1]
            rate = (in1 - in0) / (t1 - t0) if t1 > t0 else 0.0
            if lag1 == 0:
                lag_s = 0.0
            elif rate > 0:
                lag_s = lag1 / rate
            trend = "growing" if lag1 > lag0 else ("shrinking" if lag1 < lag0 else "steady")
        self.view = WorkerView(
            index=self.index,
            url=self.url,
            reachable=reachable,
            ready=ready,
            missing=missing,
            lag_records=None if metrics is None else metrics.lag_records,
            lag_seconds=lag_s,
            trend=trend,
            partitions=() if metrics is None else metrics.partitions,
            model_calls=0 if metrics is None else metrics.model_calls,
            fallbacks=0 if metrics is None else metrics.fallbacks,
        )
        return self.view


async def poll(session: aiohttp.ClientSession, track: WorkerTrack, now_s: float) -> WorkerView:
    """Fetch the worker's ``/ready`` and ``/metrics`` (each with a timeout) and update its track."""
    timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S)
    reachable = ready = False
    missing: tuple[str, ...] = ()
    metrics: Metrics | None = None
    try:
        async with session.get(f"{track.url}/ready", timeout=timeout) as resp:
            reachable = True
            ready = resp.status == 200
            if not ready:
                body = await resp.json(content_type=None)
                if isinstance(body, dict) and isinstance(body.get("missing"), list):
                    missing = tuple(str(m)[:80] for m in body["missing"][:5])
        async with session.get(f"{track.url}/metrics", timeout=timeout) as resp:
            if resp.status == 200:
                metrics = parse_metrics(await resp.text())
    except (TimeoutError, aiohttp.ClientError, ValueError):
        pass
    return track.observe(now_s, reachable, ready, missing, metrics)


async def resolve_addresses(host: str, port: int) -> list[str]:
    """The addresses ``host`` stands for (the system's resolver, with a timeout), sorted."""
    loop = asyncio.get_running_loop()
    infos = await asyncio.wait_for(loop.getaddrinfo(host, port, type=socket.SOCK_STREAM), RESOLVE_TIMEOUT_S)
    return sorted({str(info[4][0]) for info in infos})


def _is_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


class WorkerRoster:
    """Owns the workers to poll and their tracks: each configured URL, or one worker per address
    when its host name stands for several (a compose service with replicas). A worker keeps its
    index and samples while its address stays; an address gone is dropped."""

    def __init__(self, urls: Sequence[str], resolve: Resolve = resolve_addresses) -> None:
        self._urls = [u.rstrip("/") for u in urls]
        self._resolve = resolve
        self._tracks: dict[str, WorkerTrack] = {}
        self._next_index = 0

    async def refresh(self) -> list[WorkerTrack]:
        """The workers as of now, in the order of the configured URLs."""
        current: list[str] = []
        for url in self._urls:
            current.extend(u for u in await self._expand(url) if u not in current)
        for url in current:
            if url not in self._tracks:
                self._tracks[url] = WorkerTrack(self._next_index, url)
                self._next_index += 1
        for url in set(self._tracks) - set(current):
            del self._tracks[url]
        return [self._tracks[u] for u in current]

    async def _expand(self, url: str) -> list[str]:
        parts = urlsplit(url)
        host = parts.hostname
        if host is None or host == "localhost" or _is_address(host):
            return [url]
        port = parts.port or (443 if parts.scheme == "https" else 80)
        try:
            addresses = await self._resolve(host, port)
        except (OSError, TimeoutError):  # not resolvable now: polled as given, shown unreachable
            return [url]
        if len(addresses) <= 1:
            return [url]
        hosts = (f"[{a}]" if ":" in a else a for a in addresses)
        return [urlunsplit(parts._replace(netloc=f"{h}:{port}")) for h in hosts]
