"""The worker's C allocator setting: large buffers freed go back to the system (glibc)."""

from __future__ import annotations

import os
import subprocess
import sys

import orjson

from streams.allocator import glibc_version, keep_large_blocks_mapped

#: a fresh process (glibc's threshold moves with what the process freed before): frees one large
#: buffer, then holds and frees twenty of 512 KiB; the RSS before, while held and after
_SCRIPT = """
import sys, orjson
from streams.allocator import keep_large_blocks_mapped

def rss_kb():
    with open("/proc/self/status") as fh:
        return next(int(line.split()[1]) for line in fh if line.startswith("VmRSS:"))

fixed = keep_large_blocks_mapped(environ={}) if sys.argv[1] == "fixed" else False
big = bytearray(8 << 20)  # a large fetch response, say
del big
before = rss_kb()
held = [bytearray(512 << 10) for _ in range(20)]
during = rss_kb()
del held
print(orjson.dumps({"fixed": fixed, "before": before, "during": during, "after": rss_kb()}).decode())
"""


def _run(mode: str) -> dict[str, int]:
    # glibc's own settings from the environment would fix the threshold in both runs
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    done = subprocess.run(
        [sys.executable, "-c", _SCRIPT, mode], capture_output=True, text=True, timeout=60, check=True, env=env
    )
    result: dict[str, int] = orjson.loads(done.stdout)
    return result


def test_large_buffers_freed_go_back_to_the_system_after_a_larger_one_was_freed() -> None:
    if glibc_version() is None:
        assert keep_large_blocks_mapped(environ={}) is False  # another C library: left alone
        return
    fixed, default = _run("fixed"), _run("default")
    assert fixed["fixed"] is True and default["fixed"] is False
    held_kb = 20 * 512
    for run in (fixed, default):
        assert run["during"] - run["before"] >= held_kb * 0.9  # the buffers were really held
    # with the threshold fixed, the 10 MiB go back at once; glibc's moving threshold keeps them
    assert fixed["after"] - fixed["before"] < held_kb * 0.2
    assert default["after"] - default["before"] > held_kb * 0.8


def test_a_threshold_the_user_gave_glibc_is_left_as_it_is() -> None:
    assert keep_large_blocks_mapped(environ={"MALLOC_MMAP_THRESHOLD_": "65536"}) is False
