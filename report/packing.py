"""Collapsed lanes' data, packed: deflated and base64-encoded blocks that the page's script
inflates when a lane is opened, and their decoders in Python (for tests)."""

from __future__ import annotations

import base64
import json
import zlib
from typing import Final

from report.layout import LANE_CHUNK_BYTES


class LaneData:
    """The lane list, and the bodies and strips of its collapsed lanes, packed: the list deflated as
    one stream ("lz-list"), the bodies and strips in deflated chunks ("lz-K"), all base64-encoded.

    It holds only compressed data and the chunk being filled (at most ~``LANE_CHUNK_BYTES`` of HTML).
    """

    def __init__(self, chunk_bytes: int = LANE_CHUNK_BYTES) -> None:
        self.chunk_bytes = chunk_bytes
        self.encoded: list[str] = []
        self._current: list[tuple[str, str]] = []
        self._size = 0
        self._list = zlib.compressobj(9, zlib.DEFLATED, -15)
        self._listed: list[bytes] = []

    def append_list(self, html: str) -> None:
        """Append to the lane list (the page's script puts it in place when it starts)."""
        self._listed.append(self._list.compress(html.encode("utf-8")))

    def add(self, strip: str, body: str) -> tuple[int, int]:
        """Store a lane's strip and body; return its (chunk, slot)."""
        where = (len(self.encoded), len(self._current))
        self._current.append((strip, body))
        self._size += len(strip) + len(body)
        if self._size >= self.chunk_bytes:
            self.flush()
        return where

    def flush(self) -> None:
        if not self._current:
            return
        data = json.dumps(self._current, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        packer = zlib.compressobj(9, zlib.DEFLATED, -15)
        self.encoded.append(base64.b64encode(packer.compress(data) + packer.flush()).decode("ascii"))
        self._current, self._size = [], 0

    def html(self) -> str:
        self.flush()
        self._listed.append(self._list.flush())
        listed = base64.b64encode(b"".join(self._listed)).decode("ascii")
        self._listed = []
        return f'<script type="{LANE_DATA_TYPE}" id="lz-list">{listed}</script>' + "".join(
            f'<script type="{LANE_DATA_TYPE}" id="lz-{k}">{chunk}</script>'
            for k, chunk in enumerate(self.encoded)
        )


#: the type of the (never executed) script elements that carry the lanes' data
LANE_DATA_TYPE: Final = "application/x-guardian-lanes"


def decode_lane_list(block: str) -> str:
    """The ``lz-list`` block's HTML (the lane list): what the page's script does, in Python."""
    return zlib.decompress(base64.b64decode(block), -15).decode("utf-8")


def decode_lane_data(chunk: str) -> list[tuple[str, str]]:
    """One ``lz-K`` chunk's lanes as (strip, body) HTML: what the page's script does, in Python."""
    data = json.loads(zlib.decompress(base64.b64decode(chunk), -15).decode("utf-8"))
    return [(str(strip), str(body)) for strip, body in data]
