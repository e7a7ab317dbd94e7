"""The state store: the faust tables over RocksDB (``tables.store.faust_tables``) and their batched
writes (``tables.store.writes``). The only part of ``tables`` that imports faust, aiokafka or rocksdict."""
