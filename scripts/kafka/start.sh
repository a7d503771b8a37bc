#!/usr/bin/env bash
# Start an Apache Kafka node (KRaft, combined broker+controller) in the
# foreground: a single-node broker by default, or one node of a cluster with a
# static quorum when KAFKA_QUORUM_VOTERS is set (cluster.sh starts three):
#
#   scripts/kafka/start.sh <port> <data-dir>
#
# - clients connect to PLAINTEXT://127.0.0.1:<port>
# - the KRaft controller listens on 127.0.0.1:${KAFKA_CONTROLLER_PORT:-<port>+1}
# - <data-dir> gets server.properties, log4j2.properties, server.log (all broker
#   logging), format.log and data/ (the partitions and the metadata log).
#   An unformatted data-dir is formatted with a fresh cluster id
#   (KAFKA_CLUSTER_ID to choose one); an already formatted one is reused as is.
# - the script ends by exec'ing the JVM, so its pid is the broker's: stop it with
#   SIGTERM (clean shutdown, a few seconds) or SIGKILL.
#
# Environment (all optional):
#   KAFKA_HOME                 where fetch.sh put libs/ (default <repo>/target/kafka)
#   KAFKA_CONTROLLER_PORT      controller port (default <port>+1)
#   KAFKA_CLUSTER_ID           cluster id used when formatting (default: random;
#                              required for a cluster node: every node needs the same)
#   KAFKA_NODE_ID              node.id (default 1)
#   KAFKA_QUORUM_VOTERS        a cluster node: the static controller quorum, e.g.
#                              1@127.0.0.1:9093,2@127.0.0.1:9095,3@127.0.0.1:9097; it must
#                              name this node with its controller port. Unset: single node
#                              with a one-voter dynamic quorum (format --standalone).
#   KAFKA_REPLICATION_FACTOR   default.replication.factor and the internal topics'
#                              replication factors (default 1; cluster node: 3, or the
#                              number of voters when smaller)
#   KAFKA_MIN_INSYNC_REPLICAS  min.insync.replicas and the internal topics' min ISR
#                              (default 1; cluster node: 2 when the factor is 3 or more)
#   KAFKA_HEAP_OPTS            default "-Xms256m -Xmx512m" (cluster node: "-Xms128m -Xmx384m")
#   KAFKA_JVM_PERFORMANCE_OPTS default: G1 settings as in Kafka's own scripts (cluster
#                              node: plus one parallel and one concurrent GC thread, and
#                              the C1 JIT compiler only: -XX:TieredStopAtLevel=1)
#   KAFKA_OPTS                 extra JVM options
#   KAFKA_EXTRA_PROPERTIES     extra lines appended to server.properties (they win)
#   KAFKA_CDS=0                do not use the class-data-sharing archive from cds.sh
#   JAVA_HOME                  java to use (default: java on PATH); needs Java 17+
set -euo pipefail

usage() {
  echo "usage: $0 <port> <data-dir>" >&2
  exit 2
}
[ "$#" -eq 2 ] || usage

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source-path=SCRIPTDIR source=common.sh
. "${SCRIPT_DIR}/common.sh"
LIBS="${KAFKA_LIBS}"

PORT="$1"
case "${PORT}" in
  ''|*[!0-9]*) echo "start.sh: '${PORT}' is not a port number" >&2; usage ;;
esac
CONTROLLER_PORT="${KAFKA_CONTROLLER_PORT:-$(( 10#${PORT} + 1 ))}"
for p in "${PORT}" "${CONTROLLER_PORT}"; do
  case "${p}" in
    ''|*[!0-9]*) echo "start.sh: '${p}' is not a port number" >&2; usage ;;
  esac
  if [ "${p}" -lt 1 ] || [ "${p}" -gt 65535 ]; then
    echo "start.sh: port ${p} out of range" >&2
    exit 2
  fi
done
if [ "${PORT}" = "${CONTROLLER_PORT}" ]; then
  echo "start.sh: the broker and controller ports must differ (both ${PORT})" >&2
  exit 2
