//! One live replica per `GATEWAY_ID`. Two replicas under one id would each take the other's
//! decisions for their own (a follower skips its own decisions when it reads them back), so a
//! replica refuses to start while a live member of the gateways' group has its id.
//!
//! A member with our id can also be this replica's previous process, killed moments ago: the
//! group coordinator drops it after the session timeout. So the start waits for that long (with
//! progress in the log) and refuses only a member that stays.

use rdkafka::consumer::Consumer;
use shared::kafka::{FleetContext, KafkaSettings};
use std::time::{Duration, Instant};

/// What the start does about the members named like this replica.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// None: start.
    Start,
    /// Some, seen for less than the wait: look again shortly.
    Wait,
    /// Some, still there after the wait: a live replica with this id.
    Refuse,
}

/// The rule: `named` members with this replica's id, first seen `seen_for` ago, against `wait`
/// (longer than a session timeout: a dead member is gone by then).
pub fn verdict(named: usize, seen_for: Duration, wait: Duration) -> Verdict {
    match named {
        0 => Verdict::Start,
        _ if seen_for < wait => Verdict::Wait,
        _ => Verdict::Refuse,
    }
}

/// How long a member with our id may stay before it counts as live: twice the session timeout
/// and a second (the coordinator expires a dead member after one session timeout, and the
/// rebalance that follows completes within about another).
pub fn wait_for(session_timeout: Duration) -> Duration {
    session_timeout * 2 + Duration::from_secs(1)
}

/// The hosts of the members of `group` whose client id is `id`.
fn members_named(settings: &KafkaSettings, group: &str, id: &str) -> Result<Vec<String>, String> {
    let consumer: rdkafka::consumer::BaseConsumer<FleetContext> =
        settings.reader(&format!("{id}-id-check")).create_with_context(FleetContext::default()).map_err(|e| e.to_string())?;
    let list = consumer.fetch_group_list(Some(group), Duration::from_secs(5)).map_err(|e| e.to_string())?;
    Ok(list.groups().iter().flat_map(|g| g.members()).filter(|m| m.client_id() == id).map(|m| m.client_host().to_owned()).collect())
}

/// Checks, on this (blocking) thread, that no live member of `group` is named `id`.
///
/// # Errors
/// A live member with this id: the start is refused. When the group cannot be described (the
/// broker does not answer, or does not support it), the check is skipped with a warning.
pub fn check(settings: &KafkaSettings, group: &str, id: &str, session_timeout: Duration) -> Result<(), String> {
    let wait = wait_for(session_timeout);
    let first_seen = Instant::now();
    let mut said = false;
    loop {
        let hosts = match members_named(settings, group, id) {
            Ok(h) => h,
            Err(e) => {
                tracing::warn!(group, error = %e, "[GATEWAY] cannot describe the gateways' group; not checked that GATEWAY_ID {} is unique", id);
                return Ok(());
            }
        };
        match verdict(hosts.len(), first_seen.elapsed(), wait) {
            Verdict::Start => return Ok(()),
            Verdict::Wait => {
                if !said {
                    tracing::warn!(
                        "[GATEWAY] a member of the gateways' group {} is already named {} (host {}): waiting up to {} ms for it to leave \
                         (a replica killed moments ago leaves after the session timeout)",
                        group,
                        id,
                        hosts.join(", "),
                        wait.as_millis()
                    );
                    said = true;
                } else {
                    tracing::info!("[GATEWAY] still waiting for the other member named {} to leave ({} ms so far)", id, first_seen.elapsed().as_millis());
                }
                std::thread::sleep(Duration::from_secs(1));
            }
            Verdict::Refuse => {
                return Err(format!(
                    "another live gateway replica is named GATEWAY_ID={id} in group {group} (host {}): give each replica its own GATEWAY_ID, or leave it unset for a unique default",
                    hosts.join(", ")
                ))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdict_table() {
        let wait = wait_for(Duration::from_secs(6));
        assert_eq!(wait, Duration::from_secs(13));
        let cases = [
            (0, Duration::ZERO, Verdict::Start),
            (0, Duration::from_secs(60), Verdict::Start),
            (1, Duration::ZERO, Verdict::Wait),
            (1, Duration::from_millis(12_999), Verdict::Wait),
            (1, Duration::from_secs(13), Verdict::Refuse),
            (2, Duration::from_secs(20), Verdict::Refuse),
        ];
        for (named, seen_for, want) in cases {
            assert_eq!(verdict(named, seen_for, wait), want, "{named} named, seen for {seen_for:?}");
        }
    }
}
