#!/usr/bin/env bash
# Run one of Kafka's Java command-line tools from the jars fetched by fetch.sh,
# logging WARN+ to stderr:
#
#   scripts/kafka/tool.sh <tool|main-class> [args...]
#
# Short names: topics, console-producer, console-consumer, consumer-groups,
# storage, metadata-quorum, get-offsets. Anything else is taken as a class name.
# Example:
#   scripts/kafka/tool.sh topics --bootstrap-server 127.0.0.1:9092 --list
set -euo pipefail

if [ "$#" -lt 1 ]; then
  echo "usage: $0 <tool|main-class> [args...]" >&2
  exit 2
fi

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source-path=SCRIPTDIR source=common.sh
. "${SCRIPT_DIR}/common.sh"

case "$1" in
  topics)           CLASS=org.apache.kafka.tools.TopicCommand ;;
  console-producer) CLASS=org.apache.kafka.tools.ConsoleProducer ;;
  console-consumer) CLASS=org.apache.kafka.tools.consumer.ConsoleConsumer ;;
  consumer-groups)  CLASS=org.apache.kafka.tools.consumer.group.ConsumerGroupCommand ;;
  storage)          CLASS=kafka.tools.StorageTool ;;
  metadata-quorum)  CLASS=org.apache.kafka.tools.MetadataQuorumCommand ;;
  get-offsets)      CLASS=org.apache.kafka.tools.GetOffsetShell ;;
  *)                CLASS="$1" ;;
esac
shift

if [ ! -f "${KAFKA_LIBS}/.complete" ]; then
  _KAFKA_NO_CDS_BUILD=1 "${SCRIPT_DIR}/fetch.sh" >&2
fi
kafka_cds_opts

# shellcheck disable=SC2206 # word-split on purpose
HEAP_OPTS=(${KAFKA_TOOL_HEAP_OPTS:--Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1})
exec "${JAVA}" "${HEAP_OPTS[@]}" "${KAFKA_CDS_OPTS[@]}" \
  "-Dlog4j2.configurationFile=${SCRIPT_DIR}/tools-log4j2.properties" \
  -cp "${KAFKA_LIBS}/*" "${CLASS}" "$@"
