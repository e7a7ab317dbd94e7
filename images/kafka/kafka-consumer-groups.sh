#!/bin/sh
# Consumer groups: list, describe (--members, lag), reset offsets; as in apache/kafka.
exec /opt/kafka/bin/kafka-tool.sh org.apache.kafka.tools.consumer.group.ConsumerGroupCommand "$@"
