"""``guardian bench``: the pipeline end to end on a real broker against baselines measured in the
same run (a raw aiokafka passthrough and Kafka's own producer/consumer performance tools),
trigger → dispatch latency, the worker's peak memory, and the gate and core micro-benchmarks
(``bench.cli``, ``bench.workload``, ``bench.kafka_ops``, ``bench.gate_bench``, ``bench.core_bench``)."""
