#!/usr/bin/env bash
# Installs what the web tests need on a clean machine: Debian's Chromium (apt-get) for the
# real-browser test, and playwright-core to drive it and TypeScript to check the client's
# declarations (npm ci in web/, pinned by web/package-lock.json). Idempotent: does nothing that is
# already done.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
. scripts/apt.sh

chromium="${CHROMIUM_PATH:-/usr/bin/chromium}"
if [ ! -x "${chromium}" ]; then
  echo "setup-web: installing Debian's chromium (a minute or two)"
  apt_install setup-web chromium
fi
echo "setup-web: $("${chromium}" --version 2>/dev/null || echo "chromium at ${chromium}")"

if [ ! -d web/node_modules/playwright-core ] || [ ! -d web/node_modules/typescript ]; then
  echo "setup-web: npm ci in web/ (playwright-core, no browser download; typescript)"
  (cd web && npm ci --no-audit --no-fund)
fi
echo "setup-web: playwright-core $(node -p "require('./web/node_modules/playwright-core/package.json').version")"
echo "setup-web: typescript $(node -p "require('./web/node_modules/typescript/package.json').version")"
