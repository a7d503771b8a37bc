#!/usr/bin/env bash
# End-to-end check of fetch.sh + start.sh with Kafka's own Java tools:
#   - start a broker on free loopback ports (in the background, no tty) and
#     check that the started pid is the JVM's
#   - wait until it accepts connections, create a topic with 6 partitions
#   - produce 12 keyed records and consume them back
#   - two console consumers in one group with the cooperative-sticky assignor
#     both get 3 partitions, the group is Stable, and together they read
#     everything produced afterwards
#   - SIGTERM stops the broker cleanly
# Prints the timings and ends with "N passed, N failed". Needs ~1 minute.
#
#   scripts/kafka/smoke.sh            # KEEP=1 keeps the data dir
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source-path=SCRIPTDIR source=common.sh
. "${SCRIPT_DIR}/common.sh"
TOOL="${SCRIPT_DIR}/tool.sh"

PASSED=0
FAILED=0
ok()  { PASSED=$(( PASSED + 1 )); echo "PASS: $*"; }
bad() { FAILED=$(( FAILED + 1 )); echo "FAIL: $*"; }
now_ms() { echo $(( $(date +%s%N) / 1000000 )); }

WORK="$(mktemp -d "${TMPDIR:-/tmp}/kafka-smoke.XXXXXX")"
BROKER_PID=""
C1_PID=""
C2_PID=""
cleanup() {
  for pid in "${C1_PID}" "${C2_PID}" "${BROKER_PID}"; do
    if [ -n "${pid}" ] && kill -0 "${pid}" 2>/dev/null; then
      kill -KILL "${pid}" 2>/dev/null || true
    fi
  done
  if [ "${KEEP:-0}" = "1" ]; then
    echo "kept ${WORK}"
  else
    rm -rf "${WORK}"
  fi
}
trap cleanup EXIT

echo "== fetch"
T=$(now_ms)
"${SCRIPT_DIR}/fetch.sh"
FETCH_MS=$(( $(now_ms) - T ))

PORT=""
for _ in $(seq 1 50); do
  p=$(( 20000 + RANDOM % 40000 ))
  if ! kafka_port_in_use "${p}" && ! kafka_port_in_use $(( p + 1 )); then
    PORT="${p}"
    break
  fi
done
[ -n "${PORT}" ] || { echo "no free port pair found" >&2; exit 1; }
BOOT="127.0.0.1:${PORT}"
DATA="${WORK}/broker"

echo "== start broker on ${BOOT} (controller 127.0.0.1:$(( PORT + 1 ))), data ${DATA}"
T0=$(now_ms)
"${SCRIPT_DIR}/start.sh" "${PORT}" "${DATA}" </dev/null >"${WORK}/start.out" 2>&1 &
BROKER_PID=$!

OPEN_MS=""
for _ in $(seq 1 1200); do
  if kafka_port_in_use "${PORT}"; then OPEN_MS=$(( $(now_ms) - T0 )); break; fi
  kill -0 "${BROKER_PID}" 2>/dev/null || break
  sleep 0.05
done
if [ -z "${OPEN_MS}" ]; then
  bad "broker did not accept connections"
  cat "${WORK}/start.out"; tail -n 30 "${DATA}/server.log" 2>/dev/null || true
  echo "${PASSED} passed, ${FAILED} failed"
  exit 1
fi
ok "broker accepts connections after ${OPEN_MS} ms"

if [ "$(cat "/proc/${BROKER_PID}/comm" 2>/dev/null)" = "java" ]; then
  ok "the pid start.sh was started as is the JVM's (${BROKER_PID})"
else
  bad "pid ${BROKER_PID} is '$(cat "/proc/${BROKER_PID}/comm" 2>/dev/null)', not java"
fi

if "${TOOL}" topics --bootstrap-server "${BOOT}" --create --topic smoke6 \
     --partitions 6 --replication-factor 1 >"${WORK}/topic.out" 2>&1; then
  READY_MS=$(( $(now_ms) - T0 ))
  ok "created topic smoke6 with 6 partitions; ready after ${READY_MS} ms"
else
  READY_MS="n/a"
  bad "topic creation failed: $(cat "${WORK}/topic.out")"
fi
if grep -q "Kafka Server started" "${DATA}/server.log"; then
  ok "server.log says 'Kafka Server started'"
else
  bad "no 'Kafka Server started' in ${DATA}/server.log"
fi

echo "== produce and consume"
seq 1 12 | sed 's/.*/key&:value&/' >"${WORK}/sent.txt"
T=$(now_ms)
"${TOOL}" console-producer --bootstrap-server "${BOOT}" --topic smoke6 \
  --reader-property parse.key=true --reader-property key.separator=: <"${WORK}/sent.txt"
PRODUCE_MS=$(( $(now_ms) - T ))
T=$(now_ms)
"${TOOL}" console-consumer --bootstrap-server "${BOOT}" --topic smoke6 --from-beginning \
  --max-messages 12 --timeout-ms 30000 \
  --formatter-property print.key=true --formatter-property key.separator=: \
  >"${WORK}/got.txt" 2>"${WORK}/consumer.err" || true
