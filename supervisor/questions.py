"""The user question of an ``ask_user`` decision; the wording lives in :mod:`supervisor.presenter`
(every spoken sentence is built there)."""

from __future__ import annotations

from supervisor.presenter import Language, user_question

__all__ = ["Language", "user_question"]
