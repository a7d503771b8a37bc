# Shared settings for the scripts in scripts/kafka/ (sourced, not run).
# shellcheck shell=bash

KAFKA_SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
KAFKA_REPO_ROOT="$(cd "${KAFKA_SCRIPT_DIR}/../.." && pwd)"
export KAFKA_HOME="${KAFKA_HOME:-${KAFKA_REPO_ROOT}/target/kafka}"
KAFKA_LIBS="${KAFKA_HOME}/libs"
KAFKA_CDS_ARCHIVE="${KAFKA_HOME}/kafka-cds.jsa"

if [ -n "${JAVA_HOME:-}" ]; then
  JAVA="${JAVA_HOME}/bin/java"
else
  JAVA="java"
fi

# What the class-data-sharing archive depends on: the exact jars, where they
# are (the JVM refuses an archive whose recorded class path differs, so a
# target/kafka copied from another checkout needs its own) and the JDK.
kafka_cds_stamp() {
  local java_bin modules
  [ -f "${KAFKA_LIBS}/.complete" ] || return 1
  java_bin="$(command -v "${JAVA}")" || return 1
  java_bin="$(readlink -f "${java_bin}")"
  modules="$(dirname "$(dirname "${java_bin}")")/lib/modules"
  printf '%s|%s|%s|%s\n' "$(cat "${KAFKA_LIBS}/.complete")" "${java_bin}" \
    "$(stat -c %Y "${modules}" 2>/dev/null || echo none)" "$(cd "${KAFKA_LIBS}" && pwd -P)"
}

kafka_cds_fresh() {
  [ -f "${KAFKA_CDS_ARCHIVE}" ] && [ -f "${KAFKA_CDS_ARCHIVE}.stamp" ] \
    && [ "$(cat "${KAFKA_CDS_ARCHIVE}.stamp")" = "$(kafka_cds_stamp)" ]
}

# Sets the array KAFKA_CDS_OPTS: JVM options that use the archive built by
# cds.sh when it is there and current (start-up ~2 s faster), else nothing.
# A JVM that cannot use the archive anyway just starts without it.
# shellcheck disable=SC2034 # used by the scripts that source this file
kafka_cds_opts() {
  KAFKA_CDS_OPTS=()
  if [ "${KAFKA_CDS:-1}" != "0" ] && kafka_cds_fresh; then
    KAFKA_CDS_OPTS=("-XX:SharedArchiveFile=${KAFKA_CDS_ARCHIVE}" -Xshare:auto
                    -Xlog:cds=off -Xlog:cds+dynamic=off)
  fi
}

kafka_port_in_use() {
  # A connect succeeds only when something listens there.
  (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# Prints a fresh cluster id, the same shape as Kafka's Uuid.randomUuid(): 16
# random bytes, URL-safe base64 without padding, never starting with '-'.
kafka_gen_cluster_id() {
  local id
  while :; do
    id="$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=\n')"
    case "${id}" in
      -*|AAAAAAAAAAAAAAAAAAAAAA|AAAAAAAAAAAAAAAAAAAAAQ) continue ;;
    esac
    echo "${id}"
    return
  done
}
