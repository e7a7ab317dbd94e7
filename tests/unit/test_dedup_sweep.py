"""Pruning the dedup memory: only keys older than the window go, a bounded slice per sweep."""

from __future__ import annotations

from streams.sweep import expired_dedup_keys

WINDOW = 600_000


def key(device: str, event: str) -> bytes:
    return f"{device}\x1f{event}".encode()


def test_only_keys_older_than_the_window_expire() -> None:
    now = 10_000_000
    items = [
        (key("d1", "old"), f"{now - WINDOW - 1} observations:0:1".encode()),
        (key("d1", "edge"), f"{now - WINDOW} observations:0:2".encode()),
        (key("d2", "new"), f"{now - 5} observations:1:3".encode()),
        (b"__faust\x00offset__", b"42"),
    ]
    expired, cursor = expired_dedup_keys(items, now, WINDOW)
    assert expired == [key("d1", "old")]
    assert cursor is None


def test_a_sweep_scans_a_bounded_slice_and_says_where_to_go_on() -> None:
    now = 10_000_000
    items = [(key("d", f"e{i:03d}"), f"{now - WINDOW - 10} t:0:{i}".encode()) for i in range(10)]
    expired, cursor = expired_dedup_keys(items, now, WINDOW, max_scan=4)
    assert expired == [key("d", f"e{i:03d}") for i in range(4)]
    assert cursor == key("d", "e004")
    rest, end = expired_dedup_keys(items[4:], now, WINDOW, max_scan=100, max_delete=3)
    assert rest == [key("d", f"e{i:03d}") for i in range(4, 7)]
    assert end == key("d", "e007")
