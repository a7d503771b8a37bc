//! Who the client of a request is, behind proxies: the peer's address, or — when the peer is a
//! trusted proxy (`TRUSTED_PROXIES`) — the rightmost address of `X-Forwarded-For` that is not a
//! trusted proxy. Each proxy appends the address it received the request from, so the entries
//! right of the first untrusted one were written by proxies we trust, and everything left of it
//! may be forged by the client.
//!
//! [`client_addr`] is a pure function; the gateway appends the address it saw when it forwards a
//! request ([`forwarded_for`]).

use std::net::IpAddr;

/// The addresses whose `X-Forwarded-For` is believed: single addresses or CIDR blocks.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TrustedProxies(Vec<ipnet::IpNet>);

impl TrustedProxies {
    /// Whether `ip` is one of them.
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = ip.to_canonical();
        self.0.iter().any(|n| n.contains(&ip))
    }
}

impl std::fmt::Display for TrustedProxies {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let v: Vec<String> = self.0.iter().map(ToString::to_string).collect();
        f.write_str(&v.join(","))
    }
}

/// Parses `127.0.0.1,10.0.0.0/8,::1` (blank entries skipped; an address alone is a /32 or /128).
///
/// # Errors
/// A message naming the entry that is neither an address nor a CIDR block.
pub fn parse_trusted_proxies(raw: &str) -> Result<TrustedProxies, String> {
    let mut nets = Vec::new();
    for entry in raw.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let net = match entry.parse::<ipnet::IpNet>() {
            Ok(n) => n.trunc(),
            Err(_) => entry.parse::<IpAddr>().map(ipnet::IpNet::from).map_err(|_| format!("{entry:?} is not an address or a CIDR block"))?,
        };
        nets.push(net);
    }
    Ok(TrustedProxies(nets))
}

/// The client's address: `peer` when it is not a trusted proxy; otherwise the rightmost address
/// of `forwarded_for` (every `X-Forwarded-For` value, in order) that is not trusted — or, when
/// every one is, the leftmost. An entry that is not an address ends the walk: the hop right of
/// it (trusted) is the client as far as we know.
pub fn client_addr<'a>(peer: IpAddr, forwarded_for: impl IntoIterator<Item = &'a str>, trusted: &TrustedProxies) -> IpAddr {
    let mut client = peer.to_canonical();
    if !trusted.contains(client) {
        return client;
    }
    let entries: Vec<&str> = forwarded_for.into_iter().flat_map(|v| v.split(',')).map(str::trim).collect();
    for entry in entries.iter().rev() {
        let Some(ip) = parse_entry(entry) else { return client };
        client = ip;
        if !trusted.contains(ip) {
            return ip;
        }
    }
    client
}

/// An `X-Forwarded-For` entry: an address, possibly with a port (`1.2.3.4:5`, `[::1]:5`).
fn parse_entry(entry: &str) -> Option<IpAddr> {
    if let Ok(ip) = entry.parse::<IpAddr>() {
        return Some(ip.to_canonical());
    }
    entry.parse::<std::net::SocketAddr>().ok().map(|s| s.ip().to_canonical())
}

/// The `X-Forwarded-For` to send on when forwarding a request received from `peer` with
/// `incoming` (every value, in order): the incoming entries, then `peer`.
pub fn forwarded_for<'a>(incoming: impl IntoIterator<Item = &'a str>, peer: IpAddr) -> String {
    let mut parts: Vec<String> = incoming.into_iter().map(|v| v.trim().to_owned()).filter(|v| !v.is_empty()).collect();
    parts.push(peer.to_canonical().to_string());
    parts.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn trusted_proxies_parse() {
        let t = parse_trusted_proxies(" 127.0.0.1, 10.1.2.3/8 ,::1,").unwrap();
        assert_eq!(t.to_string(), "127.0.0.1/32,10.0.0.0/8,::1/128");
        assert!(t.contains(ip("10.200.0.1")) && t.contains(ip("::ffff:127.0.0.1")) && !t.contains(ip("11.0.0.1")));
        for bad in ["localhost", "10.0.0.0/33", "1.2.3"] {
            assert!(parse_trusted_proxies(bad).unwrap_err().contains(bad), "{bad}");
        }
        assert_eq!(parse_trusted_proxies("").unwrap(), TrustedProxies::default());
    }

    #[test]
    fn the_client_is_the_rightmost_untrusted_address() {
        let t = parse_trusted_proxies("127.0.0.1,10.0.0.0/8").unwrap();
        #[rustfmt::skip]
        let cases: &[(&str, &[&str], &TrustedProxies, &str)] = &[
            // An untrusted peer: its own address, whatever it claims.
            ("203.0.113.9", &["1.1.1.1"],                     &t, "203.0.113.9"),
            // Nothing trusted: never believed.
            ("127.0.0.1",   &["1.1.1.1"],                     &TrustedProxies::default(), "127.0.0.1"),
            // A trusted peer: the rightmost untrusted entry.
            ("127.0.0.1",   &["198.51.100.7"],                &t, "198.51.100.7"),
            ("127.0.0.1",   &["6.6.6.6, 198.51.100.7"],       &t, "198.51.100.7"),
            ("127.0.0.1",   &["6.6.6.6, 198.51.100.7, 10.0.0.2"], &t, "198.51.100.7"),
            // Several headers are one list, in order.
            ("127.0.0.1",   &["6.6.6.6", "198.51.100.7"],     &t, "198.51.100.7"),
            // Ports and IPv6.
            ("127.0.0.1",   &["198.51.100.7:4242"],           &t, "198.51.100.7"),
            ("127.0.0.1",   &["[2001:db8::1]:80"],            &t, "2001:db8::1"),
            ("::ffff:127.0.0.1", &["2001:db8::2"],            &t, "2001:db8::2"),
            // Every entry trusted: the leftmost.
            ("127.0.0.1",   &["10.0.0.3, 10.0.0.2"],          &t, "10.0.0.3"),
            // No header: the proxy itself.
            ("127.0.0.1",   &[],                              &t, "127.0.0.1"),
            // Garbage ends the walk at the trusted hop right of it.
            ("127.0.0.1",   &["198.51.100.7, garbage, 10.0.0.2"], &t, "10.0.0.2"),
            ("127.0.0.1",   &["garbage"],                     &t, "127.0.0.1"),
        ];
        for (peer, xff, trusted, want) in cases {
            assert_eq!(client_addr(ip(peer), xff.iter().copied(), trusted), ip(want), "{peer} {xff:?}");
        }
    }

    #[test]
    fn forwarding_appends_the_peer() {
        assert_eq!(forwarded_for([], ip("127.0.0.1")), "127.0.0.1");
        assert_eq!(forwarded_for(["1.1.1.1, 2.2.2.2", " "], ip("::ffff:10.0.0.1")), "1.1.1.1, 2.2.2.2, 10.0.0.1");
    }
}
