"""The state store: the faust tables over RocksDB (declared in ``tables.store.guardian_tables``, a
device's value in ``tables.store.device_entry``, the store over them in ``tables.store.faust_tables``)
and their batched writes (``tables.store.writes``). The only part of ``tables`` that imports faust,
aiokafka or rocksdict."""