fi

NODE_ID="${KAFKA_NODE_ID:-1}"
case "${NODE_ID}" in
  ''|*[!0-9]*) echo "start.sh: KAFKA_NODE_ID '${NODE_ID}' is not a number" >&2; exit 2 ;;
esac
VOTERS="${KAFKA_QUORUM_VOTERS:-}"
if [ -n "${VOTERS}" ]; then
  # A cluster node: the voters must list this node with the controller port it listens on.
  VOTER_COUNT=0
  SELF_LISTED=0
  IFS=',' read -r -a VOTER_LIST <<<"${VOTERS}"
  for v in "${VOTER_LIST[@]}"; do
    if ! [[ "${v}" =~ ^[0-9]+@[^:@]+:[0-9]+$ ]]; then
      echo "start.sh: KAFKA_QUORUM_VOTERS entry '${v}' is not <id>@<host>:<port>" >&2
      exit 2
    fi
    VOTER_COUNT=$(( VOTER_COUNT + 1 ))
    if [ "${v%%@*}" = "${NODE_ID}" ]; then
      if [ "${v##*:}" != "${CONTROLLER_PORT}" ]; then
        echo "start.sh: KAFKA_QUORUM_VOTERS lists node ${NODE_ID} on port ${v##*:}, but its controller port is ${CONTROLLER_PORT}" >&2
        exit 2
      fi
      SELF_LISTED=1
    fi
  done
  if [ "${SELF_LISTED}" != "1" ]; then
    echo "start.sh: KAFKA_QUORUM_VOTERS (${VOTERS}) does not list node ${NODE_ID}" >&2
    exit 2
  fi
  DEFAULT_RF=$(( VOTER_COUNT < 3 ? VOTER_COUNT : 3 ))
  DEFAULT_MIN_ISR=$(( DEFAULT_RF >= 3 ? 2 : 1 ))
else
  DEFAULT_RF=1
  DEFAULT_MIN_ISR=1
fi
RF="${KAFKA_REPLICATION_FACTOR:-${DEFAULT_RF}}"
MIN_ISR="${KAFKA_MIN_INSYNC_REPLICAS:-${DEFAULT_MIN_ISR}}"
for n in "${RF}" "${MIN_ISR}"; do
  case "${n}" in
    ''|*[!0-9]*|0) echo "start.sh: replication factor and min ISR must be positive numbers (got ${RF} and ${MIN_ISR})" >&2; exit 2 ;;
  esac
done
if [ "${MIN_ISR}" -gt "${RF}" ]; then
  echo "start.sh: KAFKA_MIN_INSYNC_REPLICAS (${MIN_ISR}) is above the replication factor (${RF})" >&2
  exit 2
fi

for p in "${PORT}" "${CONTROLLER_PORT}"; do
  if kafka_port_in_use "${p}"; then
    echo "start.sh: 127.0.0.1:${p} is already in use" >&2
    exit 1
  fi
done

mkdir -p "$2"
DATA_DIR="$(cd "$2" && pwd)"
LOG_DIRS="${DATA_DIR}/data"

# Make sure the jars are there (a no-op taking a few ms when they are).
_KAFKA_NO_CDS_BUILD=1 "${SCRIPT_DIR}/fetch.sh" >&2
kafka_cds_opts

cat >"${DATA_DIR}/log4j2.properties" <<'EOF'
# Broker logging: everything goes to ${sys:kafka.logs.dir}/server.log
# (kafka.logs.dir is set to the data dir by start.sh).
status = warn
name = kafka-local
# Kafka logs its own shutdown from a JVM shutdown hook; keep log4j alive for it.
shutdownHook = disable

