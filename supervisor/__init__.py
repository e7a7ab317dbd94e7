"""The decision maker (not faust's actor-restart "supervisor").

Given an experience's state and one promoted trigger, it answers one of the six decisions of
docs/CONTRACTS.md §6: by the deterministic rules of §6.2 (``supervisor.rules``, the default) or by a
Gemini model through ``google-genai`` (``supervisor.gemini``), whose answers are validated and fall
back to the rules. It sees only the bounded context of §6.1 (``supervisor.context``), never a raw
record. It imports ``topics`` and ``tables``, never ``streams``.
"""
