//! The broker setting the publisher's transactions rest on: `transaction.partition.verification.enable`
//! (KIP-890 part 1, a broker config, `true` by default since Kafka 3.6).
//!
//! librdkafka 2.12 implements none of KIP-890's client side: a produce request of a transaction
//! that was aborted can still reach the broker after the abort (a slow or retried request), and
//! without the broker verifying that the partition belongs to an ongoing transaction before it
//! appends, such a record can start a transaction that never ends (holding every reader's last
//! stable offset) or land in the producer's next transaction and commit with it. The broker's
//! verification is the only guard, so the publisher refuses to start where a broker reports it
//! off. The refusal ends the process (a non-zero exit) instead of retrying: a setting does not
//! change by itself, and a restart loop shows an operator the reason as well as a retry loop would.
//!
//! A broker that does not answer DescribeConfigs (librdkafka's mock cluster, or no permission to
//! describe the cluster) is warned about once, and the start goes on.

use shared::kafka::KafkaSettings;

/// The broker setting checked.
pub const SETTING: &str = "transaction.partition.verification.enable";

/// What a broker reported of [`SETTING`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verification {
    /// `true`: the broker verifies a transaction's partitions before it appends.
    On,
    /// `false`: it does not; the publisher refuses to start.
    Off,
    /// Not reported (no such entry, an unreadable value, or no answer): not checked.
    Unknown,
}

/// The verification a broker's reported value of [`SETTING`] says (`None`: not reported, or the
/// broker did not answer). Kafka parses booleans case-insensitively, spaces trimmed. Pure.
pub fn verification(reported: Option<&str>) -> Verification {
    match reported.map(str::trim) {
        Some(v) if v.eq_ignore_ascii_case("true") => Verification::On,
        Some(v) if v.eq_ignore_ascii_case("false") => Verification::Off,
        _ => Verification::Unknown,
    }
}

/// A broker reports [`SETTING`] off: the publisher must not start.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "broker(s) {brokers:?} report {SETTING}=false: without it a late produce of an aborted transaction can land in a later \
     transaction or leave one open for good (librdkafka has no KIP-890 client side), so the channels' versions cannot be trusted; \
     refusing to start. Turn it on, dynamically and for every broker: kafka-configs.sh --bootstrap-server <broker> --alter \
     --entity-type brokers --entity-default --add-config {SETTING}=true (and remove any per-broker override, or a \
     {SETTING}=false line in server.properties)"
)]
pub struct VerificationOff {
    /// The brokers reporting it off.
    pub brokers: Vec<i32>,
}

/// Whether the brokers' reports (broker id, value; `None`: not reported or no answer) let the
/// publisher start: `Err` naming the brokers that report it off, else the brokers that reported
/// nothing usable (to warn about). Pure.
///
/// # Errors
/// [`VerificationOff`] when any broker reports `false`.
pub fn decide(reports: &[(i32, Option<&str>)]) -> Result<Vec<i32>, VerificationOff> {
    let with = |want: Verification| reports.iter().filter(|(_, v)| verification(*v) == want).map(|(b, _)| *b).collect::<Vec<i32>>();
    let off = with(Verification::Off);
    if off.is_empty() {
        Ok(with(Verification::Unknown))
    } else {
        Err(VerificationOff { brokers: off })
    }
}

/// Reads [`SETTING`] from every broker ([`shared::kafka::broker_config`]) and [`decide`]s; warns
/// (once per call) when it cannot be read. Call it once per process start, once the broker
/// answers.
///
/// # Errors
/// [`VerificationOff`] when any broker reports it off.
pub async fn check(settings: &KafkaSettings) -> Result<(), VerificationOff> {
    let reports = match shared::kafka::broker_config(settings, "core-publisher", SETTING).await {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!(setting = SETTING, error = %e, "cannot list the brokers to read their partition verification setting; not checked");
            return Ok(());
        }
    };
    let values: Vec<(i32, Option<&str>)> = reports.iter().map(|(b, r)| (*b, r.as_ref().ok().and_then(|v| v.as_deref()))).collect();
    let unknown = decide(&values)?;
    if unknown.is_empty() {
        tracing::info!(setting = SETTING, brokers = reports.len(), "every broker verifies transaction partitions");
    } else {
        let errors: Vec<String> =
            reports.iter().filter(|(b, _)| unknown.contains(b)).map(|(b, r)| format!("broker {b}: {}", r.as_ref().err().map_or("not reported", |e| e.as_str()))).collect();
        tracing::warn!(setting = SETTING, brokers = ?unknown, answers = %errors.join("; "),
            "cannot read the brokers' partition verification setting (the broker answers no DescribeConfigs?); not checked");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reported_values_map_to_verification() {
        for (reported, want) in [
            (Some("true"), Verification::On),
            (Some("TRUE"), Verification::On),
            (Some(" true "), Verification::On),
            (Some("false"), Verification::Off),
            (Some("False"), Verification::Off),
            (None, Verification::Unknown),
            (Some(""), Verification::Unknown),
            (Some("yes"), Verification::Unknown),
        ] {
            assert_eq!(verification(reported), want, "{reported:?}");
        }
    }

    #[test]
    fn a_broker_reporting_verification_off_refuses_the_start_and_unknown_ones_are_named() {
        assert_eq!(decide(&[(1, Some("true")), (2, Some("true"))]), Ok(vec![]));
        assert_eq!(decide(&[(1, Some("true")), (2, None)]), Ok(vec![2]), "not reported: warned about, the start goes on");
        assert_eq!(decide(&[]), Ok(vec![]));
        let off = decide(&[(1, Some("true")), (2, Some("false")), (3, None), (4, Some("false"))]).unwrap_err();
        assert_eq!(off.brokers, vec![2, 4]);
        let text = off.to_string();
        assert!(text.contains("transaction.partition.verification.enable=false") && text.contains("--add-config transaction.partition.verification.enable=true"), "{text}");
    }
}
