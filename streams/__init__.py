"""The faust shell: ``streams.app`` (the App and its settings only), ``streams.agents`` (the agent
and timers that move records between Kafka, the RocksDB tables and the functional core) and
``streams.worker`` (``guardian worker``). No judgement lives here."""
