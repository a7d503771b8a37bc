#!/usr/bin/env bash
# Installs Debian's Prometheus (the `prometheus` server and `promtool`) when either is missing,
# for e2e/tests/suite/metrics.rs: it lints every service's /metrics with `promtool check metrics`,
# checks deploy/prometheus/alerts.yml with `promtool check rules`, and runs a real Prometheus
# against a test fleet. Idempotent: does nothing when both are on the PATH.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/apt.sh"

if ! command -v prometheus > /dev/null || ! command -v promtool > /dev/null; then
  echo "setup-prometheus: installing Debian's prometheus (a minute or two)"
  # Without recommends (apt.sh): the server and promtool only (no node exporter, no web assets).
  apt_install setup-prometheus prometheus
  stop_service prometheus
fi
echo "setup-prometheus: $(prometheus --version 2>&1 | head -1); $(promtool --version 2>&1 | head -1)"
