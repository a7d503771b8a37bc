#!/usr/bin/env bash
# Resolve a runnable Apache Kafka broker (plus its CLI tools and a log4j2
# backend) from Maven Central into ${KAFKA_HOME}/libs, using scripts/kafka/pom.xml.
#
# Idempotent: a marker file libs/.complete records the Kafka version and the
# pom's checksum; when it matches, nothing is done. Safe to run concurrently
# (serialised with flock when available).
#
# Environment:
#   KAFKA_HOME      where to put libs/ (default: <repo>/target/kafka)
#   MVN             maven command (default: mvn)
#   KAFKA_MVN_ARGS  extra maven arguments, e.g. -Dmaven.repo.local=/some/dir
#   KAFKA_CDS=0     do not build the class-data-sharing archive (see cds.sh)
#
# After the jars, it builds ${KAFKA_HOME}/kafka-cds.jsa with cds.sh (once,
# ~15 s; makes every broker start ~2 s faster). A failure there only warns.
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source-path=SCRIPTDIR source=common.sh
. "${SCRIPT_DIR}/common.sh"
POM="${SCRIPT_DIR}/pom.xml"
LIBS="${KAFKA_LIBS}"
MARKER="${LIBS}/.complete"
MVN="${MVN:-mvn}"

KAFKA_VERSION="$(sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' "${POM}" | head -n 1)"
if [ -z "${KAFKA_VERSION}" ]; then
  echo "fetch.sh: could not read <kafka.version> from ${POM}" >&2
  exit 1
fi
POM_SUM="$(sha256sum "${POM}" | cut -d' ' -f1)"
WANT="kafka=${KAFKA_VERSION} pom=${POM_SUM}"

is_complete() {
  [ -f "${MARKER}" ] && [ "$(cat "${MARKER}")" = "${WANT}" ] \
    && [ -f "${LIBS}/kafka_2.13-${KAFKA_VERSION}.jar" ]
}

maybe_build_cds() {
  # start.sh and tool.sh call us with _KAFKA_NO_CDS_BUILD=1: they never wait for it.
  if [ "${KAFKA_CDS:-1}" = "0" ] || [ "${_KAFKA_NO_CDS_BUILD:-0}" = "1" ] || kafka_cds_fresh; then
    return 0
  fi
  if ! "${SCRIPT_DIR}/cds.sh"; then
    echo "fetch.sh: warning: could not build the class-data-sharing archive; Kafka still works, it just starts ~2 s slower." >&2
  fi
}

if is_complete; then
  echo "Kafka ${KAFKA_VERSION} jars already present in ${LIBS}; nothing to do."
  maybe_build_cds
  exit 0
fi

mkdir -p "${KAFKA_HOME}"
if command -v flock >/dev/null 2>&1; then
  exec 9>"${KAFKA_HOME}/.fetch.lock"
  flock 9
  # Another fetch may have finished while we waited for the lock.
  if is_complete; then
    echo "Kafka ${KAFKA_VERSION} jars already present in ${LIBS}; nothing to do."
    exec 9>&-
    maybe_build_cds
    exit 0
  fi
fi

if ! command -v "${MVN}" >/dev/null 2>&1; then
  echo "fetch.sh: '${MVN}' not found; install Maven (e.g. apt-get install maven) and retry." >&2
  exit 1
fi

echo "Fetching Apache Kafka ${KAFKA_VERSION} and its runtime dependencies from Maven Central into ${LIBS} ..."
START_S=$(date +%s)
TMP_LIBS="${KAFKA_HOME}/libs.tmp.$$"
MVN_LOG="${KAFKA_HOME}/fetch-maven.log"
rm -rf "${TMP_LIBS}"
trap 'rm -rf "${TMP_LIBS}"' EXIT

# shellcheck disable=SC2086 # KAFKA_MVN_ARGS is intentionally word-split
if ! "${MVN}" -B -q -Dstyle.color=never ${KAFKA_MVN_ARGS:-} -f "${POM}" \
      dependency:copy-dependencies \
      -DincludeScope=runtime \
      -DoutputDirectory="${TMP_LIBS}" >"${MVN_LOG}" 2>&1; then
  echo "fetch.sh: Maven failed to resolve Kafka ${KAFKA_VERSION}. Last lines of ${MVN_LOG}:" >&2
  sed 's/\x1b\[[0-9;]*m//g' "${MVN_LOG}" | tail -n 30 >&2
  exit 1
fi

if [ ! -f "${TMP_LIBS}/kafka_2.13-${KAFKA_VERSION}.jar" ]; then
  echo "fetch.sh: Maven succeeded but kafka_2.13-${KAFKA_VERSION}.jar is missing from its output; see ${MVN_LOG}." >&2
  exit 1
fi

echo "${WANT}" >"${TMP_LIBS}/.complete"
rm -rf "${LIBS}"
mv "${TMP_LIBS}" "${LIBS}"
trap - EXIT

COUNT=$(find "${LIBS}" -name '*.jar' | wc -l)
SIZE=$(du -sh "${LIBS}" | cut -f1)
echo "Done: ${COUNT} jars (${SIZE}) in ${LIBS}, took $(( $(date +%s) - START_S ))s."
if command -v flock >/dev/null 2>&1; then
  exec 9>&-
fi
maybe_build_cds
