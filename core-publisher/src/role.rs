//! Whether this publisher writes or stands by: a pure state machine ([`on_promote`]).
//!
//! A publisher started with `--standby` follows the log without transactional producers
//! ([`crate::follow`]), answers 503 `standby` to writes and to `/ready`, and becomes the active
//! one only when the gateway leader promotes it (`POST /admin/promote`, under the leader's
//! fencing token). A promotion then initialises the producers, which fences the publisher that
//! was active (Kafka fences by transactional id), reads the log to its end and accepts writes.
//! A publisher started without `--standby` is active from its start and refuses a promotion.

/// This publisher's part.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Started with `--standby`: following the log, writing nothing.
    Standby,
    /// Promoted: fencing the publisher that was active, then reading the log to its end.
    Promoting,
    /// Writing (`promoted`: it was a standby before).
    Active { promoted: bool },
}

impl Role {
    /// Its name in `/health` and the metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Standby => "standby",
            Role::Promoting => "promoting",
            Role::Active { .. } => "active",
        }
    }
}

/// What a promotion request gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PromoteAnswer {
    /// The promotion starts now.
    Started,
    /// It started before and is still running.
    Running,
    /// It is over: this publisher writes.
    Done,
    /// This publisher was started active: there is nothing to promote (409 `not_standby`).
    NotStandby,
}

/// The role after a promotion request in `role`, and the answer. Pure.
pub fn on_promote(role: Role) -> (Role, PromoteAnswer) {
    match role {
        Role::Standby => (Role::Promoting, PromoteAnswer::Started),
        Role::Promoting => (Role::Promoting, PromoteAnswer::Running),
        Role::Active { promoted: true } => (role, PromoteAnswer::Done),
        Role::Active { promoted: false } => (role, PromoteAnswer::NotStandby),
    }
}

/// The role once the heads are read and the committers run (after a start or a promotion). Pure.
pub fn on_ready(role: Role) -> Role {
    match role {
        Role::Standby | Role::Promoting => Role::Active { promoted: true },
        active => active,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn promotion_table() {
        let cases = [
            (Role::Standby, Role::Promoting, PromoteAnswer::Started),
            (Role::Promoting, Role::Promoting, PromoteAnswer::Running),
            (Role::Active { promoted: true }, Role::Active { promoted: true }, PromoteAnswer::Done),
            (Role::Active { promoted: false }, Role::Active { promoted: false }, PromoteAnswer::NotStandby),
        ];
        for (from, to, answer) in cases {
            assert_eq!(on_promote(from), (to, answer), "{from:?}");
        }
        let ready = [
            (Role::Promoting, Role::Active { promoted: true }),
            (Role::Active { promoted: false }, Role::Active { promoted: false }),
            (Role::Active { promoted: true }, Role::Active { promoted: true }),
        ];
        for (from, to) in ready {
            assert_eq!(on_ready(from), to, "{from:?}");
        }
        assert_eq!(Role::Active { promoted: true }.as_str(), "active");
    }
}
