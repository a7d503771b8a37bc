#!/usr/bin/env bash
# The one test command: sets up what the tests need on a clean machine and runs them all.
#
#   0. OpenSSL's headers and pkg-config for librdkafka's TLS (scripts/setup-build.sh).
#   1. Apache Kafka 4.4.0 jars from Maven Central (scripts/kafka/fetch.sh; Java 17 and Maven
#      are on the machine), for the real-broker end-to-end test.
#   2. Debian's Chromium and playwright-core (scripts/setup-web.sh), for the real-browser test (and TypeScript).
#   2b. Debian's Prometheus and promtool (scripts/setup-prometheus.sh), for the metrics test.
#   2c. Debian's HAProxy (scripts/setup-haproxy.sh), in front of two gateway replicas.
#   3. The browser client library's and the pages' unit tests (node --test web/test/client/ web/test/pages/),
#      and the client's TypeScript declarations (tsc --noEmit -p web/test/types).
#   4. The three binaries, release profile (the end-to-end tests spawn them as processes).
#   5. Every test of the workspace: unit tests, in-process integration tests, the end-to-end
#      scenario against the embedded broker and against real Apache Kafka (the one against Kafka in
#      Docker via testcontainers is ignored, with its reason, as it needs a Docker engine),
#      operations (drain, SIGTERM, SIGSTOP, malformed frames), the Docker deployment checks
#      (compose-go validation with the machine's Go) and the live pages in headless Chromium
#      (screenshots in target/browser-artifacts/).
#   6. The benchmark tool once at its tiny size, against Centrifugo and Socket.IO too (they are
#      installed from the Go module proxy and npm on first use), so it cannot rot; then its
#      recovery-vs-log-age and publisher-failover measures (not in the default set) at their tiny
#      size (the failover one adds about 15 s).
#   7. Three short random fault schedules on Apache Kafka (target/release/chaos --kafka real;
#      CHAOS_SEED picks the first seed, default 1): kills, freezes, graceful restarts and drains of
#      nodes, two gateways behind HAProxy and the publisher, node links to Kafka frozen, slowed or
#      cut, clients that stop reading, reconnect storms, under publishing; every client checked
#      afterwards.
#
# Environment: KAFKA_BOOTSTRAP=host:port runs the "real Kafka" test against your broker instead.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

step() { printf '\n==> %s\n' "$*"; }

step "build dependencies: OpenSSL headers for librdkafka's TLS (scripts/setup-build.sh)"
scripts/setup-build.sh

step "Kafka broker jars from Maven Central (scripts/kafka/fetch.sh)"
scripts/kafka/fetch.sh

step "Chromium and playwright-core for the browser test (scripts/setup-web.sh)"
scripts/setup-web.sh

step "Prometheus and promtool for the metrics test (scripts/setup-prometheus.sh)"
scripts/setup-prometheus.sh

step "HAProxy in front of the gateway replicas (scripts/setup-haproxy.sh)"
scripts/setup-haproxy.sh

step "browser client library and page unit tests (node --test web/test/client/ web/test/pages/)"
node --test web/test/client/ web/test/pages/
web/node_modules/.bin/tsc --noEmit -p web/test/types

step "building the fleet's binaries (cargo build --release --workspace --bins)"
cargo build --release --workspace --bins

step "running every test (cargo test --release --workspace)"
cargo test --release --workspace -- --nocapture "$@"

# The binary built in step 4 (`cargo run -p e2e` would resolve features for e2e alone and rebuild).
step "the benchmark tool at its tiny size, peers included (target/release/bench --size tiny)"
target/release/bench --size tiny --out target/bench/tiny

step "the recovery-vs-log-age and publisher-failover measures at their tiny size (target/release/bench --size tiny --only age --only writer --no-peers)"
target/release/bench --size tiny --only age --only writer --no-peers --out target/bench/tiny-age

step "three short random fault schedules (target/release/chaos --kafka real --seed ${CHAOS_SEED:-1} --schedules 3)"
target/release/chaos --kafka real --seed "${CHAOS_SEED:-1}" --schedules 3

step "all tests passed"
