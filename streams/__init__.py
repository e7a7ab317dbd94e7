"""The faust shell. ``streams.app`` (the App and its settings only); ``streams.agents``
(``register_agents``: the pipeline task and timers declared on the app); the objects that own the
shell's state, wired by ``streams.shell.PipelineShell``: ``streams.inbox`` (what faust handed
over), ``streams.positions`` (where each input topic-partition stands), ``streams.held`` (the
merge and the plans waiting for their claims), ``streams.commit_batch`` (what is processed,
flushed and may be committed), ``streams.quiet`` and ``streams.sweep`` (quiet devices, the dedup
sweep), ``streams.outlets`` and ``streams.reports`` (where outputs leave; the worker's metrics and
readiness); ``streams.pipeline_task`` (the ``guardian.pipeline`` task); ``streams.seam`` (every faust
behaviour replaced, one file each, and every access below faust's, mode's, aiokafka's and
rocksdict's public surface, checked at start); ``streams.metrics`` (its groups in
``streams.metric_groups``, the batch's tally in ``streams.batch_tally``, the bench's trace in
``streams.latency_trace``) and ``streams.health`` (what the worker counts, readiness,
``/healthz`` ``/ready`` ``/metrics``) and ``streams.worker`` (``guardian worker``). No judgement
lives here."""
