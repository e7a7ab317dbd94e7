"""The worker's membership of its consumer group: static membership, leaving for good, rejoining.

What faust/aiokafka does: faust joins as a dynamic member; a static member (aiokafka
``group_instance_id``) sends no LeaveGroup when it stops (``GroupCoordinator._maybe_leave_group``),
and aiokafka has LeaveGroup v0-v1 only, no member removal by instance ID; an error it holds back
for a fetch that never comes keeps a worker out of the group.

Why we differ: a worker killed and back 2 s later was a new member, and the broker rebalanced the
whole group twice after its 30 s session timeout; a static member scaled down held its partitions
that long; a worker whose join was refused (another consumer held the group) never joined. What
each part does is below. Private parts: aiokafka's ``GroupCoordinator`` (``_maybe_leave_group``,
``_closing``, ``request_rejoin``), faust's consumer ``_thread``; :func:`check` verifies them when
the worker starts (a missing attribute stops the worker naming the installed versions).

Upstream issue: faust-streaming #629, #175, #523 (rebalances; static membership is the mitigation
upstream suggests for a restarted member).

Proved by: ``tests/integration/test_static_membership.py``:
``test_a_static_member_killed_and_restarted_under_its_id_resumes_without_a_rebalance``,
``test_a_worker_leaving_for_good_hands_its_partitions_over_before_the_session_timeout``;
``tests/unit/test_liveness.py``: ``test_leave_group_v3_names_the_member_by_its_instance_id``,
``test_a_static_member_leaves_for_good_only_when_its_consumer_closes``,
``test_a_join_error_aiokafka_holds_back_is_taken_so_it_tries_again``.

**Static membership (KIP-345).** A worker given its ID (``--worker-id`` or ``GUARDIAN_WORKER_ID``)
joins its group as a static member under that ID (faust's ``consumer_group_instance_id``, which
faust-streaming 0.15.3 passes to aiokafka 0.14's ``group_instance_id``; aiokafka then sends it in
JoinGroup v5 and SyncGroup v3). Upstream faust's default is a dynamic member: a worker killed and
back 2 s later was a new member, the broker kept the dead one's partitions until its
``session.timeout.ms`` (30 s) and then rebalanced the whole group twice. A static member back
under its own ID within the session timeout takes its partitions back with no rebalance (the
group generation does not change). A worker without an ID stays a dynamic member (several
workers started alike, e.g. ``docker compose --scale``, must not share one instance ID: the
broker fences the older one).

**Leaving for good.** A static member sends no LeaveGroup when it stops (aiokafka
``GroupCoordinator._maybe_leave_group`` skips it when ``group_instance_id`` is set, as the Java
client does): its partitions stay with it until the session timeout, which is what a restart
wants and what a scale-down does not. With ``GUARDIAN_LEAVE_ON_STOP`` the worker, when its
consumer closes (after its last commit), removes itself by its instance ID: KIP-345's member
removal, LeaveGroup v3 with ``members=[{member_id, group_instance_id}]`` (Kafka 2.4+). aiokafka 0.14
has LeaveGroup v0-v1 only and no admin call for it, so the request is defined here
(:class:`RemoveMembers`, v3, the last version without flexible fields) and sent on the consumer's
own coordinator connection. Tests: ``tests/integration/test_static_membership.py``.

**Rejoining** (a heal step of ``streams.stalls``, and what a worker left without an assignment
does every ``GUARDIAN_READY_TIMEOUT_S``): aiokafka's ``GroupCoordinator.request_rejoin`` in the
consumer's thread, so faust is handed the assignment again and builds its fetch state anew, after
taking an error aiokafka holds back until someone takes it (:func:`request_rejoin`).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from aiokafka import errors as kafka_errors
from aiokafka.consumer.group_coordinator import GroupCoordinator
from aiokafka.protocol.api import Request, RequestStruct, Response
from aiokafka.protocol.types import Array, Int16, Int32, Schema, String

from streams.seam.parts import missing_part, part_of

log = logging.getLogger(__name__)

#: how long the member removal may take when the worker stops (it is one request)
LEAVE_TIMEOUT_S = 5.0


class LeaveGroupResponse_v3(Response):  # type: ignore[misc]
    API_KEY = 13
    API_VERSION = 3
    SCHEMA = Schema(
        ("throttle_time_ms", Int32),
        ("error_code", Int16),
        (
            "members",
            Array(
                ("member_id", String("utf-8")),
                ("group_instance_id", String("utf-8")),
                ("error_code", Int16),
            ),
        ),
    )


class LeaveGroupRequest_v3(RequestStruct):  # type: ignore[misc]
    API_KEY = 13
    API_VERSION = 3
    RESPONSE_TYPE = LeaveGroupResponse_v3
    SCHEMA = Schema(
        ("group_id", String("utf-8")),
        ("members", Array(("member_id", String("utf-8")), ("group_instance_id", String("utf-8")))),
    )


class RemoveMembers(Request[LeaveGroupRequest_v3]):  # type: ignore[misc]
    """LeaveGroup v3: members leave by their instance ID (KIP-345's member removal)."""

    API_KEY = 13

    def __init__(self, group_id: str, members: list[tuple[str, str]]) -> None:
        #: (member ID, or "" when not known; group instance ID)
        self.group_id = group_id
        self.members = members

    def build(self, request_struct_class: type[LeaveGroupRequest_v3]) -> LeaveGroupRequest_v3:
        return request_struct_class(self.group_id, self.members)


def instance_id(worker_id: str | None) -> str | None:
    """The group instance ID of a worker: its ID when one was given, else None (a dynamic member)."""
    return worker_id or None


def canonical_url(instance: str) -> str:
    """The URL faust advertises for a static member: its instance's, wherever it runs.

    faust's partition assignor puts the leader's idea of each member's canonical URL (by default
    ``http://<host>:<web port>``) in the member's assignment and asserts, on receiving it, that it
    is the member's own (``PartitionAssignor.on_assignment``). A static member restarted under its
    ID is handed back the assignment the broker kept for the instance, made for the process before
    it: restarted on another web port or host (a new container), the assertion failed on every
    attempt and the worker never got its partitions. Guardian uses no faust routing by URL."""
    return f"http://{instance}.guardian-worker.invalid"


def removal_errors(response: Any) -> list[str]:
    """The errors a LeaveGroup v3 answer carries, the group's and each member's (empty: removed)."""
    found = []
    if response.error_code:
        found.append(kafka_errors.for_code(response.error_code).__name__)
    for member_id, group_instance_id, code in response.members:
        if code:
            found.append(f"{group_instance_id or member_id}: {kafka_errors.for_code(code).__name__}")
    return found


async def remove_static_member(coordinator: Any) -> None:
    """Remove ``coordinator``'s static member from its group by its instance ID, then forget its
    generation (as aiokafka's own leave does); logged either way, never raised."""
    group, member, instance = coordinator.group_id, coordinator.member_id, coordinator._group_instance_id
    try:
        async with asyncio.timeout(LEAVE_TIMEOUT_S):
            response = await coordinator._send_req(RemoveMembers(group, [(member, instance)]))
        errors = removal_errors(response)
    except (kafka_errors.KafkaError, NotImplementedError, TimeoutError) as exc:
        errors = [repr(exc)]
    if errors:
        log.warning(
            "guardian: leaving group %s as %s failed (%s): its partitions move after the session timeout",
            group,
            instance,
            "; ".join(errors),
        )
    else:
        log.info("guardian: left group %s as %s: its partitions move now", group, instance)
    coordinator.reset_generation()


def leave_for_good(coordinator: Any) -> None:
    """Make ``coordinator`` (aiokafka's ``GroupCoordinator`` of a static member) remove its member
    from the group when it closes, instead of keeping it until the session timeout."""
    original = part_of(coordinator, "_maybe_leave_group", "aiokafka GroupCoordinator")
    closing = part_of(coordinator, "_closing", "aiokafka GroupCoordinator")
    if getattr(original, "guardian_leaves", False):
        return

    async def maybe_leave_group() -> None:
        if closing.done() and coordinator.generation > 0 and coordinator._group_instance_id is not None:
            await remove_static_member(coordinator)
        else:
            await original()

    maybe_leave_group.guardian_leaves = True  # type: ignore[attr-defined]
    coordinator._maybe_leave_group = maybe_leave_group


def group_coordinator(consumer: Any) -> Any:
    """aiokafka's ``GroupCoordinator`` behind faust's consumer (None: not started yet)."""
    thread = part_of(consumer, "_thread", "faust ThreadDelegateConsumer")
    aio = part_of(thread, "_consumer", "faust AIOKafkaConsumerThread")
    if aio is None:
        return None
    return part_of(aio, "_coordinator", "aiokafka AIOKafkaConsumer")


def leave_on_stop(app: Any) -> None:
    """From the first assignment on, the worker's consumer leaves its group for good when it
    stops (:func:`leave_for_good`; a dynamic member leaves anyway, as aiokafka does)."""

    def on_assigned(*_: Any, **__: Any) -> None:
        coordinator = group_coordinator(app.consumer)
        if coordinator is not None and coordinator._group_instance_id is not None:
            leave_for_good(coordinator)

    app.on_partitions_assigned.connect(on_assigned)


async def request_rejoin(consumer: Any, *, only_if_held: bool = False) -> str | None:
    """Have faust's consumer rejoin its group (in the consumer's own thread); the error that held
    its joining, if any (said, and taken, so that aiokafka tries again). ``only_if_held``: only
    when such an error was held (a member still joining on its own is left to it: a second
    request right after its join would rebalance the group once more).

    aiokafka hands an error it takes for fatal while joining (say, ``InconsistentGroupProtocol``:
    another kind of consumer holds the group) to the consumer's next fetch and waits until it is
    taken; faust fetches nothing without an assignment, so nobody took it and the worker never
    joined, even once the group was free (``tests/integration/test_worker_startup.py``)."""
    coordinator = group_coordinator(consumer)
    if coordinator is None:
        raise kafka_errors.KafkaError("the consumer has not started")
    thread = part_of(consumer, "_thread", "faust ThreadDelegateConsumer")

    def rejoin() -> str | None:
        held = None
        try:
            coordinator.check_errors()
        except kafka_errors.KafkaError as exc:
            held = repr(exc)
        if held is not None or not only_if_held:
            coordinator.request_rejoin()
        return held

    return await thread.call_thread(rejoin)  # type: ignore[no-any-return]


def check() -> None:
    """Verify, before the worker starts, what this module relies on in aiokafka."""
    for name in ("_maybe_leave_group", "_send_req", "request_rejoin", "reset_generation", "check_errors"):
        if not hasattr(GroupCoordinator, name):
            raise missing_part(f"aiokafka GroupCoordinator.{name}")
