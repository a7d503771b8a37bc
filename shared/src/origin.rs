//! Which `Origin`s may open a WebSocket on `/ws` (RFC 6455 §10.2: a browser sends the page's
//! origin with every handshake; a server that accepts any lets every web page open sessions with
//! its visitors' browsers — cross-site WebSocket hijacking).
//!
//! The decision is [`check`], a pure function: a handshake without `Origin` is not from a browser
//! page (tools, the gateway's own upstream handshake) and is allowed; one with an `Origin` is
//! allowed when the origin is in the configured list (`ALLOWED_ORIGINS`, `*` allows any) or,
//! where the service serves the pages itself (the gateway), when it is the request's own origin
//! (its host and port are the request's `Host`).

use std::fmt;

/// The header in which the gateway passes a client's `Origin` (already checked) on to the node,
/// for its logs: the upstream handshake itself carries no `Origin`.
pub const FORWARDED_ORIGIN: &str = "x-forwarded-origin";

/// The configured origins (`ALLOWED_ORIGINS`): `scheme://host[:port]`, compared without case.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AllowedOrigins {
    origins: Vec<String>,
    any: bool,
}

impl AllowedOrigins {
    /// The list as configured (normalised), `*` included.
    pub fn entries(&self) -> Vec<String> {
        let mut v = self.origins.clone();
        if self.any {
            v.push("*".into());
        }
        v
    }
}

impl fmt::Display for AllowedOrigins {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.entries().join(","))
    }
}

/// Parses `https://canvas.example,http://localhost:8000` (blank entries skipped, a trailing `/`
/// dropped); `*` allows every origin.
///
/// # Errors
/// A message naming the entry that is not `http(s)://host[:port]` (a path, a query, no host).
pub fn parse_allowed_origins(raw: &str) -> Result<AllowedOrigins, String> {
    let mut out = AllowedOrigins::default();
    for entry in raw.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        if entry == "*" {
            out.any = true;
            continue;
        }
        let e = entry.trim_end_matches('/').to_ascii_lowercase();
        let authority = e.strip_prefix("http://").or_else(|| e.strip_prefix("https://"));
        match authority {
            Some(a) if !a.is_empty() && !a.contains(['/', '?', '#', '@', ' ']) => out.origins.push(normalise(&e)),
            _ => return Err(format!("origin {entry:?} must be http://host[:port] or https://host[:port] (or *)")),
        }
    }
    Ok(out)
}

/// Whether the service also accepts its own origin (the gateway serves the pages).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SameOrigin {
    Allowed,
    NotAllowed,
}

/// Why a handshake's origin was refused (for the 403's message).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused(pub String);

/// Decides on a handshake with `origin` (the `Origin` header, if any) and `host` (the `Host`
/// header, if any).
///
/// # Errors
/// [`Refused`] naming the origin when it is neither listed nor (with [`SameOrigin::Allowed`]) the
/// request's own.
pub fn check(origin: Option<&str>, host: Option<&str>, allowed: &AllowedOrigins, same: SameOrigin) -> Result<(), Refused> {
    let Some(origin) = origin else { return Ok(()) };
    if allowed.any {
        return Ok(());
    }
    let o = normalise(&origin.trim().to_ascii_lowercase());
    if allowed.origins.iter().any(|a| *a == o) {
        return Ok(());
    }
    if same == SameOrigin::Allowed {
        if let (Some(authority), Some(host)) = (o.strip_prefix("http://").or_else(|| o.strip_prefix("https://")), host) {
            let h = host.trim().to_ascii_lowercase();
            let h = h.strip_suffix(":80").or_else(|| h.strip_suffix(":443")).unwrap_or(&h);
            if !authority.is_empty() && authority == h {
                return Ok(());
            }
        }
    }
    let shown: String = origin.chars().take(100).collect();
    Err(Refused(format!("origin {shown:?} may not open sessions here (see ALLOWED_ORIGINS)")))
}

/// Drops a default port (`:80` for http, `:443` for https), as browsers do in `Origin`.
fn normalise(origin: &str) -> String {
    for (scheme, port) in [("http://", ":80"), ("https://", ":443")] {
        if origin.starts_with(scheme) {
            if let Some(o) = origin.strip_suffix(port) {
                return o.to_owned();
            }
        }
    }
    origin.to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_parse_and_bad_entries_are_named() {
        let a = parse_allowed_origins(" https://Canvas.example/, http://localhost:8000 ,,").unwrap();
        assert_eq!(a.entries(), ["https://canvas.example", "http://localhost:8000"]);
        assert_eq!(parse_allowed_origins("*").unwrap().to_string(), "*");
        assert_eq!(parse_allowed_origins("").unwrap(), AllowedOrigins::default());
        for bad in ["canvas.example", "ftp://x", "http://", "http://a/path", "http://a?q", "https://u@a"] {
            let e = parse_allowed_origins(bad).unwrap_err();
            assert!(e.contains(bad), "{bad}: {e}");
        }
    }

    #[test]
    fn the_origin_decision() {
        let list = parse_allowed_origins("https://canvas.example,http://localhost:8000").unwrap();
        let none = AllowedOrigins::default();
        let any = parse_allowed_origins("*").unwrap();
        use SameOrigin::*;
        #[rustfmt::skip]
        let cases: &[(Option<&str>, Option<&str>, &AllowedOrigins, SameOrigin, bool)] = &[
            // No Origin: not a browser page (tools, the gateway's upstream handshake).
            (None,                              Some("gw:8000"),        &none, NotAllowed, true),
            (None,                              None,                   &none, Allowed,    true),
            // Listed, whatever the case and a default port.
            (Some("https://canvas.example"),    Some("gw:8000"),        &list, NotAllowed, true),
            (Some("HTTPS://Canvas.Example:443"),Some("gw:8000"),        &list, NotAllowed, true),
            (Some("http://localhost:8000"),     None,                   &list, NotAllowed, true),
            // Same scheme and host, another port or scheme: another origin.
            (Some("http://localhost:8001"),     None,                   &list, NotAllowed, false),
            (Some("http://canvas.example"),     None,                   &list, NotAllowed, false),
            (Some("https://evil.example"),      Some("gw:8000"),        &list, Allowed,    false),
            (Some("null"),                      Some("gw:8000"),        &list, Allowed,    false),
            // The request's own origin: only where pages are served (the gateway).
            (Some("http://127.0.0.1:8000"),     Some("127.0.0.1:8000"), &none, Allowed,    true),
            (Some("http://127.0.0.1:8000"),     Some("127.0.0.1:8000"), &none, NotAllowed, false),
            (Some("https://gw.example"),        Some("GW.example:443"), &none, Allowed,    true),
            (Some("http://gw.example"),         Some("gw.example"),     &none, Allowed,    true),
            (Some("http://gw.example:8000"),    Some("gw.example"),     &none, Allowed,    false),
            (Some("http://gw.example"),         None,                   &none, Allowed,    false),
            (Some("http://evil.example"),       Some("gw.example"),     &none, Allowed,    false),
            // A host that is a prefix of the origin's is not the same host.
            (Some("http://gw.example.evil"),    Some("gw.example"),     &none, Allowed,    false),
            // `*`: any origin.
            (Some("https://evil.example"),      None,                   &any,  NotAllowed, true),
        ];
        for (origin, host, allowed, same, want) in cases {
            assert_eq!(check(*origin, *host, allowed, *same).is_ok(), *want, "{origin:?} host {host:?} {allowed} {same:?}");
        }
        let e = check(Some("https://evil.example"), None, &list, NotAllowed).unwrap_err();
        assert!(e.0.contains("evil.example"), "{e:?}");
    }
}
