//! Configuration of `core-publisher`: flags with environment-variable fallbacks.

use clap::Parser;
use shared::kafka::KafkaSettings;
use shared::CanvasDims;
use std::net::SocketAddr;
use std::time::Duration;

/// `core-publisher` settings. Every flag can also be given by the environment variable named in
/// its help.
#[derive(Debug, Clone, Parser)]
#[command(name = "core-publisher", version, about = "Versions canvas edits and publishes them to Kafka")]
pub struct Config {
    /// Address to serve HTTP on.
    #[arg(long, env = "LISTEN_ADDR", default_value = "0.0.0.0:8080")]
    pub listen: SocketAddr,
    /// Kafka `bootstrap.servers`.
    #[arg(long, env = "KAFKA_BOOTSTRAP", default_value = "localhost:9092")]
    pub kafka_bootstrap: String,
    /// Topic of pixel events.
    #[arg(long, env = "KAFKA_TOPIC", default_value = shared::kafka::DEFAULT_TOPIC)]
    pub topic: String,
    /// Partitions to create the topic with when it does not exist (an existing topic keeps its own
    /// count, which is then what the partitioner divides by).
    #[arg(long, env = "TOPIC_PARTITIONS", default_value_t = 6, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub partitions: u32,
    /// Replication factor for a topic this process creates.
    #[arg(long, env = "TOPIC_REPLICATION_FACTOR", default_value_t = 1, value_parser = clap::value_parser!(i32).range(1..=32))]
    pub replication_factor: i32,
    /// Canvas width in pixels.
    #[arg(long, env = "CANVAS_WIDTH", default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub canvas_width: u32,
    /// Canvas height in pixels.
    #[arg(long, env = "CANVAS_HEIGHT", default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub canvas_height: u32,
    /// How long one publish may wait for Kafka's acknowledgement (`message.timeout.ms`), ms.
    #[arg(long, env = "PRODUCE_TIMEOUT_MS", default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(100..=300_000))]
    pub produce_timeout_ms: u64,
    /// Load and print the configuration, then exit 0 (exit 2 on a bad value).
    #[arg(long)]
    pub check_config: bool,
}

impl Config {
    /// The canvas size.
    pub fn dims(&self) -> CanvasDims {
        CanvasDims { width: self.canvas_width, height: self.canvas_height }
    }

    /// Kafka client settings.
    pub fn kafka(&self) -> KafkaSettings {
        KafkaSettings::new(&self.kafka_bootstrap)
    }

    /// Every problem of this configuration that clap's per-value checks cannot see (empty).
    pub fn problems(&self) -> Vec<String> {
        let mut p = Vec::new();
        if self.kafka_bootstrap.trim().is_empty() {
            p.push("KAFKA_BOOTSTRAP (--kafka-bootstrap) is empty".to_owned());
        }
        p.extend(shared::kafka::topic_name_problem(&self.topic).map(|e| format!("KAFKA_TOPIC (--topic): {e}")));
        p
    }

    /// The effective configuration, one `VARIABLE=value` per line.
    pub fn describe(&self) -> String {
        shared::telemetry::env_lines(&[
            ("LISTEN_ADDR", self.listen.to_string()),
            ("KAFKA_BOOTSTRAP", self.kafka_bootstrap.clone()),
            ("KAFKA_TOPIC", self.topic.clone()),
            ("TOPIC_PARTITIONS", self.partitions.to_string()),
            ("TOPIC_REPLICATION_FACTOR", self.replication_factor.to_string()),
            ("CANVAS_WIDTH", self.canvas_width.to_string()),
            ("CANVAS_HEIGHT", self.canvas_height.to_string()),
            ("PRODUCE_TIMEOUT_MS", self.produce_timeout_ms.to_string()),
        ])
    }

    /// `produce_timeout_ms` as a duration.
    pub fn produce_timeout(&self) -> Duration {
        Duration::from_millis(self.produce_timeout_ms)
    }
}

impl shared::shutdown::ServiceConfig for Config {
    fn problems(&self) -> Vec<String> {
        Config::problems(self)
    }
    fn describe(&self) -> String {
        Config::describe(self)
    }
    fn check_only(&self) -> bool {
        self.check_config
    }
    fn listen(&self) -> std::net::SocketAddr {
        self.listen
    }
}
