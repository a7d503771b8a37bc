//! What `GET /api/fleet` leaves out for a caller without the admin token: addresses and error
//! texts (they name hosts, ports and internals). States, UP streaks, partitions, sessions,
//! catch-up progress and the decisions' actions stay, so the `/fleet` page works for everyone.
//!
//! - `nodes[].url`, `nodes[].last_error`, `nodes[].catchup.error`: removed;
//! - `publishers[].url`: replaced by `publisher-<n>` (1-based, configured order: rows keep their
//!   identity), `publishers[].last_error`: removed;
//! - `decisions[]`: `reason` of a `*_failed` action replaced by [`HIDDEN`]; every `error`,
//!   `message`, `url` and `last_error` inside `detail` removed;
//! - every other text (a transition's reason quotes the poll's error, e.g. "no answer: error
//!   sending request for url (http://10.0.0.5:8081/health)"; a node's `degraded` reason; the
//!   leadership's `not_acting_because`; free text in `detail`) has its addresses replaced
//!   ([`scrub`]): a node's URL or `host:port` by the node's id, a publisher's by `publisher-<n>`,
//!   any other URL, `host:port` or IPv4 address by [`ADDRESS`].

use serde_json::Value;

/// The reason shown instead of a failure's text.
pub const HIDDEN: &str = "(hidden: needs the admin token)";

/// Keys whose values are addresses or error texts.
const SECRET_KEYS: &[&str] = &["url", "last_error", "error", "message"];

/// Removes addresses and error texts from an `/api/fleet` snapshot, in place.
pub fn redact(snapshot: &mut Value) {
    // Read before the URLs go: what an address in a text is shown as.
    let names = names_in(snapshot);
    for n in snapshot["nodes"].as_array_mut().into_iter().flatten() {
        if let Some(o) = n.as_object_mut() {
            o.remove("url");
            o.remove("last_error");
        }
        if let Some(c) = n.get_mut("catchup").and_then(Value::as_object_mut) {
            c.remove("error");
        }
    }
    for (i, p) in snapshot["publishers"].as_array_mut().into_iter().flatten().enumerate() {
        if let Some(o) = p.as_object_mut() {
            o.insert("url".into(), Value::String(format!("publisher-{}", i + 1)));
            o.remove("last_error");
        }
    }
    for d in snapshot["decisions"].as_array_mut().into_iter().flatten() {
        if d["action"].as_str().is_some_and(|a| a.ends_with("_failed")) {
            d["reason"] = Value::String(HIDDEN.into());
        }
        if let Some(detail) = d.get_mut("detail") {
            strip(detail);
        }
    }
    scrub_texts(snapshot, &names);
}

/// The names of the snapshot's addresses: each node's URL as its id, each publisher's as
/// `publisher-<n>` (as [`redact`] shows it).
fn names_in(snapshot: &Value) -> Names {
    let mut names = Names::default();
    for n in snapshot["nodes"].as_array().into_iter().flatten() {
        if let (Some(url), Some(id)) = (n["url"].as_str(), n["id"].as_str()) {
            names.add(url, id);
        }
    }
    for (i, p) in snapshot["publishers"].as_array().into_iter().flatten().enumerate() {
        if let Some(url) = p["url"].as_str() {
            names.add(url, &format!("publisher-{}", i + 1));
        }
    }
    names
}

/// [`scrub`]s every string value of `v` (keys are node ids, states and field names: left as
/// they are).
fn scrub_texts(v: &mut Value, names: &Names) {
    match v {
        Value::String(text) => {
            let clean = scrub(text, names);
            if clean != *text {
                *text = clean;
            }
        }
        Value::Array(a) => a.iter_mut().for_each(|x| scrub_texts(x, names)),
        Value::Object(o) => o.values_mut().for_each(|x| scrub_texts(x, names)),
        _ => {}
    }
}

fn strip(v: &mut Value) {
    match v {
        Value::Object(o) => {
            o.retain(|k, _| !SECRET_KEYS.contains(&k.as_str()));
            o.values_mut().for_each(strip);
        }
        Value::Array(a) => a.iter_mut().for_each(strip),
        _ => {}
    }
}

