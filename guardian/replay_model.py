"""``guardian replay --decisions model``: the model asked as the live worker asks it.

Live, with a model backend, the core does not decide: it queues each promoted trigger in the
experience's ``pending`` list, and a decision lane (``streams/lanes.py``) then reads the device's
*stored* experience and device state, asks the model on copies of them (the context holds the
device's domain states and its device context, §6.1), and has the verdict applied by
:meth:`pipeline.runner.Processor.apply` (etag, dedup and budget checked).

:class:`DeferredDecisions` does the same in one thread, right after the record whose processing
queued the trigger, as if the model answered before the device's next record: the same core path
(a queue bounded like the live one), the same state in the prompt, so a what-if replay asks the
model what the live run asked it. A decision is dated when its trigger was promoted
(:func:`pipeline.debounce.promoted_at`), on the receive-time clock.
"""

from __future__ import annotations

from collections.abc import Callable

from pipeline.debounce import promoted_at
from pipeline.runner import Processor, StateStore
from supervisor.verdict import Verdict
from tables.state import DeviceState, ExperienceState, Trigger
from topics.envelope import Out

#: A model decider: the experience and the device as stored (copies), and the trigger
DeviceDecider = Callable[[ExperienceState, DeviceState | None, Trigger], Verdict]


class DeferredDecisions:
    """Decides queued triggers as a live decision lane does (module docstring)."""

    def __init__(
        self, processor: Processor, store: StateStore, decide: DeviceDecider, emit: Callable[[Out], None]
    ) -> None:
        self.processor = processor
        self.store = store
        self.decide = decide
        self.emit = emit

    def settle(self, device_id: str | None, queued: list[Trigger]) -> None:
        """Decide and apply, in order, the triggers one step of the core queued for ``device_id``."""
        if device_id is None:
            return
        for trigger in queued:
            self._decide(device_id, trigger)

    def _decide(self, device_id: str, trigger: Trigger) -> None:
        store = self.store
        stored = store.get_experience(device_id)
        if stored is None or not stored.awaits_decision(trigger):
            return  # decided meanwhile, or its experience replaced (a live lane skips it too)
        exp = ExperienceState.from_json(stored.to_json())
        dev = store.get_device(device_id)
        device = DeviceState.from_json(dev.to_json()) if dev is not None else None
        verdict = self.decide(exp, device, trigger)
        registry = self.processor.pipeline.registry
        done = self.processor.apply(
            store, device_id, trigger, verdict, exp.etag, promoted_at(registry, trigger)
        )
        for o in done.outs:
            self.emit(o)
        self.settle(done.device_id, done.queued)
