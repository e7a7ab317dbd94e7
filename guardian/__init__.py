"""Guardian's commands: the ``guardian`` command line and the commands behind it.

The judgement lives elsewhere (``pipeline`` and ``supervisor``); this package wires it to
Kafka, files and the terminal: the local broker, replay, export,
the simulator and the benchmark entry points. Settings and exit codes are the leaf ``config``.
"""