CONSUME_MS=$(( $(now_ms) - T ))
if [ "$(sort "${WORK}/sent.txt")" = "$(sort "${WORK}/got.txt")" ]; then
  ok "consumed back the 12 records produced (produce ${PRODUCE_MS} ms, consume ${CONSUME_MS} ms incl. JVM start)"
else
  bad "consumed records differ from produced ones: $(wc -l <"${WORK}/got.txt") lines"
fi
PARTS=$("${TOOL}" get-offsets --bootstrap-server "${BOOT}" --topic smoke6 | awk -F: '$3 > 0' | wc -l)
if [ "${PARTS}" -ge 2 ]; then
  ok "records are spread over ${PARTS} of the 6 partitions"
else
  bad "records landed in ${PARTS} partition(s)"
fi

echo "== consumer group with partition.assignment.strategy=cooperative-sticky"
for n in 1 2; do
  "${TOOL}" console-consumer --bootstrap-server "${BOOT}" --topic smoke6 --group smoke-coop \
    --command-property partition.assignment.strategy=org.apache.kafka.clients.consumer.CooperativeStickyAssignor \
    --command-property client.id="smoke-c${n}" --command-property auto.offset.reset=earliest \
    </dev/null >"${WORK}/c${n}.out" 2>"${WORK}/c${n}.err" &
  eval "C${n}_PID=\$!"
done
T=$(now_ms)
GROUP_OK=""
for _ in $(seq 1 60); do
  "${TOOL}" consumer-groups --bootstrap-server "${BOOT}" --describe --group smoke-coop \
    --members >"${WORK}/members.txt" 2>/dev/null || true
  if [ "$(awk '$1 == "smoke-coop" && $5 == 3' "${WORK}/members.txt" | wc -l)" = 2 ]; then
    GROUP_OK=1
    break
  fi
  sleep 0.5
done
GROUP_MS=$(( $(now_ms) - T ))
if [ -n "${GROUP_OK}" ]; then
  ok "both group members got 3 partitions each (${GROUP_MS} ms after starting them)"
else
  bad "group members/assignments not as expected:"
  cat "${WORK}/members.txt"
fi
"${TOOL}" consumer-groups --bootstrap-server "${BOOT}" --describe --group smoke-coop \
  --state >"${WORK}/state.txt" 2>/dev/null || true
if awk '$1 == "smoke-coop"' "${WORK}/state.txt" | grep -q "cooperative-sticky.*Stable"; then
  ok "group state is Stable with assignment strategy cooperative-sticky"
else
  bad "group state: $(cat "${WORK}/state.txt")"
fi
cat "${WORK}/members.txt"

seq 13 36 | sed 's/.*/key&:value&/' | "${TOOL}" console-producer --bootstrap-server "${BOOT}" \
  --topic smoke6 --reader-property parse.key=true --reader-property key.separator=:
# auto.offset.reset=earliest: together they must see all 36 records, each one
# at least once (a rebalance may legitimately replay a few).
N1=0; N2=0; UNIQ=0
for _ in $(seq 1 60); do
  N1=$(grep -c '^value' "${WORK}/c1.out" || true)
  N2=$(grep -c '^value' "${WORK}/c2.out" || true)
  UNIQ=$(cat "${WORK}/c1.out" "${WORK}/c2.out" | grep '^value' | sort -u | wc -l)
  [ "${UNIQ}" -ge 36 ] && break
  sleep 0.5
done
if [ "${UNIQ}" -eq 36 ] && [ "${N1}" -gt 0 ] && [ "${N2}" -gt 0 ]; then
  ok "the two group members read all 36 records between them (${N1} + ${N2})"
else
  bad "group members read ${N1} + ${N2} records, ${UNIQ} distinct of 36"
fi
kill -TERM "${C1_PID}" "${C2_PID}"
wait "${C1_PID}" "${C2_PID}" 2>/dev/null || true
C1_PID=""; C2_PID=""

echo "== stop broker with SIGTERM"
T=$(now_ms)
kill -TERM "${BROKER_PID}"
RC=0
wait "${BROKER_PID}" || RC=$?
STOP_MS=$(( $(now_ms) - T ))
BROKER_PID=""
if [ "${RC}" -eq 143 ] || [ "${RC}" -eq 0 ]; then
  ok "broker stopped ${STOP_MS} ms after SIGTERM (exit ${RC})"
else
  bad "broker exit code ${RC} after SIGTERM"
fi
if grep -q "shut down completed\|shutdown completed" "${DATA}/server.log"; then
  ok "server.log records a completed shutdown"
else
  bad "no completed shutdown in server.log"
fi
ERRORS=$(grep -c '^\[[^]]*\] ERROR' "${DATA}/server.log" || true)
if [ "${ERRORS}" -eq 0 ]; then
  ok "no ERROR lines in server.log"
else
  bad "${ERRORS} ERROR lines in server.log"
  grep '^\[[^]]*\] ERROR' "${DATA}/server.log" | head -n 5
fi

echo "== timings: fetch.sh ${FETCH_MS} ms; start -> port open ${OPEN_MS} ms; start -> topic created ${READY_MS} ms; SIGTERM -> exit ${STOP_MS} ms; CDS archive $( [ "${KAFKA_CDS:-1}" != 0 ] && kafka_cds_fresh && echo used || echo 'not used')"
echo "${PASSED} passed, ${FAILED} failed"
[ "${FAILED}" -eq 0 ]
