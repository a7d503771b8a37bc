#!/usr/bin/env bash
# Installs the Socket.IO peer of the benchmarks from the npm registry (socket.io 4.8.1 and
# @platformatic/kafka 1.35.0, pinned by package-lock.json) with the machine's Node.js and npm.
# @platformatic/kafka 2.x needs Node.js 22.22+; the 1.x line supports Node.js >= 20.19.4, which
# is what Debian/CI machines here have. Idempotent (skips `npm ci` when node_modules matches).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  echo "install.sh: the Socket.IO peer needs Node.js (>= 20.19.4) and npm on PATH" >&2
  exit 1
fi
if ! node -e 'const [a,b]=process.versions.node.split(".").map(Number); process.exit(a>20||(a===20&&b>=19)?0:1)'; then
  echo "install.sh: Node.js $(node --version) is too old for @platformatic/kafka 1.35 (needs >= 20.19.4)" >&2
  exit 1
fi
want_kafka="$(node -p "require('./package.json').dependencies['@platformatic/kafka']")"
have_kafka="$(node -p "try { require('./node_modules/@platformatic/kafka/package.json').version } catch { '' }")"
if [ ! -d node_modules/socket.io ] || [ "${have_kafka}" != "${want_kafka}" ]; then
  echo "installing the Socket.IO peer (npm ci)"
  # Some transitive @platformatic packages declare Node >= 22.19 but run on 20 (the kafka client
  # itself supports 20.19.4+); npm only warns about that.
  npm ci --no-audit --no-fund --loglevel=error
fi
echo "socket.io $(node -p "require('./node_modules/socket.io/package.json').version"), @platformatic/kafka $(node -p "require('./node_modules/@platformatic/kafka/package.json').version"), Node.js $(node --version)"
