"""Guardian's shell: settings, the ``guardian`` command line and the commands behind it.

The judgement lives elsewhere (``pipeline`` and ``supervisor``); this package wires it to
Kafka, files and the terminal: the local broker, topic administration, replay, export,
the simulator and the benchmark entry points.
"""