appender.server.type = RollingFile
appender.server.name = SERVER
appender.server.fileName = ${sys:kafka.logs.dir}/server.log
appender.server.filePattern = ${sys:kafka.logs.dir}/server.log.%i
appender.server.append = true
appender.server.layout.type = PatternLayout
appender.server.layout.pattern = [%d] %p %m (%c)%n
appender.server.policies.type = Policies
appender.server.policies.size.type = SizeBasedTriggeringPolicy
appender.server.policies.size.size = 100MB
appender.server.strategy.type = DefaultRolloverStrategy
appender.server.strategy.max = 2

rootLogger.level = INFO
rootLogger.appenderRef.server.ref = SERVER

# Noisy packages.
logger.request.name = kafka.request.logger
logger.request.level = WARN
logger.statechange.name = state.change.logger
logger.statechange.level = WARN
logger.authorizer.name = kafka.authorizer.logger
logger.authorizer.level = WARN
logger.cleaner.name = kafka.log.LogCleaner
logger.cleaner.level = WARN
logger.cleaner2.name = org.apache.kafka.storage.internals.log.LogCleaner
logger.cleaner2.level = WARN
logger.clients.name = org.apache.kafka.clients
logger.clients.level = WARN
logger.metrics.name = org.apache.kafka.common.metrics
logger.metrics.level = WARN
logger.appinfo.name = org.apache.kafka.common.utils
logger.appinfo.level = WARN
# The full config dump (~400 lines, repeated 5 times per start); the effective
# settings are in server.properties next to this file.
logger.configdump.name = org.apache.kafka.common.config.AbstractConfig
logger.configdump.level = WARN
EOF

if [ -n "${VOTERS}" ]; then
  QUORUM_LINES="controller.quorum.voters=${VOTERS}"
  REPLICATION_COMMENT="# Cluster node (${VOTER_COUNT} voters): replication factor ${RF}, min ISR ${MIN_ISR}."
  # Three JVMs share two cores: fewer request, background and group
  # coordinator threads than the single node's (Kafka's defaults are 3, 8, 10
  # and 4). One replica fetcher thread per source broker is Kafka's default.
  THREAD_LINES="num.network.threads=1
num.io.threads=2
num.recovery.threads.per.data.dir=1
background.threads=2
num.replica.fetchers=1
group.coordinator.threads=1"
  DEFAULT_HEAP="-Xms128m -Xmx384m"
  # Three JVMs share two cores: one GC thread of each kind (not one per core),
  # and only the C1 JIT compiler: C2 takes a third of a node's start-up CPU
  # (3.3-4.4 CPU-s to listen instead of 2.1-2.4) and keeps compiling for a
  # minute after; C1's code is slower; the harness's loads are small (60 events/s).
  CLUSTER_JVM_OPTS="-XX:ParallelGCThreads=1 -XX:ConcGCThreads=1 -XX:TieredStopAtLevel=1"
else
  QUORUM_LINES="controller.quorum.bootstrap.servers=127.0.0.1:${CONTROLLER_PORT}"
  REPLICATION_COMMENT="# Single node: everything has one replica."
  THREAD_LINES="num.network.threads=2
num.io.threads=4
num.recovery.threads.per.data.dir=1
background.threads=4"
  DEFAULT_HEAP="-Xms256m -Xmx512m"
  CLUSTER_JVM_OPTS=""
fi

cat >"${DATA_DIR}/server.properties" <<EOF
# Written by scripts/kafka/start.sh; rewritten on every start.
process.roles=broker,controller
node.id=${NODE_ID}
${QUORUM_LINES}
listeners=PLAINTEXT://127.0.0.1:${PORT},CONTROLLER://127.0.0.1:${CONTROLLER_PORT}
advertised.listeners=PLAINTEXT://127.0.0.1:${PORT}
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT

log.dirs=${LOG_DIRS}

${REPLICATION_COMMENT}
num.partitions=1
default.replication.factor=${RF}
min.insync.replicas=${MIN_ISR}
offsets.topic.replication.factor=${RF}
transaction.state.log.replication.factor=${RF}
transaction.state.log.min.isr=${MIN_ISR}
share.coordinator.state.topic.replication.factor=${RF}
share.coordinator.state.topic.min.isr=${MIN_ISR}

