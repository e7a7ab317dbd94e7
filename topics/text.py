"""Visible text: the one rule for every free string a device or a planner sends that may be shown,
spoken or put into a model's prompt (docs/CONTRACTS.md §2 rule 10, §9.1).

A visible text holds no character a reader cannot see or that changes how the text around it
reads:

- Unicode general category ``C``: controls (``Cc``), format characters (``Cf``: zero-width
  characters, the byte order mark U+FEFF, bidirectional embeddings, overrides, isolates and
  marks, the tag characters U+E0001 and U+E0020–E007F), surrogates (``Cs``), private-use
  (``Co``) and unassigned code points (``Cn``, which hold the rest of the tag block);
- the line and paragraph separators U+2028 and U+2029 (``Zl``, ``Zp``);
- the other default-ignorable code points, drawn as nothing: the combining grapheme joiner
  U+034F, the Hangul fillers U+115F, U+1160, U+3164 and U+FFA0, the Khmer inherent vowels
  U+17B4–U+17B5, the Mongolian free variation selectors U+180B–U+180F, and the variation
  selectors U+FE00–U+FE0F and U+E0100–U+E01EF (a run of them can carry hidden bytes).

The plan check of the gate, the device-context data check, the planner summary, the presenter and
the check of a model's rationale all call :func:`visible`; nothing else decides it.
"""

from __future__ import annotations

import re
import unicodedata

#: Default-ignorable code points outside category ``C`` (Unicode's DerivedCoreProperties).
_IGNORABLE = re.compile(
    "[\u034f\u115f\u1160\u17b4\u17b5\u180b-\u180f\u3164\ufe00-\ufe0f\uffa0\U000e0100-\U000e01ef]"
)
_category = unicodedata.category


def visible(text: str) -> bool:
    """True when ``text`` holds no invisible or control character (see the module docstring)."""
    if text.isascii():
        return text.isprintable()
    if text.isprintable():
        # isprintable refuses categories C, Zl, Zp and every space but U+0020; only the
        # default-ignorable letters and marks remain to look for
        return _IGNORABLE.search(text) is None
    for ch in text:
        cat = _category(ch)
        if cat[0] == "C" or cat == "Zl" or cat == "Zp":
            return False
    return _IGNORABLE.search(text) is None


__all__ = ["visible"]
