"""Records the merge holds (:class:`HeldRecords`): the per-device merge of the input topics
(``pipeline.order.DeviceMerge``, CONTRACTS §2 rule 11) and the plans held for their experience's
claim.

It decides nothing of the order itself (``pipeline/order.py`` does, for replay too); it decides
whether a plan must wait for its claim to be read back (:meth:`HeldRecords.unsettled`), claims an
admitted plan's experience on its way in (:meth:`HeldRecords.claim`), and keeps the gate's verdict
on it so the plan is judged once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pipeline.order import DeviceMerge
from pipeline.runner import Processor
from streams.claims import ClaimsReader
from streams.commit_batch import CommitBatch
from topics.gate import Admitted, Rejected
from topics.names import INPUT_SUFFIXES, TopicNames
from topics.records import ExperiencePlan

#: how long the merge holds a device's record for another topic of its partition (docs/CONTRACTS.md
#: §2 rule 11), counted on the pipeline's idle time only (``streams.inbox.Inbox.merge_clock``)
MERGE_MAX_HOLD_S = 10.0


def new_merge() -> DeviceMerge[Any]:
    return DeviceMerge(INPUT_SUFFIXES, MERGE_MAX_HOLD_S)


@dataclass
class HeldRecords:
    """The merge and the plans in it waiting for their claims (see the module)."""

    processor: Processor
    names: TopicNames
    #: the batch whose producer carries the claims
    batch: CommitBatch
    #: the experience claims (``streams.claims``): a plan goes through the merge only once its
    #: experience's owner is settled in the claims log (None: no claims, the owner index alone
    #: decides, e.g. unit tests)
    claims: ClaimsReader | None = None
    merger: DeviceMerge[Any] = field(default_factory=new_merge)
    #: (partition, offset) of a plan in the merge -> (its experience, its device, its receive time)
    claimed: dict[tuple[int, int], tuple[str, str, int]] = field(default_factory=dict)
    #: (partition, offset) of a plan the gate judged on its way into the merge (:meth:`claim`) ->
    #: that verdict, taken by its processing instead of admitting the plan a second time (a record
    #: at a plans offset never changes; forgotten when processed or on a rebalance)
    admitted_plans: dict[tuple[int, int], Admitted | Rejected] = field(default_factory=dict)

    def forget(self) -> None:
        """Partitions move: what the merge held is dropped (unacked: read again), and so are the
        claims waited for and the verdicts kept."""
        self.merger.drain()
        self.claimed.clear()
        self.admitted_plans.clear()

    def claim(self, msg: Any) -> None:
        """A plan entering the merge: if the gate admits it and no claim on its experience has been
        read yet, its claim goes to the claims log now (no wait here), and the plan stays in the
        merge until a claim on it is read back (:meth:`unsettled`). The merge keeps its device's
        later records behind it, and nothing popped waits for Kafka."""
        if self.claims is None:
            return
        at = round(msg.timestamp * 1000)
        verdict = self.processor.gate.admit(
            "plans",
            msg.key,
            msg.value,
            source_topic=msg.topic,
            partition=int(msg.partition),
            offset=int(msg.offset),
            received_at_ms=at,
        )
        self.admitted_plans[(int(msg.partition), int(msg.offset))] = verdict
        if not isinstance(verdict, Admitted) or not isinstance(verdict.record, ExperiencePlan):
            return  # dead-lettered by the core: it claims nothing
        plan = verdict.record
        if self.claims.settled(plan.experience_id, plan.device_id):
            return
        producer = self.batch.delivery.producer
        if producer is None:
            raise RuntimeError("the shell has no producer yet")
        self.claimed[(int(msg.partition), int(msg.offset))] = (plan.experience_id, plan.device_id, at)
        self.claims.request(producer, plan.experience_id, plan.device_id, at)

    def unsettled(self, msg: Any) -> bool:
        """Must this record stay in the merge (a plan whose experience has no settled owner yet)?"""
        if not self.claimed or self.claims is None:
            return False
        key = (int(msg.partition), int(msg.offset))
        claim = self.claimed.get(key)
        if claim is None or self.names.suffix_of(msg.topic) != "plans":
            return False
        if self.claims.holds(self.batch.delivery.producer, *claim):
            return True
        del self.claimed[key]
        return False
