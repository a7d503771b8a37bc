#!/usr/bin/env bash
# Build ${KAFKA_HOME}/kafka-cds.jsa, a dynamic class-data-sharing (AppCDS)
# archive of the classes a Kafka broker loads, so later JVMs (broker, storage
# format, tools) start faster: on a 2-core machine a broker is ready in ~3 s
# instead of ~5 s. fetch.sh runs this once after fetching the jars.
#
# How: starts a throw-away broker with -XX:ArchiveClassesAtExit on two free
# loopback ports, creates a topic, produces, consumes in a group, then stops it
# with SIGTERM; the JVM writes the archive as it exits. ~15 s.
#
# The archive is only used while the jars and the JDK are the ones it was built
# with (a stamp file next to it records them); otherwise it is ignored.
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source-path=SCRIPTDIR source=common.sh
. "${SCRIPT_DIR}/common.sh"

if [ ! -f "${KAFKA_LIBS}/.complete" ]; then
  echo "cds.sh: no jars in ${KAFKA_LIBS}; run scripts/kafka/fetch.sh first." >&2
  exit 1
fi
if kafka_cds_fresh; then
  echo "Class-data-sharing archive ${KAFKA_CDS_ARCHIVE} is up to date."
  exit 0
fi

if command -v flock >/dev/null 2>&1; then
  exec 8>"${KAFKA_HOME}/.cds.lock"
  flock 8
  if kafka_cds_fresh; then
    echo "Class-data-sharing archive ${KAFKA_CDS_ARCHIVE} is up to date."
    exit 0
  fi
fi

echo "Building the class-data-sharing archive ${KAFKA_CDS_ARCHIVE} (runs a throw-away broker, ~15 s) ..."
START_S=$(date +%s)
WORK="$(mktemp -d "${TMPDIR:-/tmp}/kafka-cds.XXXXXX")"
BROKER_PID=""
cleanup() {
  if [ -n "${BROKER_PID}" ] && kill -0 "${BROKER_PID}" 2>/dev/null; then
    kill -KILL "${BROKER_PID}" 2>/dev/null || true
  fi
  rm -rf "${WORK}"
}
trap cleanup EXIT

fail() {
  echo "cds.sh: $*" >&2
  if [ -f "${WORK}/broker/server.log" ]; then
    echo "cds.sh: last lines of the broker log:" >&2
    tail -n 20 "${WORK}/broker/server.log" >&2
  fi
  exit 1
}

# Two free consecutive loopback ports.
PORT=""
for _ in $(seq 1 50); do
  p=$(( 20000 + RANDOM % 40000 ))
  if ! kafka_port_in_use "${p}" && ! kafka_port_in_use $(( p + 1 )); then
    PORT="${p}"
    break
  fi
done
[ -n "${PORT}" ] || fail "found no free port pair"
BOOT="127.0.0.1:${PORT}"

# Nothing below may use a (stale) archive while a new one is being made.
export KAFKA_CDS=0
KAFKA_CONTROLLER_PORT=$(( PORT + 1 )) \
KAFKA_OPTS="-XX:ArchiveClassesAtExit=${WORK}/kafka.jsa -Xlog:cds=off -Xlog:cds+dynamic=off" \
  "${SCRIPT_DIR}/start.sh" "${PORT}" "${WORK}/broker" </dev/null >"${WORK}/start.out" 2>&1 &
BROKER_PID=$!

for _ in $(seq 1 1200); do
  kafka_port_in_use "${PORT}" && break
  kill -0 "${BROKER_PID}" 2>/dev/null || { cat "${WORK}/start.out" >&2; fail "the training broker exited early"; }
  sleep 0.1
done
kafka_port_in_use "${PORT}" || fail "the training broker did not open ${BOOT} within 120 s"

TOOL="${SCRIPT_DIR}/tool.sh"
"${TOOL}" topics --bootstrap-server "${BOOT}" --create --topic cds-training \
  --partitions 6 --replication-factor 1 >/dev/null \
  || fail "creating a topic failed"
seq 1 50 | sed 's/.*/k&:v&/' | "${TOOL}" console-producer --bootstrap-server "${BOOT}" \
  --topic cds-training --reader-property parse.key=true --reader-property key.separator=: \
  || fail "producing failed"
"${TOOL}" console-consumer --bootstrap-server "${BOOT}" --topic cds-training \
  --group cds-training --from-beginning --max-messages 50 --timeout-ms 30000 \
  --command-property partition.assignment.strategy=org.apache.kafka.clients.consumer.CooperativeStickyAssignor \
  >/dev/null 2>"${WORK}/consumer.err" \
  || { cat "${WORK}/consumer.err" >&2; fail "consuming failed"; }

kill -TERM "${BROKER_PID}"
wait "${BROKER_PID}" || true   # 143 after SIGTERM
BROKER_PID=""

[ -s "${WORK}/kafka.jsa" ] || fail "the JVM wrote no archive"
mv "${WORK}/kafka.jsa" "${KAFKA_CDS_ARCHIVE}.tmp.$$"
mv "${KAFKA_CDS_ARCHIVE}.tmp.$$" "${KAFKA_CDS_ARCHIVE}"
kafka_cds_stamp >"${KAFKA_CDS_ARCHIVE}.stamp"
echo "Done: $(du -h "${KAFKA_CDS_ARCHIVE}" | cut -f1) archive, took $(( $(date +%s) - START_S ))s."