/// The text shown instead of an address no node or publisher is known by.
pub const ADDRESS: &str = "<address>";

/// The names addresses are shown as: each node's URL and `host:port` (its id), each publisher's
/// (`publisher-<n>`).
#[derive(Debug, Default)]
pub struct Names {
    /// (URL without a trailing `/`, lowercase; name).
    urls: Vec<(String, String)>,
    /// (`host:port`, lowercase; name).
    authorities: Vec<(String, String)>,
    /// The hosts of those URLs, lowercase: with another port (an admin listener) still an
    /// address, shown as [`ADDRESS`].
    hosts: Vec<String>,
}

impl Names {
    /// Knows `url` (`scheme://host:port[/...]`) as `name`.
    pub fn add(&mut self, url: &str, name: &str) {
        let url = url.trim().trim_end_matches('/').to_ascii_lowercase();
        if let Some((_, rest)) = url.split_once("://") {
            let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
            if !authority.is_empty() {
                self.authorities.push((authority.to_owned(), name.to_owned()));
                let host = authority.rsplit_once(':').filter(|(_, port)| port.parse::<u16>().is_ok()).map_or(authority, |(h, _)| h);
                self.hosts.push(host.to_owned());
            }
        }
        self.urls.push((url, name.to_owned()));
    }

    /// The name of a URL found in text: a known URL, or one under it (`<url>/health`).
    fn of_url(&self, url: &str) -> Option<&str> {
        let url = url.to_ascii_lowercase();
        self.urls
            .iter()
            .find(|(known, _)| url.strip_prefix(known.as_str()).is_some_and(|rest| rest.is_empty() || rest.starts_with(['/', '?', '#'])))
            .map(|(_, name)| name.as_str())
    }

    /// The name of a `host:port` found in text.
    fn of_authority(&self, authority: &str) -> Option<&str> {
        let authority = authority.to_ascii_lowercase();
        self.authorities.iter().find(|(known, _)| *known == authority).map(|(_, name)| name.as_str())
    }

    /// Whether `host` is the host of a known URL.
    fn knows_host(&self, host: &str) -> bool {
        self.hosts.iter().any(|h| h.eq_ignore_ascii_case(host))
    }
}

/// `text` with every address in it replaced: a URL (`scheme://...`, up to a space, a quote, a
/// closing bracket, a comma or a semicolon), a `host:port` whose host is an IPv4 address,
/// `[IPv6]`, `localhost`, a dotted name or a known URL's host, and a bare IPv4 address or
/// `[IPv6]`. Known ones read as their name, the others as [`ADDRESS`]. Other words with a colon
/// (`12:30`, `attempt:3`) stay. Pure.
pub fn scrub(text: &str, names: &Names) -> String {
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < text.len() {
        let rest = &text[i..];
        // A token starts where the previous character cannot be part of a name.
        let at_start = text[..i].chars().next_back().is_none_or(|c| !is_host_char(c));
        if at_start {
            if let Some(len) = url_len(rest) {
                out.push_str(names.of_url(&rest[..len]).unwrap_or(ADDRESS));
                i += len;
                continue;
            }
            if let Some((len, name)) = host_len(rest, names) {
                out.push_str(name.unwrap_or(ADDRESS));
                i += len;
                continue;
            }
        }
        let c = rest.chars().next().expect("i is inside text");
        out.push(c);
        i += c.len_utf8();
    }
    out
}

fn is_host_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_')
}

/// The length of the URL `s` starts with: `scheme://` and what follows up to a space, a quote, a
/// closing bracket, a comma or a semicolon, a trailing `.` or `:` left out (the sentence's).
fn url_len(s: &str) -> Option<usize> {
    // The scheme: a letter, then letters, digits, `+`, `-`, `.` (RFC 3986 §3.1), then `://`.
    let scheme = s.find(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))).unwrap_or(s.len());
    if scheme == 0 || !s.starts_with(|c: char| c.is_ascii_alphabetic()) || !s[scheme..].starts_with("://") {
        return None;
    }
    let body = &s[scheme + 3..];
    let end = body.find(|c: char| c.is_whitespace() || matches!(c, '"' | '\'' | '<' | '>' | ')' | ',' | ';' | '`')).unwrap_or(body.len());
    let url = body[..end].trim_end_matches(['.', ':']);
    (!url.is_empty()).then_some(scheme + 3 + url.len())
}

