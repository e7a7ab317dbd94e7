"""State: the device and experience state models with their JSON form (``tables.state``) and the
RocksDB-backed faust tables that hold them, co-partitioned by ``device_id``
(``tables.store.faust_tables``). Imports ``topics`` only; the faust App is passed in."""
