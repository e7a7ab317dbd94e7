"""The Kafka key of an input record, and how an output names it (docs/CONTRACTS.md §2 rule 3, §10).

Every input record is keyed by its ``device_id``: an ID of at most 128 ASCII characters. The gate
looks at the key before anything else: a key over :data:`MAX_KEY_BYTES` or one that is not UTF-8
text can never name a device and is refused (``key_invalid``, :func:`key_problem`).

A dead letter copies a record's key into its ``key`` field and is published under it. Copied whole,
a 600 KB key (or 160 KB of control characters, six bytes each once escaped in JSON) made a dead
letter over Kafka's message limit: the producer refused it and the worker stopped, again after each
restart. :func:`shown_key` is the one place a record's key reaches an output: as itself when it is
UTF-8 text within :data:`MAX_KEY_BYTES`, else as a bounded form (:func:`bounded_key`) that still
lets an analyst find the record's producer (the key's leading ID characters, its size and hash).
"""

from __future__ import annotations

import hashlib

#: The longest Kafka key (in bytes) an input record may have; a ``device_id`` has at most 128.
MAX_KEY_BYTES = 256
#: How many leading ID characters of a refused key its bounded form keeps.
KEY_PREFIX_CHARS = 32
_ID_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.:-")


def _key_bytes(key: bytes | str) -> bytes | None:
    """``key`` as UTF-8 bytes, or None when it is a ``str`` that is not text (lone surrogates)."""
    if isinstance(key, bytes):
        return key
    try:
        return key.encode("utf-8")
    except UnicodeEncodeError:
        return None


def key_problem(key: bytes | str | None) -> str | None:
    """Why ``key`` cannot be an input record's key (``key_invalid``), or None when it can be judged
    further (a null key is a ``key_mismatch`` later: no ``device_id`` equals it)."""
    if key is None:
        return None
    if isinstance(key, bytes) and len(key) <= MAX_KEY_BYTES and key.isascii():
        return None  # the common case: a device ID
    raw = _key_bytes(key)
    if raw is None:
        return "the record key is not UTF-8 text"
    if len(raw) > MAX_KEY_BYTES:
        return f"the record key of {len(raw)} bytes is over {MAX_KEY_BYTES}"
    if isinstance(key, bytes):
        try:
            key.decode("utf-8")
        except UnicodeDecodeError:
            return "the record key is not UTF-8 text"
    return None


def bounded_key(key: bytes | str) -> str:
    """The bounded form of a refused key: its leading ID characters (at most
    :data:`KEY_PREFIX_CHARS`), then ``<key of N bytes, sha256 H>`` (``H``: the first 16 hex digits
    of the SHA-256 of its bytes). Never longer than about 90 characters, all printable ASCII."""
    raw = _key_bytes(key)
    if raw is None:
        assert isinstance(key, str)
        raw = key.encode("utf-8", "surrogatepass")
    prefix = []
    for byte in raw[:KEY_PREFIX_CHARS]:
        char = chr(byte)
        if char not in _ID_CHARS:
            break
        prefix.append(char)
    digest = hashlib.sha256(raw).hexdigest()[:16]
    return f"{''.join(prefix)}<key of {len(raw)} bytes, sha256 {digest}>"


def shown_key(key: bytes | str | None) -> str | None:
    """How an output (a dead letter's ``key``, and the Kafka key it is published under) names a
    record's key: None for a null key, the key itself when :func:`key_problem` finds nothing, else
    :func:`bounded_key`."""
    if key is None:
        return None
    if key_problem(key) is not None:
        return bounded_key(key)
    return key if isinstance(key, str) else key.decode("utf-8")


__all__ = ["KEY_PREFIX_CHARS", "MAX_KEY_BYTES", "bounded_key", "key_problem", "shown_key"]
