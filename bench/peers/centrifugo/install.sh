#!/usr/bin/env bash
# Builds the Centrifugo peer of the benchmarks from the Go module proxy with the machine's Go:
#   github.com/centrifugal/centrifugo/v6@${CENTRIFUGO_VERSION}  →  target/peers/bin/centrifugo
# With the version stamped in like Centrifugo's release builds (`-X .../internal/build.Version`), so
# `centrifugo version` reports it and the server does not warn about a development build.
# Idempotent (skips when that version is already built with this recipe). About 3 minutes the
# first time on 2 cores (plus the module downloads on a fresh machine).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../../.."
version="${CENTRIFUGO_VERSION:-v6.9.1}"
bin_dir="$(pwd)/target/peers/bin"
# Bump the recipe suffix when the build command changes, so existing builds are redone.
stamp="${bin_dir}/.centrifugo-${version}-r2"
if [ -x "${bin_dir}/centrifugo" ] && [ -f "${stamp}" ]; then
  echo "centrifugo ${version} already built in ${bin_dir}"
  exit 0
fi
if ! command -v go >/dev/null; then
  echo "install.sh: building Centrifugo ${version} needs Go (1.26+ for v6.9.1) on PATH" >&2
  exit 1
fi
mkdir -p "${bin_dir}"
echo "building centrifugo ${version} from the Go module proxy (go install; a few minutes the first time)"
GOBIN="${bin_dir}" GOFLAGS=-mod=mod CGO_ENABLED=0 go install -trimpath \
  -ldflags "-s -w -X github.com/centrifugal/centrifugo/v6/internal/build.Version=${version#v}" \
  "github.com/centrifugal/centrifugo/v6@${version}"
rm -f "${bin_dir}"/.centrifugo-*
touch "${stamp}"
"${bin_dir}/centrifugo" version
