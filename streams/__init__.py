"""The faust shell: ``streams.app`` (the App and its settings only), ``streams.agents`` (the agent
and timers that move records between Kafka, the RocksDB tables and the functional core),
``streams.seam`` (every faust behaviour replaced, one file each, and every access below faust's,
mode's, aiokafka's and rocksdict's public surface, checked at start), ``streams.metrics`` and
``streams.health`` (what the worker counts, readiness, ``/healthz`` ``/ready`` ``/metrics``) and
``streams.worker`` (``guardian worker``). No judgement lives here."""