/// The length of the address `s` starts with and its known name: `[IPv6]` or a name, with or
/// without `:port`, when it is an address (see [`scrub`]).
fn host_len<'a>(s: &str, names: &'a Names) -> Option<(usize, Option<&'a str>)> {
    let (host, bracketed) = if s.starts_with('[') {
        let end = s.find(']')?;
        s[1..end].parse::<std::net::Ipv6Addr>().ok()?;
        (&s[..=end], true)
    } else {
        let end = s.find(|c: char| !is_host_char(c)).unwrap_or(s.len());
        (&s[..end], false)
    };
    if host.is_empty() {
        return None;
    }
    let after = &s[host.len()..];
    let port = after.strip_prefix(':').map(|p| p.find(|c: char| !c.is_ascii_digit()).unwrap_or(p.len())).filter(|n| (1..=5).contains(n));
    let ipv4 = host.parse::<std::net::Ipv4Addr>().is_ok();
    match port {
        Some(digits) => {
            let len = host.len() + 1 + digits;
            let known = names.of_authority(&s[..len]);
            let bare = host.trim_end_matches('.');
            let address = known.is_some()
                || bracketed
                || ipv4
                || bare.eq_ignore_ascii_case("localhost")
                || bare.contains('.')
                || names.knows_host(bare);
            address.then_some((len, known))
        }
        None => (bracketed || ipv4).then_some((host.len(), None)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn addresses_and_error_texts_are_left_out_the_rest_stays() {
        let mut s = json!({
            "partition_count": 6,
            "nodes": [
                {"id": "ws-1", "url": "http://10.0.0.5:8081", "state": "DOWN", "up_streak": 0, "assigned_partitions": [],
                 "sessions": 0, "last_error": "connect 10.0.0.5:8081: refused", "catchup": null},
                {"id": "ws-2", "url": "http://10.0.0.6:8081", "state": "HEALTHY", "assigned_partitions": [0, 1], "sessions": 3,
                 "last_error": null, "catchup": {"status": "failed", "error": "broker 10.0.0.9 down", "replay_count": 4}}
            ],
            "publishers": [{"url": "http://10.0.0.7:8080", "ready": true, "preferred": true, "last_error": "x"},
                           {"url": "http://10.0.0.8:8080", "ready": false, "preferred": false, "last_error": null}],
            "decisions": [
                {"node": "ws-1", "action": "start_recovery_failed", "reason": "error sending request for url (http://10.0.0.5:8081/...)", "detail": null},
                {"node": "ws-1", "action": "failback_failed", "reason": "ws-1 owns partitions again",
                 "detail": {"ws-2": {"error": {"error": "node_unreachable", "message": "node ws-2: 10.0.0.6"}}}},
                {"node": "ws-1", "action": "transition", "reason": "UP x5", "detail": {"from": "UP", "to": "RECOVERING"}}
            ]
        });
        redact(&mut s);
        let text = s.to_string();
        assert!(!text.contains("10.0.0."), "{text}");
        assert_eq!(s["partition_count"], 6);
        assert_eq!(s["nodes"][0], json!({"id": "ws-1", "state": "DOWN", "up_streak": 0, "assigned_partitions": [], "sessions": 0, "catchup": null}));
        assert_eq!(s["nodes"][1]["catchup"], json!({"status": "failed", "replay_count": 4}));
        assert_eq!(s["nodes"][1]["sessions"], 3);
        assert_eq!(s["publishers"][0], json!({"url": "publisher-1", "ready": true, "preferred": true}));
        assert_eq!(s["publishers"][1]["url"], "publisher-2");
        assert_eq!(s["decisions"][0]["reason"], HIDDEN);
        assert_eq!(s["decisions"][1]["reason"], HIDDEN);
        assert_eq!(s["decisions"][1]["detail"], json!({"ws-2": {}}));
        assert_eq!(s["decisions"][2]["reason"], "UP x5");
        assert_eq!(s["decisions"][2]["detail"], json!({"from": "UP", "to": "RECOVERING"}));
    }

    /// Free text (a transition's reason quotes the poll's error, a node's `degraded` reason, ...)
    /// names no address either: a node's URL or `host:port` reads as its id, a publisher's as
    /// `publisher-<n>`, any other URL, `host:port` or IPv4 address as `<address>`.
    #[test]
    fn addresses_in_free_text_are_replaced_by_names() {
        let mut s = json!({
            "nodes": [
                {"id": "ws-1", "url": "http://127.0.0.1:1234", "state": "DOWN",
                 "degraded": "broker 10.0.0.9:9092 (kafka-1.internal:9092) did not answer"},
                {"id": "ws-2", "url": "http://ws-2.svc.cluster.local:8081", "state": "HEALTHY", "degraded": null},
                {"id": "ws-3", "url": "http://node-a:8081/", "state": "UP", "degraded": "node-a:9081 and node-a:8081 and NODE-A:8081"}
            ],
            "publishers": [{"url": "http://10.0.0.7:8080", "ready": true}],
            "leadership": {"gateway": "gw-a", "not_acting_because": "the control topic at 10.1.2.3 is unreachable"},
            "decisions": [
                {"node": "ws-1", "action": "transition",
                 "reason": "no answer: error sending request for url (http://127.0.0.1:1234/health)", "detail": {"from": "HEALTHY", "to": "DOWN"}},
                {"node": "ws-2", "action": "transition", "reason": "no answer: ws-2.svc.cluster.local:8081 refused; admin at http://[::1]:9081/admin/drain",
                 "detail": null},
                {"node": "ws-1", "action": "failback_started", "reason": "publisher http://10.0.0.7:8080/ready said 127.0.0.1:1234 is back",
                 "detail": {"note": "see https://ops.example/runbook?x=1."}},
                {"node": "ws-1", "action": "transition", "reason": "/health says HEALTHY (UP x5 at 12:30, v1.2.3)", "detail": null}
            ]
        });
        redact(&mut s);
        let text = s.to_string();
        for leak in ["127.0.0.1", "1234", "10.0.0", "10.1.2.3", "kafka-1.internal", "svc.cluster", "::1", "ops.example"] {
            assert!(!text.contains(leak), "{leak} in {text}");
        }
        assert_eq!(s["decisions"][0]["reason"], "no answer: error sending request for url (ws-1)");
        assert_eq!(s["decisions"][1]["reason"], "no answer: ws-2 refused; admin at <address>");
        assert_eq!(s["decisions"][2]["reason"], "publisher publisher-1 said ws-1 is back");
        assert_eq!(s["decisions"][2]["detail"]["note"], "see <address>.");
        assert_eq!(s["decisions"][3]["reason"], "/health says HEALTHY (UP x5 at 12:30, v1.2.3)", "no address in it");
        assert_eq!(s["nodes"][0]["degraded"], "broker <address> (<address>) did not answer");
        assert_eq!(s["leadership"]["not_acting_because"], "the control topic at <address> is unreachable");
        assert_eq!(s["leadership"]["gateway"], "gw-a");
        assert_eq!(s["nodes"][1]["id"], "ws-2");
        // A known single-label host: its URL's port is the node, another port an address.
        assert_eq!(s["nodes"][2]["degraded"], "<address> and ws-3 and ws-3");
    }

    proptest::proptest! {
        /// Any text: no panic (slicing stays on character boundaries), and a scrubbed text has
        /// nothing left to scrub.
        #[test]
        fn scrubbing_any_text_is_safe_and_settled(text in "\\PC{0,80}|[a-z0-9.:/\\[\\] ()-]{0,60}") {
            let mut names = Names::default();
            names.add("http://10.0.0.5:8081", "ws-1");
            let once = scrub(&text, &names);
            proptest::prop_assert_eq!(scrub(&once, &names), once.clone());
            proptest::prop_assert!(!once.contains("10.0.0.5:8081"));
        }
    }
}
