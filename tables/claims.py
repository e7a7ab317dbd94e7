"""The experience claims log, read: who owns an ``experience_id`` (docs/CONTRACTS.md §2 rule 9).

Before a worker applies a plan whose ``experience_id`` has no settled owner, it appends a claim
(key: the experience ID, value: the plan's device ID) to the claims topic, which has ONE partition:
every worker reads the same claims in the same order. An experience belongs to the device of its
FIRST claim in that log; later claims for it (another device's, or the owner's own again after a
crash) never move it. The log is never compacted and never expires, so the first claim stays first.

This module is the pure part: :class:`ClaimLog` folds the records read so far into the owners and
says whether a given claim has been read (``streams.claims`` does the Kafka I/O)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class ClaimLog:
    """The claims read so far, in log order, folded to experience -> owner (first claim wins)."""

    owners: dict[str, str] = field(default_factory=dict)
    #: the offset of the next record to read (every record below it has been applied)
    position: int = 0
    #: records that were not a usable claim (skipped: only Guardian writes claims)
    unusable: int = 0

    def apply(self, offset: int, key: bytes | None, value: bytes | None) -> None:
        """One record of the log, read at ``offset`` (records arrive in offset order)."""
        if offset < self.position:
            return  # read again (a re-fetch): already applied
        self.position = offset + 1
        try:
            experience_id = key.decode() if key is not None else ""
            device_id = value.decode() if value is not None else ""
        except UnicodeDecodeError:
            self.unusable += 1
            return
        if not experience_id or not device_id:
            self.unusable += 1
            return
        self.owners.setdefault(experience_id, device_id)

    def skip_to(self, offset: int) -> None:
        """Nothing readable below ``offset`` (an empty log, or records removed by the broker)."""
        self.position = max(self.position, offset)

    def owner(self, experience_id: str) -> str | None:
        """The settled owner (the device of the first claim read), or None: no claim read yet."""
        return self.owners.get(experience_id)

    def has_read(self, offset: int) -> bool:
        """Has the record at ``offset`` (and so everything before it) been applied?"""
        return self.position > offset

    def decide(self, experience_id: str, device_id: str) -> bool | None:
        """Does ``device_id`` own ``experience_id``? None while no claim for it has been read
        (the caller claims it and asks again once its own claim is read)."""
        owner = self.owner(experience_id)
        return None if owner is None else owner == device_id
