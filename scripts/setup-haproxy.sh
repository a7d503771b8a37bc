#!/usr/bin/env bash
# Installs Debian's HAProxy when it is missing, for e2e/tests/suite/gateways.rs: two gateway replicas
# behind one HAProxy (the same shape as docker-compose.yml's, which uses the official image).
# Idempotent: does nothing when `haproxy` is on the PATH.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/apt.sh"

if ! command -v haproxy > /dev/null; then
  echo "setup-haproxy: installing Debian's haproxy (under a minute)"
  apt_install setup-haproxy haproxy
  stop_service haproxy
fi
echo "setup-haproxy: $(haproxy -v 2>&1 | head -1)"
