#!/bin/sh
# The broker's readiness probe (same path and arguments as in apache/kafka): exit 0 once it answers.
exec /opt/kafka/bin/kafka-tool.sh org.apache.kafka.tools.BrokerApiVersionsCommand "$@"
