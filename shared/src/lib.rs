//! Types and helpers shared by every part of the fleet.
//!
//! The fleet is one writer (`core-publisher`) that appends versioned pixel events to a Kafka topic,
//! WebSocket servers (`ws-node`) that rebuild canvas state from that log and fan events out, and a
//! `gateway` that routes clients and runs the nodes' lifecycle. This crate holds what they must agree
//! on:
//!
//! - [`event`]: the Kafka record (key = canvas id, value = [`event::PixelEvent`] as JSON) and colours;
//! - [`canvas`]: the canvas model, its canonical bytes and SHA-256 hash;
//! - [`epoch`]: a canvas stream's epoch (which history its versions belong to), sent in `welcome`
//!   and back in the `/ws` query;
//! - [`protocol`]: WebSocket frames server → client, the `/ws` query and the close codes;
//! - [`partitioner`]: canvas id → partition, the same murmur2 hash as Kafka's Java client;
//! - [`api`]: JSON bodies exchanged over HTTP between gateway and nodes (`/health`, drain);
//! - [`http`]: the one JSON error answer of every HTTP API, and body parsing that names the field;
//! - [`control`]: the control topic (the gateway leader's claims and decisions) and the fence;
//!   [`fence`]: the admin routes' guard against a deposed leader (fencing token, one action per
//!   decision id), for ws-node and the publisher;
//! - [`auth`]: the admin token (`Authorization: Bearer`, constant-time compare);
//! - [`admin_guard`]: what every admin route refuses before its handler (an `Origin`, a POST not
//!   declared JSON, a foreign `Host` on the loopback admin listener);
//! - [`client_token`]: clients' signed tokens (JWT) for publishing and subscribing;
//! - [`serve`]: the HTTP server of every service, with a header-read timeout and a connection cap;
//! - [`probe`]: the orchestrators' probes every service answers (`/livez`, `/readyz`);
//! - [`origin`]: which `Origin`s may open a WebSocket; [`client_addr`]: the client's address
//!   behind trusted proxies; [`rate_limit`]: the publish rate limit per client address;
//! - [`kafka`]: every Kafka client setting, built in one place;
//! - [`metrics`]: the `GET /metrics` exposition (a registry per service instance);
//! - [`replay`]: reading a stretch of the log by offset up to the high watermarks (catch-up);
//! - [`snapshot`]: canvas snapshots and per-partition checkpoints in the compacted snapshot topic;
//! - [`topic_id`]: the events topic's Kafka topic ID (librdkafka's DescribeTopics);
//! - [`ws`]: WebSocket close frames and protocol-error classification;
//! - [`namespaces`] and [`fleet_config`]: the namespaces and settings of `fleet.toml`, the file every
//!   binary reads (`--config`, `FLEET_CONFIG`);
//! - [`telemetry`] and [`shutdown`]: logging set-up and the SIGINT/SIGTERM token;
//! - [`fuzzing`]: the invariants the fuzz targets and corpus tests check on the parsers of outside
//!   input.

pub mod admin_guard;
pub mod api;
pub mod auth;
pub mod canvas;
pub mod channel;
pub mod client_token;
pub mod client_addr;
pub mod consumer;
pub mod control;
pub mod epoch;
pub mod event;
pub mod fence;
pub mod fleet_config;
pub mod fuzzing;
pub mod http;
pub mod kafka;
pub mod metrics;
pub mod namespaces;
pub mod model;
pub mod origin;
pub mod partitioner;
pub mod probe;
pub mod protocol;
pub mod rate_limit;
pub mod record;
pub mod renamed;
pub mod replay;
pub mod serve;
pub mod shutdown;
pub mod snapshot;
pub mod telemetry;
pub mod topic_id;
pub mod ws;

pub use canvas::{Canvas, CanvasDims};
pub use event::{ChannelId, Color, PixelEvent};
