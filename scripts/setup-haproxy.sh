#!/usr/bin/env bash
# Installs Debian's HAProxy when it is missing, for e2e/tests/suite/gateways.rs: two gateway replicas
# behind one HAProxy (the same shape as docker-compose.yml's, which uses the official image).
# Idempotent: does nothing when `haproxy` is on the PATH.
set -euo pipefail

if ! command -v haproxy > /dev/null; then
  echo "setup-haproxy: installing Debian's haproxy with apt-get (under a minute)"
  sudo=""
  if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
  ${sudo} apt-get update -q
  DEBIAN_FRONTEND=noninteractive ${sudo} apt-get install -y -q --no-install-recommends haproxy
  # The package may start its own service where an init system runs; the test starts its own.
  if command -v systemctl > /dev/null && systemctl is-active --quiet haproxy 2> /dev/null; then
    ${sudo} systemctl stop haproxy || true
  fi
fi
echo "setup-haproxy: $(haproxy -v 2>&1 | head -1)"
