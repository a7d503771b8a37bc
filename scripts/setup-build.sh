#!/usr/bin/env bash
# Installs what building the workspace needs beyond Rust, when it is missing: OpenSSL's headers
# and pkg-config, for librdkafka's TLS (the `rdkafka` crate's `ssl` feature links the system's
# OpenSSL, so the fleet can reach brokers over SSL / SASL_SSL), and the JDK's keytool for the
# SASL_SSL test's certificate. Idempotent: does nothing when they are there.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/apt.sh"

missing=()
command -v pkg-config > /dev/null || missing+=(pkg-config)
if ! pkg-config --exists openssl 2> /dev/null; then missing+=(libssl-dev); fi
if [ "${#missing[@]}" -gt 0 ]; then
  echo "setup-build: installing ${missing[*]}"
  apt_install setup-build "${missing[@]}"
fi
echo "setup-build: OpenSSL $(pkg-config --modversion openssl) (for librdkafka's TLS)"
if ! command -v keytool > /dev/null && [ ! -x "${JAVA_HOME:-/nonexistent}/bin/keytool" ]; then
  echo "setup-build: no keytool (it comes with the JDK, which the Kafka tests need too)" >&2
  exit 1
fi
