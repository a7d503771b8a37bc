#!/usr/bin/env bash
# Start a three-node Apache Kafka cluster (KRaft, each node a combined
# broker+controller, one static 3-voter quorum) on loopback, in the foreground:
#
#   scripts/kafka/cluster.sh <base-port> <dir>            # all three nodes
#   scripts/kafka/cluster.sh <base-port> <dir> <node-id>  # just node 1, 2 or 3
#
# Node i (1..3) takes client port <base-port>+2(i-1) and controller port
# <base-port>+2(i-1)+1, so base 19092 gives clients 127.0.0.1:19092,
# 127.0.0.1:19094, 127.0.0.1:19096 and controllers 19093, 19095, 19097. Its data
# dir is <dir>/node-<i> (server.log, server.properties, data/; see start.sh).
# Every node is started by start.sh with:
#   KAFKA_NODE_ID=<i> KAFKA_CONTROLLER_PORT=<its controller port>
#   KAFKA_QUORUM_VOTERS=1@127.0.0.1:<c1>,2@127.0.0.1:<c2>,3@127.0.0.1:<c3>
#   KAFKA_CLUSTER_ID=<the cluster's>   (kept in <dir>/cluster-id; reused later)
#   KAFKA_REPLICATION_FACTOR=3 KAFKA_MIN_INSYNC_REPLICAS=2
#
# With all three: waits until every client port is open (a broker opens it only
# once the quorum has a leader and the broker is unfenced), prints the bootstrap
# servers, the pids and how to restart one node, then waits. Ctrl-C or SIGTERM
# stops every node (SIGTERM, SIGKILL after KAFKA_STOP_TIMEOUT seconds, default
# 15). A node that dies (kill -9 <pid>, say) is reported; the others keep
# running, and `cluster.sh <base-port> <dir> <node-id>` in another terminal
# restarts it on the same ports and data.
#
# With a node id: exec's start.sh for that node alone (its pid is the JVM's).
#
# Environment: everything start.sh reads (KAFKA_HEAP_OPTS, KAFKA_OPTS,
# KAFKA_EXTRA_PROPERTIES, ...), except the variables above, which this script sets.
set -euo pipefail

usage() {
  echo "usage: $0 <base-port> <dir> [<node-id 1..3>]" >&2
  exit 2
}
[ "$#" -eq 2 ] || [ "$#" -eq 3 ] || usage

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source-path=SCRIPTDIR source=common.sh
. "${SCRIPT_DIR}/common.sh"

NODES=3
BASE="$1"
case "${BASE}" in
  ''|*[!0-9]*) echo "cluster.sh: '${BASE}' is not a port number" >&2; usage ;;
esac
if [ "${BASE}" -lt 1 ] || [ $(( BASE + 2 * NODES - 1 )) -gt 65535 ]; then
  echo "cluster.sh: ports ${BASE}..$(( BASE + 2 * NODES - 1 )) are out of range" >&2
  exit 2
fi
ONLY="${3:-}"
if [ -n "${ONLY}" ]; then
  case "${ONLY}" in
    1|2|3) ;;
    *) echo "cluster.sh: node id '${ONLY}' is not 1, 2 or 3" >&2; usage ;;
  esac
fi

mkdir -p "$2"
DIR="$(cd "$2" && pwd)"

client_port() { echo $(( BASE + 2 * ($1 - 1) )); }
controller_port() { echo $(( BASE + 2 * ($1 - 1) + 1 )); }

VOTERS=""
BOOTSTRAP=""
for i in $(seq 1 "${NODES}"); do
  VOTERS="${VOTERS:+${VOTERS},}${i}@127.0.0.1:$(controller_port "${i}")"
  BOOTSTRAP="${BOOTSTRAP:+${BOOTSTRAP},}127.0.0.1:$(client_port "${i}")"
done

# One cluster id for every node, kept with the data so a later start reuses it.
if [ -s "${DIR}/cluster-id" ]; then
  CLUSTER_ID="$(cat "${DIR}/cluster-id")"
else
  CLUSTER_ID="${KAFKA_CLUSTER_ID:-$(kafka_gen_cluster_id)}"
  echo "${CLUSTER_ID}" >"${DIR}/cluster-id"
fi

export KAFKA_QUORUM_VOTERS="${VOTERS}"
export KAFKA_CLUSTER_ID="${CLUSTER_ID}"
export KAFKA_REPLICATION_FACTOR=3
export KAFKA_MIN_INSYNC_REPLICAS=2

if [ -n "${ONLY}" ]; then
  KAFKA_NODE_ID="${ONLY}" KAFKA_CONTROLLER_PORT="$(controller_port "${ONLY}")" \
    exec "${SCRIPT_DIR}/start.sh" "$(client_port "${ONLY}")" "${DIR}/node-${ONLY}"
fi

