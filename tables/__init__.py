"""State: the device and experience state models with their JSON form (``tables.state``) and the
RocksDB-backed faust tables that hold them, co-partitioned by ``device_id``
(``tables.store``). The state model imports ``topics`` only; the store is the one part importing faust."""
