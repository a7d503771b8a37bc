//! Client tokens for the tests: HS256 JWTs with the claims the fleet reads
//! ([`shared::client_token`]).

use jsonwebtoken::{encode, Algorithm, EncodingKey, Header};

/// An HS256 token signed with `secret`, allowing `canvases` (exact ids or `prefix*`) for
/// `ttl_secs` from now, for publishing and subscribing.
///
/// # Panics
/// Never for these claims (encoding a JSON object with HS256 does not fail).
pub fn hs256(secret: &str, canvases: &[&str], ttl_secs: u64) -> String {
    let exp = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs()) + ttl_secs;
    encode(
        &Header::new(Algorithm::HS256),
        &serde_json::json!({"exp": exp, "sub": "e2e", "canvases": canvases}),
        &EncodingKey::from_secret(secret.as_bytes()),
    )
    .expect("an HS256 token of a JSON object")
}
