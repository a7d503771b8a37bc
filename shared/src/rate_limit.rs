//! The publish rate limit per client address (`PUBLISH_RATE_PER_SEC`, `PUBLISH_BURST`; off by
//! default), on the publisher's publish routes and the gateway's forwarded ones.
//!
//! Each client address ([`crate::client_addr`], so behind a trusted proxy the forwarded client)
//! has a GCRA bucket (crate `governor`, keyed): `PUBLISH_BURST` requests at once, refilled at
//! `PUBLISH_RATE_PER_SEC`. A request over it is answered 429 `rate_limited` with `Retry-After`
//! (seconds until one more is allowed, at least 1) and changes nothing. One request is one cell,
//! a batch (`POST /pixels`) included. IPv6 clients are keyed by their /64 (one host usually holds
//! a whole /64). The keyed store forgets idle clients every [`CLEANUP_EVERY`] (governor's
//! `retain_recent`), and at once when it holds over [`MAX_TRACKED`] clients, so its memory is
//! bounded by the clients of the last minute.

use crate::client_addr::{client_addr, TrustedProxies};
use crate::http::ApiError;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use governor::clock::Clock;
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use std::net::{IpAddr, SocketAddr};
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// How often clients idle long enough to have a full bucket again are forgotten.
pub const CLEANUP_EVERY: Duration = Duration::from_secs(60);
/// Clients tracked before a cleanup runs at once.
pub const MAX_TRACKED: usize = 100_000;

/// The rate-limit settings of a service that takes publishes (clap flags with environment
/// fallbacks, flattened into its `Config`).
#[derive(Debug, Clone, clap::Args)]
pub struct RateArgs {
    /// Publish requests per second allowed to one client address (the publisher's
    /// `/canvases/{id}/pixels` and `/pixels`, the gateway's `/api/...` forwards of them); 0: no
    /// limit.
    #[arg(long, env = "PUBLISH_RATE_PER_SEC", default_value_t = 0, value_parser = clap::value_parser!(u32).range(0..=1_000_000))]
    pub publish_rate_per_sec: u32,
    /// Publish requests one client address may send at once before the rate applies (0: the
    /// rate, i.e. one second's worth).
    #[arg(long, env = "PUBLISH_BURST", default_value_t = 0, value_parser = clap::value_parser!(u32).range(0..=1_000_000))]
    pub publish_burst: u32,
    /// Addresses or CIDR blocks of the proxies in front of this service whose `X-Forwarded-For`
    /// is believed (comma-separated): the client is the rightmost forwarded address not among
    /// them. Empty: the peer's address is the client.
    #[arg(long, env = "TRUSTED_PROXIES", default_value = "", value_parser = crate::client_addr::parse_trusted_proxies)]
    pub trusted_proxies: TrustedProxies,
}

impl RateArgs {
    /// `VARIABLE=value` pairs for a `describe`.
    pub fn env_pairs(&self) -> [(&'static str, String); 3] {
        [
            ("PUBLISH_RATE_PER_SEC", self.publish_rate_per_sec.to_string()),
            ("PUBLISH_BURST", self.publish_burst.to_string()),
            ("TRUSTED_PROXIES", self.trusted_proxies.to_string()),
        ]
    }

    /// The limiter these settings describe.
    pub fn limiter(&self) -> PublishLimiter {
        PublishLimiter::new(self.publish_rate_per_sec, self.publish_burst, self.trusted_proxies.clone())
    }
}

/// The publish rate limit of one service (off when built with rate 0).
pub struct PublishLimiter {
    limiter: Option<DefaultKeyedRateLimiter<IpAddr>>,
    trusted: TrustedProxies,
}

impl PublishLimiter {
    /// `rate` requests per second per client, `burst` at once (0: `rate`); `rate` 0 is no limit.
    pub fn new(rate: u32, burst: u32, trusted: TrustedProxies) -> Self {
        let limiter = NonZeroU32::new(rate).map(|r| {
            let burst = NonZeroU32::new(burst).unwrap_or(r);
            RateLimiter::keyed(Quota::per_second(r).allow_burst(burst))
        });
        Self { limiter, trusted }
    }

