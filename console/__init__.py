"""The live fleet console (``guardian console``): the output topics and the workers, watched live.

Functional core: :mod:`console.state` (records in, a bounded view model out) and
:mod:`console.render` (lanes drawn by the report's own code, :mod:`report.lane_view`). Thin shell:
:mod:`console.reader` (its own Kafka reader), :mod:`console.workers` (``/ready`` and ``/metrics``),
:mod:`console.server` (aiohttp: the page, Server-Sent Events) and :mod:`console.command`.
"""
