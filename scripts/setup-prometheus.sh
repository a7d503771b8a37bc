#!/usr/bin/env bash
# Installs Debian's Prometheus (the `prometheus` server and `promtool`) when either is missing,
# for e2e/tests/suite/metrics.rs: it lints every service's /metrics with `promtool check metrics`,
# checks deploy/prometheus/alerts.yml with `promtool check rules`, and runs a real Prometheus
# against a test fleet. Idempotent: does nothing when both are on the PATH.
set -euo pipefail

if ! command -v prometheus > /dev/null || ! command -v promtool > /dev/null; then
  echo "setup-prometheus: installing Debian's prometheus with apt-get (a minute or two)"
  sudo=""
  if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
  ${sudo} apt-get update -q
  # --no-install-recommends: the server and promtool only (no node exporter, no web assets).
  DEBIAN_FRONTEND=noninteractive ${sudo} apt-get install -y -q --no-install-recommends prometheus
  # The package may start its own service where an init system runs; the test starts its own.
  if command -v systemctl > /dev/null && systemctl is-active --quiet prometheus 2> /dev/null; then
    ${sudo} systemctl stop prometheus || true
  fi
fi
echo "setup-prometheus: $(prometheus --version 2>&1 | head -1); $(promtool --version 2>&1 | head -1)"