    /// Whether a limit is set.
    pub fn is_on(&self) -> bool {
        self.limiter.is_some()
    }

    /// The proxies whose `X-Forwarded-For` is believed.
    pub fn trusted(&self) -> &TrustedProxies {
        &self.trusted
    }

    /// Counts one request from `client`.
    ///
    /// # Errors
    /// 429 `rate_limited` with `Retry-After` when `client` is over its rate.
    pub fn check(&self, client: IpAddr) -> Result<(), ApiError> {
        let Some(l) = &self.limiter else { return Ok(()) };
        if l.len() > MAX_TRACKED {
            l.retain_recent();
        }
        l.check_key(&key(client)).map_err(|not_until| {
            let wait = not_until.wait_time_from(l.clock().now());
            let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
            let mut e = ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                "rate_limited",
                format!("too many publishes from {client}; try again in {} ms", wait.as_millis().max(1)),
            );
            e.retry_after_secs = Some(secs.max(1));
            e
        })
    }

    /// Forgets idle clients every [`CLEANUP_EVERY`] until `shutdown` (nothing to do when off).
    pub async fn run_cleanup(self: Arc<Self>, shutdown: CancellationToken) {
        let Some(l) = &self.limiter else { return };
        let mut every = tokio::time::interval(CLEANUP_EVERY);
        loop {
            tokio::select! {
                _ = every.tick() => {
                    l.retain_recent();
                    l.shrink_to_fit();
                }
                _ = shutdown.cancelled() => return,
            }
        }
    }
}

/// The bucket of a client address: IPv6 by its /64.
fn key(ip: IpAddr) -> IpAddr {
    match ip.to_canonical() {
        IpAddr::V6(v6) => IpAddr::V6(std::net::Ipv6Addr::from(u128::from(v6) & !((1u128 << 64) - 1))),
        v4 => v4,
    }
}

/// The client of `req` as [`client_addr`] sees it (the peer from `ConnectInfo`; unspecified
/// when the router runs without one, as in router tests).
pub fn client_of(req: &Request, trusted: &TrustedProxies) -> IpAddr {
    let peer = req.extensions().get::<ConnectInfo<SocketAddr>>().map_or(IpAddr::from([0, 0, 0, 0]), |c| c.0.ip());
    let xff = req.headers().get_all("x-forwarded-for").into_iter().filter_map(|v| v.to_str().ok());
    client_addr(peer, xff, trusted)
}

/// Middleware for the publish routes (`axum::middleware::from_fn_with_state(limiter, enforce)`):
/// 429 for a client over its rate, the route otherwise.
pub async fn enforce(State(limiter): State<Arc<PublishLimiter>>, req: Request, next: Next) -> Response {
    if limiter.is_on() {
        let client = client_of(&req, &limiter.trusted);
        if let Err(e) = limiter.check(client) {
            tracing::debug!(%client, "publish refused: over the rate limit");
            return e.into_response();
        }
    }
    next.run(req).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_over_its_burst_gets_429_and_others_are_served() {
        let l = PublishLimiter::new(1, 3, TrustedProxies::default());
        let a: IpAddr = "198.51.100.1".parse().unwrap();
        let b: IpAddr = "198.51.100.2".parse().unwrap();
        for _ in 0..3 {
            l.check(a).unwrap();
        }
        let e = l.check(a).unwrap_err();
        assert_eq!((e.status, e.body.error.as_str(), e.retry_after_secs), (StatusCode::TOO_MANY_REQUESTS, "rate_limited", Some(1)));
        l.check(b).unwrap();
        // One /64 is one client.
        let v6 = |s: &str| s.parse::<IpAddr>().unwrap();
        let l = PublishLimiter::new(1, 1, TrustedProxies::default());
        l.check(v6("2001:db8::1")).unwrap();
        assert!(l.check(v6("2001:db8::ffff:2")).is_err());
        l.check(v6("2001:db8:0:1::1")).unwrap();
    }

    #[test]
    fn off_by_default() {
        let l = PublishLimiter::new(0, 5, TrustedProxies::default());
        assert!(!l.is_on());
        let a: IpAddr = "198.51.100.1".parse().unwrap();
        assert!((0..10_000).all(|_| l.check(a).is_ok()));
    }
}
