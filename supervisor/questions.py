"""The user question of an ``ask_user`` decision: a sentence built from semantic state only.

Area IDs and raw keys never appear: an area is named by the household's own room name from the
plan's ``area_names``, or by a generic phrase when the plan has none.
"""

from __future__ import annotations

from typing import Literal

Language = Literal["ko", "en"]

_SOMEWHERE = {"ko": "집 안", "en": "your home"}

_TEMPLATES: dict[str, dict[str, str]] = {
    "verification_timed_out": {
        "ko": "{area}에서 감지된 사람의 확인이 제한 시간 안에 끝나지 않았어요. "
        "아는 분인가요? 순찰을 계속할까요?",
        "en": "We could not verify the person seen in {area} in time. Do you know who it is? "
        "Should the patrol go on?",
    },
    "default": {
        "ko": "{area}에서 확인되지 않은 사람이 감지되었어요. 아는 분인가요? 순찰을 계속할까요?",
        "en": "Someone we could not verify was detected in {area}. Do you know who it is? "
        "Should the patrol go on?",
    },
}


def user_question(reason_code: str, area_name: str | None, language: Language = "ko") -> str:
    """The spoken question for ``reason_code``, naming the area in words."""
    template = _TEMPLATES.get(reason_code, _TEMPLATES["default"])[language]
    area = area_name or _SOMEWHERE[language]
    return template.format(area=area)
