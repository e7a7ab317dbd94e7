"""The measured worker gets a core of its own; on one core the bench says it cannot."""

from __future__ import annotations

import os
import subprocess
import sys

from bench import layout


def test_the_worker_gets_the_last_core_and_everyone_else_the_others() -> None:
    cores = layout.plan({0, 1, 2, 3})
    assert cores.pinned
    assert cores.worker == {3} and cores.others == {0, 1, 2}
    assert cores.as_dict() == {"pinned": True, "worker_cores": [3], "other_cores": [0, 1, 2]}
    assert cores.describe() == (
        "cores: the measured worker on core 3, the broker and the load generator on cores 0,1,2"
    )


def test_on_one_core_it_says_it_cannot_and_pins_nothing_apart() -> None:
    cores = layout.plan({5})
    assert not cores.pinned
    assert cores.worker == cores.others == {5}
    assert (
        cores.describe() == "cores: nothing pinned (1 core allowed: the worker cannot have a core of its own)"
    )


def test_a_started_process_and_its_threads_run_on_the_cores_given() -> None:
    last = frozenset({max(os.sched_getaffinity(0))})
    code = "import threading, time; threading.Thread(target=time.sleep, args=(30,)).start(); time.sleep(30)"
    child = subprocess.Popen([sys.executable, "-c", code])
    try:
        layout.pin(child.pid, last)
        tids = [int(t) for t in os.listdir(f"/proc/{child.pid}/task")]
        assert all(os.sched_getaffinity(tid) == last for tid in tids)
    finally:
        child.kill()
        child.wait(timeout=30)


def test_within_running_on_this_thread_is_on_those_cores_and_back_after() -> None:
    before = os.sched_getaffinity(0)
    last = frozenset({max(before)})
    with layout.running_on(last):
        assert os.sched_getaffinity(0) == last
    assert os.sched_getaffinity(0) == before
