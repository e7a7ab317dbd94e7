"""Output IDs as pure functions of their causes (docs/CONTRACTS.md §6, §7, §2 rule 9).

Every ID includes the ``device_id``: event and experience IDs are chosen by devices and planners,
so two devices may reuse one; two devices never share an output ID.
"""

from __future__ import annotations

import hashlib


def _h(*parts: str) -> str:
    return hashlib.sha256("|".join(parts).encode("utf-8")).hexdigest()[:24]


def decision_id(device_id: str, experience_id: str, trigger_event_id: str) -> str:
    """The same trigger of the same experience of one device always gives the same decision ID."""
    return "dec_" + _h(device_id, experience_id, trigger_event_id)


def dispatch_id(decision_id_: str, index: int = 0) -> str:
    """The dispatch of a decision (index: the n-th dispatch of one decision); the decision ID
    already names the device."""
    return "dsp_" + _h(decision_id_, str(index))


def local_dispatch_id(device_id: str, ref_id: str) -> str:
    """A dispatch without a decision, from the device and the ID of its cause: the event ID of a
    §6.3 local action, or the experience ID of a ``device_context.refresh`` (§9.4)."""
    return "dsp_" + _h("local", device_id, ref_id)


def context_refresh_dispatch_id(device_id: str, experience_id: str) -> str:
    """The ``device_context.refresh`` dispatch a plan's preconditions ask for (§9.4)."""
    return "dsp_" + _h("context_refresh", device_id, experience_id)


def precondition_question_dispatch_id(device_id: str, experience_id: str) -> str:
    """The ``voice_content.speak`` question of a plan whose preconditions are unknown (§9.4)."""
    return "dsp_" + _h("precondition_question", device_id, experience_id)
