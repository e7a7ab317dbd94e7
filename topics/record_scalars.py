"""The scalar types and size limits of every record of docs/CONTRACTS.md: the ID alphabet, the
longest fact, rationale and record, and the strict constrained scalars (``Id``, ``TimeMs``,
``FactValue`` ...) that the record models use."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, StringConstraints

#: The ID alphabet of the contract (1–128 characters of ``[A-Za-z0-9_.:-]``). Use ``fullmatch``
#: (Python's ``$`` also matches before a trailing newline).
ID_PATTERN = r"^[A-Za-z0-9_.:-]{1,128}$"

#: Longest string fact (§4.2).
MAX_FACT_STR_LEN = 64
#: Longest decision rationale (§6).
MAX_RATIONALE_LEN = 200
#: Largest input record in bytes, and the cut of a dead letter's payload copy (§2, §10).
MAX_RECORD_BYTES = 16 * 1024

Id = Annotated[str, StringConstraints(strict=True, pattern=ID_PATTERN)]
NonNegInt = Annotated[int, Field(strict=True, ge=0)]
TimeMs = Annotated[int, Field(strict=True, ge=0)]
ShortText = Annotated[str, StringConstraints(strict=True, min_length=1, max_length=256)]
FactValue = (
    Annotated[bool, Field(strict=True)]
    | Annotated[int, Field(strict=True)]
    | Annotated[str, StringConstraints(strict=True, max_length=MAX_FACT_STR_LEN)]
)
