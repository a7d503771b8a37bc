//! An in-place upgrade's history: a log written in the present record format (format 1, pixel
//! events, as the publisher of before channels wrote it) is read by this build's binaries. The
//! publisher rebuilds its heads from it and continues every canvas's versions; clients of both
//! protocols (`canvas=` frames and `channel=` frames) get each canvas at the log's version and
//! then every new publication, with the publisher's hash. Records written now are format 2, beside
//! the old ones in the same partitions.

use crate::block_on;
use e2e::bench::kafka::DirectProducer;
use e2e::broker::{Broker, BrokerKind};
use e2e::client::{Client, ClientTiming};
use e2e::fleet::{Fleet, FleetSpec};
use e2e::procs::Timeline;
use e2e::scenario::{finish, wait_connected, wait_for_heads};
use shared::CanvasDims;
use std::sync::Arc;
use std::time::Duration;

/// Events each canvas has in the old log.
const OLD_EVENTS: u64 = 30;

#[test]
fn a_log_of_the_present_format_is_read_by_the_new_binaries_and_clients_resume_on_it() {
    block_on(async {
        let broker = Broker::start(BrokerKind::Embedded).await.expect("broker");
        let spec = FleetSpec::default();
        let dims = CanvasDims { width: spec.width, height: spec.height };
        let topic = format!("canvas-events-old-{:08x}", rand::random::<u32>());
        broker.precreate_topic(&topic, spec.partitions as i32).expect("topic");
        let canvases = vec!["old-1".to_owned(), "old-2".to_owned()];
        let mut old = DirectProducer::new(&broker.bootstrap, &topic, spec.partitions, spec.width, canvases.clone(), false).expect("producer");
        for _ in 0..OLD_EVENTS {
            for i in 0..canvases.len() {
                old.send(i).await.expect("an old record");
            }
        }
        old.flush().expect("the old log written");

        let spec = FleetSpec { env: vec![("KAFKA_TOPIC".into(), topic.clone())], ..spec };
        let fleet = Fleet::start(&broker, spec, Timeline::new(true)).await.expect("the new fleet");
        let ws = fleet.gateway_ws();
        let pixels: Arc<dyn shared::model::Model> = Arc::new(shared::model::pixels::Pixels { dims });
        let mut clients = Vec::new();
        for c in &canvases {
            clients.push(Client::spawn(&format!("{c}-canvas-frames"), &ws, c, dims, ClientTiming::default()));
            clients.push(Client::spawn_channel(&format!("{c}-channel-frames"), &[ws.clone()], c, pixels.clone(), ClientTiming::default(), None));
        }
        wait_connected(&clients).await.expect("clients");
        for c in &clients {
            assert_eq!(c.version(), OLD_EVENTS, "{} starts at the old log's version", c.report().name);
        }
        // New publications continue the old versions, by the pixel route and by the channel route.
        let http = reqwest::Client::new();
        for n in 0..10u32 {
            for (i, c) in canvases.iter().enumerate() {
                let (url, body) = if i == 0 {
                    (format!("{}/canvases/{c}/pixels", fleet.publisher.url()), serde_json::json!({"x": n, "y": 5, "color": "#112233"}))
                } else {
                    (format!("{}/channels/{c}/publications", fleet.publisher.url()), serde_json::json!({"data": {"x": n, "y": 6, "color": "#445566"}}))
                };
                let r = http.post(&url).json(&body).timeout(Duration::from_secs(10)).send().await.expect("publish");
                let status = r.status().as_u16();
                let answer: serde_json::Value = r.json().await.unwrap_or_default();
                assert_eq!((status, answer["version"].as_u64()), (201, Some(OLD_EVENTS + u64::from(n) + 1)), "{url}: {answer}");
            }
        }
        let truths = wait_for_heads(&fleet, &clients, &canvases).await.expect("every client at the head");
        let (_, verdicts) = finish(clients, &truths).await;
        for v in &verdicts {
            assert!(v.ok(), "{v:?}");
            assert_eq!((v.base, v.head, v.events), (OLD_EVENTS, OLD_EVENTS + 10, 10), "{v:?}");
        }
    });
}
