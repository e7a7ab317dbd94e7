"""The claims' compact form: experience fingerprint -> owner device, in two flat arrays.

A claim is kept as the 64-bit BLAKE2b fingerprint of its ``experience_id`` (8 bytes) and the index
of its device in a list of the devices that own something (4 bytes), in an open-addressing table
at most two thirds full, instead of two Python strings in a dict (about 177 bytes a claim, 392 with
long IDs). The table never answers "free" for an experience that was claimed (its fingerprint is
there); it can answer "taken" for one that was not only when two IDs share a 64-bit fingerprint
(about one chance in 2**64 per new ID for each claim held).
"""

from __future__ import annotations

from array import array
from hashlib import blake2b

#: the table's starting number of slots (a power of two)
START_SLOTS = 1024
#: the table grows (doubles) once more than this share of its slots is taken
MAX_LOAD = 2 / 3
EMPTY = 0


def fingerprint(experience_id: str) -> int:
    """The 64-bit fingerprint of an experience ID (never 0, the empty slot's mark)."""
    fp = int.from_bytes(blake2b(experience_id.encode(), digest_size=8).digest(), "little")
    return fp or 1


class ClaimTable:
    """Fingerprint -> device index; a fingerprint, once in, is never removed or moved to another
    device (the first claim wins)."""

    __slots__ = ("keys", "owners", "used")

    def __init__(self, slots: int = START_SLOTS) -> None:
        if slots & (slots - 1) or slots <= 0:
            raise ValueError(f"the slot count must be a power of two, not {slots}")
        self.keys = array("Q", bytes(8 * slots))
        self.owners = array("I", bytes(4 * slots))
        self.used = 0

    def __len__(self) -> int:
        return self.used

    def _slot(self, fp: int) -> int:
        keys = self.keys
        mask = len(keys) - 1
        i = fp & mask
        while True:
            k = keys[i]
            if k in (fp, EMPTY):
                return i
            i = (i + 1) & mask

    def get(self, fp: int) -> int | None:
        """The device index the fingerprint belongs to, or None."""
        i = self._slot(fp)
        return None if self.keys[i] == EMPTY else self.owners[i]

    def add(self, fp: int, device: int) -> bool:
        """Give ``fp`` to ``device`` unless it belongs to a device already; True if it was added."""
        i = self._slot(fp)
        if self.keys[i] != EMPTY:
            return False
        self.keys[i] = fp
        self.owners[i] = device
        self.used += 1
        if self.used > MAX_LOAD * len(self.keys):
            self._grow()
        return True

    def put(self, fp: int, device: int) -> None:
        """Set ``fp``'s owner whatever it was (a snapshot's claims come before any claim read)."""
        i = self._slot(fp)
        if self.keys[i] == EMPTY:
            self.keys[i] = fp
            self.used += 1
            self.owners[i] = device
            if self.used > MAX_LOAD * len(self.keys):
                self._grow()
        else:
            self.owners[i] = device

    def _grow(self) -> None:
        old_keys, old_owners = self.keys, self.owners
        slots = 2 * len(old_keys)
        self.keys = array("Q", bytes(8 * slots))
        self.owners = array("I", bytes(4 * slots))
        keys, owners, mask = self.keys, self.owners, slots - 1
        for j, fp in enumerate(old_keys):
            if fp == EMPTY:
                continue
            i = fp & mask
            while keys[i] != EMPTY:
                i = (i + 1) & mask
            keys[i] = fp
            owners[i] = old_owners[j]

    def items(self) -> list[tuple[int, int]]:
        """(fingerprint, device index) of every claim held, in slot order."""
        return [(fp, self.owners[i]) for i, fp in enumerate(self.keys) if fp != EMPTY]

    def to_bytes(self) -> tuple[bytes, bytes]:
        return self.keys.tobytes(), self.owners.tobytes()

    @classmethod
    def from_bytes(cls, keys: bytes, owners: bytes) -> ClaimTable:
        """The table :meth:`to_bytes` wrote (slot for slot)."""
        slots = len(keys) // 8
        if len(keys) != 8 * slots or len(owners) != 4 * slots or slots & (slots - 1) or slots <= 0:
            raise ValueError("not a claims table: the arrays' lengths do not match")
        table = cls(1)
        table.keys = array("Q")
        table.keys.frombytes(keys)
        table.owners = array("I")
        table.owners.frombytes(owners)
        table.used = slots - table.keys.count(EMPTY)
        return table
