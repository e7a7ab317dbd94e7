#!/bin/sh
# The broker's readiness probe (same path and arguments as in apache/kafka): exit 0 once it answers.
exec java -Xmx64m -XX:TieredStopAtLevel=1 -XX:+UseSerialGC -Dlog4j2.configurationFile=/opt/kafka/config/log4j2.properties \
    -cp '/opt/kafka/libs/*' org.apache.kafka.tools.BrokerApiVersionsCommand "$@"
