#!/bin/sh
# Start one Kafka node: server.properties from the KAFKA_* environment (apache/kafka's naming), or
# the image's single-node defaults when KAFKA_PROCESS_ROLES is not set; format the storage once
# (CLUSTER_ID, else a new one); then exec the JVM, so that SIGTERM stops the broker cleanly.
set -eu
home=/opt/kafka
conf="$home/run/server.properties"
cp_jars="$home/libs/*"
log4j="-Dlog4j2.configurationFile=$home/config/log4j2.properties"

if [ -n "${KAFKA_PROCESS_ROLES:-}" ]; then
    : >"$conf"
    env | while IFS='=' read -r name value; do
        case "$name" in
            KAFKA_HEAP_OPTS | KAFKA_OPTS | KAFKA_JVM_PERFORMANCE_OPTS | KAFKA_LOG4J_OPTS | KAFKA_JMX_OPTS \
                | KAFKA_GC_LOG_OPTS | KAFKA_DEBUG) ;;
            KAFKA_?*)
                key=$(printf '%s' "${name#KAFKA_}" | tr 'A-Z' 'a-z' \
                    | sed -e 's/___/-/g' -e 's/__/\x01/g' -e 's/_/./g' -e 's/\x01/_/g')
                printf '%s=%s\n' "$key" "$value" >>"$conf"
                ;;
        esac
    done
else
    cp "$home/config/server.properties" "$conf"
fi

cluster_id="${CLUSTER_ID:-}"
if [ -z "$cluster_id" ]; then
    cluster_id=$(java $log4j -cp "$cp_jars" kafka.tools.StorageTool random-uuid | tail -n 1)
fi
java $log4j -cp "$cp_jars" kafka.tools.StorageTool format "--cluster-id=$cluster_id" -c "$conf" \
    --ignore-formatted >/dev/null

# shellcheck disable=SC2086  # the *_OPTS are lists of JVM options
exec java ${KAFKA_HEAP_OPTS:-} -XX:+UseG1GC -Djava.awt.headless=true ${KAFKA_OPTS:-} $log4j \
    -cp "$cp_jars" kafka.Kafka "$conf"
