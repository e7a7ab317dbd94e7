"""The presenter: every sentence the robot speaks, in Korean and English (docs/CONTRACTS.md §9.5).

Spoken text (a ``voice_content.speak`` request's ``text``) is built here and nowhere else, from
semantic state only: a room is named by the household's own name (``map.areas`` or the plan's
``area_names``), a state by a fixed sentence. Never a raw key, an ID, a number of evidence, a
``_ms`` value, a coordinate or a debug word: every sentence comes from :data:`SENTENCES`, and the
only thing ever put into one is a room name that :func:`speakable_room` accepted (otherwise a
generic phrase stands in). :func:`every_sentence` lists every sentence the presenter can say, so
tests can check them all.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Literal

from topics.conditions import condition_paths
from topics.context import ContextView
from topics.text import visible

Language = Literal["ko", "en"]
LANGUAGES: tuple[Language, ...] = ("ko", "en")

#: The longest room name spoken (a longer one is not a name a household uses).
MAX_ROOM_CHARS = 32

#: Every sentence, by key and language; ``{room}`` is the only placeholder.
SENTENCES: Mapping[str, Mapping[Language, str]] = {
    "room": {"ko": "현재 {room}에 있습니다.", "en": "I am in {room} now."},
    "air_poor": {"ko": "현재 공기질이 좋지 않은 편입니다.", "en": "The air quality is poor right now."},
    "battery_low": {
        "ko": "긴 작업 전에는 충전하는 편이 안전합니다.",
        "en": "It is safer to charge before a long task.",
    },
    "recheck": {"ko": "현재 상태를 다시 확인해야 합니다.", "en": "I need to check the current state again."},
    "start_later": {
        "ko": "확인한 뒤에 다시 시작할까요?",
        "en": "Shall I start again once it is checked?",
    },
    "person_unverified": {
        "ko": "{room}에서 확인되지 않은 사람이 감지되었어요. 아는 분인가요? 순찰을 계속할까요?",
        "en": "Someone we could not verify was detected in {room}. Do you know who it is? "
        "Should the patrol go on?",
    },
    "person_timed_out": {
        "ko": "{room}에서 감지된 사람의 확인이 제한 시간 안에 끝나지 않았어요. "
        "아는 분인가요? 순찰을 계속할까요?",
        "en": "We could not verify the person seen in {room} in time. Do you know who it is? "
        "Should the patrol go on?",
    },
}

#: Where no room name can be spoken.
SOMEWHERE: Mapping[Language, str] = {"ko": "집 안", "en": "your home"}

_QUESTION_BY_REASON = {"verification_timed_out": "person_timed_out"}
_ID_LIKE = re.compile(r"[A-Za-z0-9_.:-]*[0-9_:][A-Za-z0-9_.:-]*")


def speakable_room(name: object) -> str | None:
    """``name`` when it can be spoken as a room name: visible words, at most 32 characters, no
    snake_case, nothing ID-like (letters mixed with digits, underscores or colons); else None."""
    if not isinstance(name, str):
        return None
    text = " ".join(name.split())
    if not text or len(text) > MAX_ROOM_CHARS or "_" in text:
        return None
    if not visible(text):
        return None
    if _ID_LIKE.fullmatch(text):
        return None
    return text


def _say(key: str, language: Language, room: str | None = None) -> str:
    template = SENTENCES[key][language]
    return template.format(room=room if room is not None else SOMEWHERE[language])


def user_question(reason_code: str, area_name: str | None, language: Language = "ko") -> str:
    """The ``ask_user`` question about a person (§7), naming the room in words."""
    key = _QUESTION_BY_REASON.get(reason_code, "person_unverified")
    return _say(key, language, speakable_room(area_name))


def room_names(context: ContextView, plan_area_names: Mapping[str, Any] | None) -> dict[str, str]:
    """area_id -> a speakable room name: ``map.areas`` first, else the plan's ``area_names``."""
    names: dict[str, str] = {}
    for area_id, name in (plan_area_names or {}).items():
        room = speakable_room(name)
        if room is not None:
            names[str(area_id)] = room
    env = context.get("map")
    areas = env.data.get("areas") if env is not None and env.available else None
    if isinstance(areas, list):
        for item in areas:
            if isinstance(item, dict):
                room = speakable_room(item.get("area_name"))
                if room is not None and isinstance(item.get("area_id"), str):
                    names[item["area_id"]] = room
    return names


def state_sentences(
    context: ContextView,
    now_ms: int,
    *,
    paths: Sequence[str],
    names: Mapping[str, str],
    language: Language,
) -> list[str]:
    """What can be said of the state the condition ``paths`` read: the room (when the device's
    fresh position is known and named), a poor air quality, a low work budget; and, when any of it
    is stale or unknown, that the state needs checking again."""
    domains = {p.partition(".")[0] for p in paths}
    out: list[str] = []
    unsure = False

    def fresh(domain: str) -> Mapping[str, Any] | None:
        env = context.get(domain)
        if env is None or not env.available or not env.is_fresh(now_ms):
            return None
        return env.data

    position = fresh("movement")
    if position is not None and isinstance(position.get("current_area_id"), str):
        room = names.get(position["current_area_id"])
        if room is not None:
            out.append(_say("room", language, room))
    for domain in sorted(domains):
        data = fresh(domain)
        if data is None:
            unsure = True
            continue
        if domain == "air_quality":
            if data.get("grade") in ("bad", "very_bad"):
                out.append(_say("air_poor", language))
            elif "grade" not in data:
                unsure = True
        elif domain == "battery":
            if data.get("estimated_work_budget") == "low":
                out.append(_say("battery_low", language))
            elif "estimated_work_budget" not in data:
                unsure = True
        elif any(p.partition(".")[2] not in data for p in paths if p.startswith(domain + ".")):
            unsure = True
    if unsure:
        out.append(_say("recheck", language))
    return out


def precondition_question(
    condition: Mapping[str, Any],
    context: ContextView,
    now_ms: int,
    *,
    plan_area_names: Mapping[str, Any] | None,
    language: Language,
) -> str:
    """The ``on_unknown: ask_user`` question (§9.4): what is known of the state the preconditions
    read, that the state needs checking again, and whether to start once it is checked."""
    names = room_names(context, plan_area_names)
    said = state_sentences(context, now_ms, paths=condition_paths(condition), names=names, language=language)
    recheck = _say("recheck", language)
    if recheck not in said:
        said.append(recheck)
    said.append(_say("start_later", language))
    return " ".join(said)


def every_sentence(rooms: Sequence[str | None] = (None,)) -> Iterator[str]:
    """Every sentence the presenter can say, in every language, for each of ``rooms`` (None: no
    speakable name)."""
    for language in LANGUAGES:
        for key in SENTENCES:
            for room in rooms:
                yield _say(key, language, speakable_room(room))


__all__ = [
    "LANGUAGES",
    "SENTENCES",
    "SOMEWHERE",
    "Language",
    "every_sentence",
    "precondition_question",
    "room_names",
    "speakable_room",
    "state_sentences",
    "user_question",
]
