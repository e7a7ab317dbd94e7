"""The console's worker roster: a compose service name with replicas is one worker per replica."""

from __future__ import annotations

from console.workers import WorkerRoster


class FakeResolver:
    """A name service whose answers the test changes; it records every name asked."""

    def __init__(self, answers: dict[str, list[str]]) -> None:
        self.answers = answers
        self.asked: list[tuple[str, int]] = []

    async def __call__(self, host: str, port: int) -> list[str]:
        self.asked.append((host, port))
        if host not in self.answers:
            raise OSError(f"no such host: {host}")
        return self.answers[host]


async def test_a_service_name_with_replicas_is_one_worker_per_replica_that_keeps_its_index() -> None:
    dns = FakeResolver({"worker": ["172.18.0.5", "172.18.0.4", "172.18.0.7"]})
    roster = WorkerRoster(["http://worker:6066/"], dns)

    first = await roster.refresh()
    assert [(t.index, t.url) for t in first] == [
        (0, "http://172.18.0.5:6066"),
        (1, "http://172.18.0.4:6066"),
        (2, "http://172.18.0.7:6066"),
    ]
    assert dns.asked == [("worker", 6066)]

    # scaled in: the replica gone is dropped; the others keep their index and their samples
    first[1].samples.append((1.0, 5, 100.0))
    dns.answers["worker"] = ["172.18.0.4", "172.18.0.7"]
    left = await roster.refresh()
    assert [t.url for t in left] == ["http://172.18.0.4:6066", "http://172.18.0.7:6066"]
    assert left[0] is first[1] and left[0].index == 1 and list(left[0].samples) == [(1.0, 5, 100.0)]

    # scaled out: a new replica gets an index never used before
    dns.answers["worker"] = ["172.18.0.4", "172.18.0.7", "172.18.0.9"]
    again = await roster.refresh()
    assert [t.index for t in again] == [1, 2, 3]

    # down to one address: the worker is polled under the URL as written
    dns.answers["worker"] = ["172.18.0.4"]
    [one] = await roster.refresh()
    assert one.url == "http://worker:6066"


async def test_addresses_and_unresolvable_names_are_polled_as_given() -> None:
    dns = FakeResolver({})
    roster = WorkerRoster(
        ["http://127.0.0.1:6066", "http://[::1]:6067", "http://localhost:6068", "http://gone:6066"], dns
    )
    tracks = await roster.refresh()
    assert [t.url for t in tracks] == [
        "http://127.0.0.1:6066",
        "http://[::1]:6067",
        "http://localhost:6068",
        "http://gone:6066",
    ]
    assert dns.asked == [("gone", 6066)]  # addresses and localhost are never looked up


async def test_ipv6_replicas_are_bracketed_and_the_default_port_follows_the_scheme() -> None:
    dns = FakeResolver({"workers.example": ["fd00::2", "fd00::3"]})
    tracks = await WorkerRoster(["https://workers.example"], dns).refresh()
    assert [t.url for t in tracks] == ["https://[fd00::2]:443", "https://[fd00::3]:443"]
    assert dns.asked == [("workers.example", 443)]
