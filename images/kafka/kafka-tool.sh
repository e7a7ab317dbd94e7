#!/bin/sh
# Run one of Kafka's command-line tools (a main class of the jars) in a small, quick-starting JVM.
main=$1
shift
exec java -Xmx128m -XX:TieredStopAtLevel=1 -XX:+UseSerialGC \
    -Dlog4j2.configurationFile=/opt/kafka/config/log4j2.properties -cp '/opt/kafka/libs/*' "$main" "$@"