for i in $(seq 1 "${NODES}"); do
  for p in "$(client_port "${i}")" "$(controller_port "${i}")"; do
    if kafka_port_in_use "${p}"; then
      echo "cluster.sh: 127.0.0.1:${p} is already in use" >&2
      exit 1
    fi
  done
done

# Make sure the jars are there once, not three times at once.
"${SCRIPT_DIR}/fetch.sh" >&2

declare -a PIDS=()
declare -a REPORTED=()
stop_all() {
  local deadline pid any
  trap - INT TERM
  echo "cluster.sh: stopping the nodes (SIGTERM)" >&2
  for pid in "${PIDS[@]}"; do
    # A paused (SIGSTOPped) node handles SIGTERM only once it runs again.
    kill -TERM "${pid}" 2>/dev/null || true
    kill -CONT "${pid}" 2>/dev/null || true
  done
  deadline=$(( $(date +%s) + ${KAFKA_STOP_TIMEOUT:-15} ))
  while :; do
    any=0
    for pid in "${PIDS[@]}"; do
      kill -0 "${pid}" 2>/dev/null && any=1
    done
    [ "${any}" = "0" ] && break
    if [ "$(date +%s)" -ge "${deadline}" ]; then
      echo "cluster.sh: nodes still running after ${KAFKA_STOP_TIMEOUT:-15} s; SIGKILL" >&2
      for pid in "${PIDS[@]}"; do
        kill -KILL "${pid}" 2>/dev/null || true
      done
      break
    fi
    sleep 0.2
  done
  wait 2>/dev/null || true
  echo "cluster.sh: stopped" >&2
  exit 0
}
trap stop_all INT TERM

START_MS=$(( $(date +%s%N) / 1000000 ))
for i in $(seq 1 "${NODES}"); do
  KAFKA_NODE_ID="${i}" KAFKA_CONTROLLER_PORT="$(controller_port "${i}")" \
    "${SCRIPT_DIR}/start.sh" "$(client_port "${i}")" "${DIR}/node-${i}" </dev/null \
    2> >(sed -u "s/^/[node-${i}] /" >&2) &
  PIDS+=("$!")
  REPORTED+=(0)
done

# Wait for every client port; a node that exits first ends the start.
LAST_REPORT_S=0
while :; do
  open=0
  for i in $(seq 1 "${NODES}"); do
    kafka_port_in_use "$(client_port "${i}")" && open=$(( open + 1 ))
    if ! kill -0 "${PIDS[i - 1]}" 2>/dev/null; then
      echo "cluster.sh: node ${i} exited during start-up; see ${DIR}/node-${i}/server.log" >&2
      stop_all
    fi
  done
  [ "${open}" = "${NODES}" ] && break
  ELAPSED_S=$(( ( $(date +%s%N) / 1000000 - START_MS ) / 1000 ))
  if [ "${ELAPSED_S}" -ge $(( LAST_REPORT_S + 5 )) ]; then
    echo "cluster.sh: ${open}/${NODES} nodes listening after ${ELAPSED_S} s" >&2
    LAST_REPORT_S="${ELAPSED_S}"
  fi
  if [ "${ELAPSED_S}" -ge 180 ]; then
    echo "cluster.sh: the cluster did not come up within 180 s" >&2
    stop_all
  fi
  sleep 0.2
done
UP_MS=$(( $(date +%s%N) / 1000000 - START_MS ))

echo
echo "Kafka cluster ${CLUSTER_ID} is up after $(( UP_MS / 1000 )).$(( UP_MS % 1000 / 100 )) s (Ctrl-C stops it):"
echo "  bootstrap servers  ${BOOTSTRAP}"
for i in $(seq 1 "${NODES}"); do
  echo "  node ${i}  client 127.0.0.1:$(client_port "${i}")  controller 127.0.0.1:$(controller_port "${i}")  pid ${PIDS[i - 1]}  log ${DIR}/node-${i}/server.log"
done
echo "  restart a node that died:  $0 ${BASE} ${DIR} <node-id>"
echo

while :; do
  alive=0
  for i in $(seq 1 "${NODES}"); do
    pid="${PIDS[i - 1]}"
    if kill -0 "${pid}" 2>/dev/null; then
      alive=$(( alive + 1 ))
    elif [ "${REPORTED[i - 1]}" = "0" ]; then
      status=0
      wait "${pid}" 2>/dev/null || status=$?
      echo "cluster.sh: node ${i} (pid ${pid}) exited with status ${status}; restart it with: $0 ${BASE} ${DIR} ${i}" >&2
      REPORTED[i - 1]=1
    fi
  done
  if [ "${alive}" = "0" ]; then
    echo "cluster.sh: every node this script started has exited" >&2
    exit 1
  fi
  # Waiting on a background sleep lets the INT/TERM trap run at once.
  sleep 1 &
  wait "$!" || true
done