auto.create.topics.enable=false
delete.topic.enable=true
group.initial.rebalance.delay.ms=0
group.min.session.timeout.ms=6000

# Small footprint for a 2-core test machine.
${THREAD_LINES}
log.segment.bytes=16777216
log.index.size.max.bytes=1048576
log.retention.hours=24
log.cleaner.threads=1
log.cleaner.dedupe.buffer.size=16777216
EOF
if [ -n "${KAFKA_EXTRA_PROPERTIES:-}" ]; then
  {
    echo
    echo "# From KAFKA_EXTRA_PROPERTIES"
    printf '%s\n' "${KAFKA_EXTRA_PROPERTIES}"
  } >>"${DATA_DIR}/server.properties"
fi

# shellcheck disable=SC2206 # the *_OPTS variables are word-split on purpose
HEAP_OPTS=(${KAFKA_HEAP_OPTS:-${DEFAULT_HEAP}})
# shellcheck disable=SC2206
PERF_OPTS=(${KAFKA_JVM_PERFORMANCE_OPTS:--server -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:InitiatingHeapOccupancyPercent=35 -XX:+ExplicitGCInvokesConcurrent -Djava.awt.headless=true ${CLUSTER_JVM_OPTS}})
# shellcheck disable=SC2206
EXTRA_OPTS=(${KAFKA_OPTS:-})
LOG_OPTS=("-Dlog4j2.configurationFile=${DATA_DIR}/log4j2.properties" "-Dkafka.logs.dir=${DATA_DIR}")
CP="${LIBS}/*"

if [ -n "${VOTERS}" ]; then
  NODE_DESC="Kafka node ${NODE_ID} of a ${VOTER_COUNT}-voter cluster"
  # Static quorum: the voters come from controller.quorum.voters, so the format
  # step takes neither --standalone nor --initial-controllers.
  FORMAT_ARGS=()
  FORMAT_DESC="static ${VOTER_COUNT}-voter KRaft quorum"
  if [ -z "${KAFKA_CLUSTER_ID:-}" ] && [ ! -f "${LOG_DIRS}/meta.properties" ]; then
    echo "start.sh: a cluster node needs KAFKA_CLUSTER_ID (the same on every node) to format ${LOG_DIRS}" >&2
    exit 2
  fi
else
  NODE_DESC="Kafka"
  FORMAT_ARGS=(--standalone)
  FORMAT_DESC="standalone KRaft quorum"
fi

if [ -f "${LOG_DIRS}/meta.properties" ]; then
  echo "start.sh: ${LOG_DIRS} is already formatted; reusing it." >&2
else
  CLUSTER_ID="${KAFKA_CLUSTER_ID:-$(kafka_gen_cluster_id)}"
  echo "start.sh: formatting ${LOG_DIRS} (cluster id ${CLUSTER_ID}, ${FORMAT_DESC})" >&2
  if ! "${JAVA}" -Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 "${KAFKA_CDS_OPTS[@]}" "${LOG_OPTS[@]}" -cp "${CP}" kafka.tools.StorageTool format \
        --config "${DATA_DIR}/server.properties" \
        --cluster-id "${CLUSTER_ID}" \
        "${FORMAT_ARGS[@]}" >"${DATA_DIR}/format.log" 2>&1; then
    echo "start.sh: formatting the storage failed:" >&2
    cat "${DATA_DIR}/format.log" >&2
    exit 1
  fi
fi

echo "start.sh: starting ${NODE_DESC} on 127.0.0.1:${PORT} (controller 127.0.0.1:${CONTROLLER_PORT}); log in ${DATA_DIR}/server.log" >&2
exec "${JAVA}" "${HEAP_OPTS[@]}" "${PERF_OPTS[@]}" "${KAFKA_CDS_OPTS[@]}" "${LOG_OPTS[@]}" "${EXTRA_OPTS[@]}" \
  -cp "${CP}" kafka.Kafka "${DATA_DIR}/server.properties"
