# syntax=docker/dockerfile:1
#
# One image with the fleet's binaries (core-publisher, ws-node, gateway) and the `load`
# generator (package loadgen): the services share every dependency (librdkafka above all), so one build serves
# them all and docker compose builds it once. Each service picks its binary with `command:`.
#
# The build is the project's own release build (the same profile and binaries as scripts/test.sh;
# e2e/tests/suite/deploy.rs checks that they agree).

ARG RUST_VERSION=1.95
ARG DEBIAN_RELEASE=bookworm

FROM rust:${RUST_VERSION}-${DEBIAN_RELEASE} AS build
# librdkafka is built from source by rdkafka-sys (bundled): it needs a C toolchain, make, perl,
# zlib, and OpenSSL's headers with pkg-config for TLS to the brokers, all in the rust image.
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked --bins -p core-publisher -p ws-node -p gateway -p loadgen \
    && mkdir -p /out \
    && cp target/release/core-publisher target/release/ws-node target/release/gateway target/release/load /out/

FROM debian:${DEBIAN_RELEASE}-slim AS runtime
# curl: the compose health checks call each service's own /readyz (or /livez). libssl3: the
# OpenSSL librdkafka links for TLS to the brokers.
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates curl libssl3 \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --no-create-home --shell /usr/sbin/nologin fleet
COPY --from=build /out/ /usr/local/bin/
USER fleet
ENV RUST_LOG=info
# gateway 8000, core-publisher 8080, ws-node 8081 (their LISTEN_ADDR defaults)
EXPOSE 8000 8080 8081
CMD ["gateway", "--help"]
