//! `CLIENT_TOKEN_JWKS_FILE`: client-token keys from a JWKS file (RFC 7517, `{"keys":[...]}`),
//! picked by the token's `kid`, re-read when the file changes.
//!
//! Every key needs a `kid` (unique in the file) and is either an RSA public key (`kty` `RSA`,
//! `n`, `e`: RS256, at least 2048 bits) or a shared secret (`kty` `oct`, `k` in base64url: HS256,
//! at least 32 bytes). A key's `alg`, when given, must be that algorithm, and its `use`, when
//! given, `sig`. A file with any other key is refused whole, so that a key an operator counted on
//! is never skipped silently. Parsing is jsonwebtoken's ([`JwkSet`], [`DecodingKey::from_jwk`]).
//!
//! Reloading: [`JwksFile::keys`], called for every token, looks at the file's metadata at most
//! once per [`CHECK_EVERY`] and re-reads the file when its modification time, length (or inode)
//! changed. A changed file that cannot be read or is not a valid set leaves the previous keys in
//! use, with a warning naming the file and the problem; the next change is tried again. The look
//! is a `stat` on the verifying thread (an async handler's too): cheap enough once a second, and
//! the file is read only when it changed.

use super::{check_hs256_len, KeyAlg, TokenError};
use base64::Engine;
use jsonwebtoken::jwk::{AlgorithmParameters, Jwk, JwkSet, KeyAlgorithm, PublicKeyUse};
use jsonwebtoken::DecodingKey;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::{Duration, Instant, SystemTime};

/// How often the file's metadata is looked at, at most (a `stat` per second is cheap).
pub(super) const CHECK_EVERY: Duration = Duration::from_secs(1);

/// The smallest RSA modulus accepted, in bits: ring, under jsonwebtoken, verifies nothing shorter,
/// so such a key is refused when the file is read rather than failing every token.
const MIN_RSA_BITS: usize = 2048;

/// One verifying key of the set.
struct Key {
    key: DecodingKey,
    alg: KeyAlg,
}

/// The keys of one version of the file, by `kid`.
pub(super) struct KeySet {
    by_kid: HashMap<String, Key>,
}

impl KeySet {
    /// Parses a JWKS document.
    fn parse(json: &[u8]) -> Result<Self, String> {
        let set: JwkSet = serde_json::from_slice(json).map_err(|e| format!("not a JWKS ({{\"keys\":[...]}}): {e}"))?;
        if set.keys.is_empty() {
            return Err("no keys".to_owned());
        }
        let mut by_kid = HashMap::with_capacity(set.keys.len());
        for (i, jwk) in set.keys.iter().enumerate() {
            let kid = jwk.common.key_id.as_deref().filter(|k| !k.is_empty()).ok_or_else(|| format!("key {i} has no kid"))?;
            let key = key_of(jwk).map_err(|e| format!("key {kid:?}: {e}"))?;
            if by_kid.insert(kid.to_owned(), key).is_some() {
                return Err(format!("kid {kid:?} is used by two keys"));
            }
        }
        Ok(Self { by_kid })
    }

    /// The key and algorithm for `token`, from its header's `kid` and `alg`.
    ///
    /// # Errors
    /// [`TokenError::Invalid`] for a token without a readable header, without `kid`, with a `kid`
    /// not in the set or with an `alg` other than its key's.
    pub(super) fn pick(&self, token: &str) -> Result<(&DecodingKey, KeyAlg), TokenError> {
        // An `alg` of `none` (or any name jsonwebtoken does not know) fails here.
        let header = jsonwebtoken::decode_header(token).map_err(|e| TokenError::Invalid(e.to_string()))?;
        let kid = header.kid.ok_or_else(|| TokenError::Invalid("no kid in its header (the key is picked by kid)".to_owned()))?;
        let key = self.by_kid.get(&kid).ok_or_else(|| TokenError::Invalid(format!("no key with kid {:?}", shorten(&kid))))?;
        if header.alg != key.alg.algorithm() {
            return Err(TokenError::Invalid(format!(
                "alg {:?} is not the algorithm of key {:?} ({:?})",
                header.alg,
                shorten(&kid),
                key.alg.algorithm()
            )));
        }
        Ok((&key.key, key.alg))
    }

    fn len(&self) -> usize {
        self.by_kid.len()
    }
}

/// At most 40 characters of a client's `kid`, for the refusal (which a client may have made long).
fn shorten(kid: &str) -> String {
    kid.chars().take(40).collect()
}

/// The verifying key of one JWK, or why it cannot be one.
fn key_of(jwk: &Jwk) -> Result<Key, String> {
    if let Some(usage) = &jwk.common.public_key_use {
        if *usage != PublicKeyUse::Signature {
            return Err(format!("use {usage:?} is not sig"));
        }
    }
    let alg = match (&jwk.algorithm, jwk.common.key_algorithm) {
        (AlgorithmParameters::RSA(rsa), None | Some(KeyAlgorithm::RS256)) => {
            let bits = bit_len(&base64url(&rsa.n).map_err(|e| format!("n: {e}"))?);
            if bits < MIN_RSA_BITS {
                return Err(format!("an RSA key of {bits} bits; at least {MIN_RSA_BITS} are needed"));
            }
            KeyAlg::Rs256
        }
        (AlgorithmParameters::OctetKey(oct), None | Some(KeyAlgorithm::HS256)) => {
            check_hs256_len(base64url(&oct.value).map_err(|e| format!("k: {e}"))?.len())?;
            KeyAlg::Hs256
        }
        (AlgorithmParameters::RSA(_), Some(alg)) => return Err(format!("alg {alg:?}: RSA keys are for RS256 only")),
        (AlgorithmParameters::OctetKey(_), Some(alg)) => return Err(format!("alg {alg:?}: oct keys are for HS256 only")),
        (AlgorithmParameters::EllipticCurve(_) | AlgorithmParameters::OctetKeyPair(_), _) => {
            return Err("only RSA (RS256) and oct (HS256) keys are supported".to_owned())
        }
    };
    let key = DecodingKey::from_jwk(jwk).map_err(|e| e.to_string())?;
    Ok(Key { key, alg })
}

/// The length in bits of the big-endian number `bytes`.
fn bit_len(bytes: &[u8]) -> usize {
    let skip = bytes.iter().take_while(|b| **b == 0).count();
    bytes.get(skip).map_or(0, |first| (bytes.len() - skip) * 8 - first.leading_zeros() as usize)
}

/// RFC 7517 encodes key material in base64url without padding.
fn base64url(s: &str) -> Result<Vec<u8>, String> {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(s).map_err(|e| format!("not base64url: {e}"))
}

/// What tells a changed file: modification time, length, and on Unix the inode (a file replaced
/// by a rename, as Kubernetes does for a mounted ConfigMap, may keep an older mtime).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    modified: Option<SystemTime>,
    len: u64,
    inode: u64,
}

impl Stamp {
    fn of(meta: &std::fs::Metadata) -> Self {
        #[cfg(unix)]
        let inode = std::os::unix::fs::MetadataExt::ino(meta);
        #[cfg(not(unix))]
        let inode = 0;
        Self { modified: meta.modified().ok(), len: meta.len(), inode }
    }
}

/// What [`JwksFile`] knows of the file.
struct State {
    /// The keys in use: the last valid version of the file.
    keys: Arc<KeySet>,
    /// When the metadata was last looked at.
    checked: Instant,
    /// The metadata seen then (`None`: unreadable), so that a file is re-read, and a bad one
    /// warned about, once per change rather than once per check.
    seen: Option<Stamp>,
}

/// A JWKS file and the keys of its last valid version.
pub(super) struct JwksFile {
    path: PathBuf,
    check_every: Duration,
    state: RwLock<State>,
}

impl JwksFile {
    /// Reads the file at `path`, to be looked at again at most once per `check_every`.
    ///
    /// # Errors
    /// When it cannot be read or is not a valid key set: at start, there is nothing to fall back on.
    pub(super) fn open(path: &Path, check_every: Duration) -> Result<Self, String> {
        let (stamp, keys) = read(path)?;
        let state = State { keys: Arc::new(keys), checked: Instant::now(), seen: Some(stamp) };
        Ok(Self { path: path.to_owned(), check_every, state: RwLock::new(state) })
    }

    pub(super) fn path(&self) -> &Path {
        &self.path
    }

    /// The keys in use, after looking at the file when the last look is `check_every` old.
    pub(super) fn keys(&self) -> Arc<KeySet> {
        {
            // The common case: a shared lock, a clock read and an `Arc` clone.
            let state = self.state.read().unwrap_or_else(PoisonError::into_inner);
            if state.checked.elapsed() < self.check_every {
                return state.keys.clone();
            }
        }
        let mut state = self.state.write().unwrap_or_else(PoisonError::into_inner);
        // Another caller may have looked while this one waited for the lock.
        if state.checked.elapsed() >= self.check_every {
            state.checked = Instant::now();
            self.refresh(&mut state);
        }
        state.keys.clone()
    }

    /// Re-reads the file if its metadata changed since the last look; keeps the keys in use when
    /// the new version is not valid.
    fn refresh(&self, state: &mut State) {
        let file = self.path.display();
        let stamp = match std::fs::metadata(&self.path) {
            Ok(meta) => Stamp::of(&meta),
            Err(e) => {
                if state.seen.is_some() {
                    tracing::warn!(file = %file, error = %e, keys = state.keys.len(), "client token JWKS file unreadable; keeping the previous keys");
                }
                state.seen = None;
                return;
            }
        };
        if state.seen == Some(stamp) {
            return;
        }
        // Recorded before reading: a write still going on changes the stamp again, and the next
        // look reads the file again.
        state.seen = Some(stamp);
        match read(&self.path) {
            Ok((_, keys)) => {
                tracing::info!(file = %file, keys = keys.len(), "client token JWKS file reloaded");
                state.keys = Arc::new(keys);
            }
            Err(e) => {
                tracing::warn!(file = %file, error = %e, keys = state.keys.len(), "client token JWKS file changed but is not valid; keeping the previous keys");
            }
        }
    }
}

/// The file's metadata (taken before reading it) and its keys.
fn read(path: &Path) -> Result<(Stamp, KeySet), String> {
    let stamp = Stamp::of(&std::fs::metadata(path).map_err(|e| e.to_string())?);
    let json = std::fs::read(path).map_err(|e| e.to_string())?;
    Ok((stamp, KeySet::parse(&json)?))
}

#[cfg(test)]
mod tests {
    use super::super::{Action, ClientTokenSettings, ClientTokens, Keys};
    use super::*;
    use jsonwebtoken::{encode, Algorithm, EncodingKey, Header};
    use serde_json::json;
    use std::time::UNIX_EPOCH;

    // The 2048-bit RSA test key pair of the parent module's tests (testdata/client_token_rsa.*).
    const RSA_PRIVATE: &str = include_str!("../../testdata/client_token_rsa.key");
    const RSA_PUBLIC: &str = include_str!("../../testdata/client_token_rsa.pub");
    // Its public key as JWK `n` and `e`, made once with
    //   openssl rsa -pubin -in shared/testdata/client_token_rsa.pub -noout -modulus \
    //     | cut -d= -f2 | xxd -r -p | base64 -w0 | tr '+/' '-_' | tr -d '='
    // and `e` = 65537 = 0x010001 in base64url.
    const RSA_N: &str = "vgavzwDN0zIhTQH7VyE2836lrV22fkBusGCOkOF6SH1FzH7rcm7XwQfpBXqNU1r43HvCM0zbH71FGdh6T8WVj5tO9NR-rU09-BTBWzn0wnTXcJs7YoSQ9VZUcVNCFB-M1oaPKbG5FI4hxMQWyE6GHeU_oGJG7KOSuRnr2N83yQV6dhKg_8cEeNAESvx0U3HYhH8oChezqEvkBseFONJn7IEJ2cAvcRTpAWaQYZrf04dcOoRtKAXT-98ZnIfF5jxr5RVwnq-nHb0TXIswHIsn-7JXvzZTglJRW7BwYVO75sLVt00uh7qZk4PpmEHQMlxNERIwnFTMvtv8vBERlUU_Sw";
    const RSA_E: &str = "AQAB";
    // Shared secrets of the `oct` keys (32 bytes and more).
    const OCT_1: &str = "oct-1-client-token-secret-0123456789";
    const OCT_2: &str = "oct-2-client-token-secret-0123456789";

    fn b64(bytes: &[u8]) -> String {
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
    }

    fn rsa_jwk(kid: &str) -> serde_json::Value {
        json!({"kty": "RSA", "kid": kid, "use": "sig", "alg": "RS256", "n": RSA_N, "e": RSA_E})
    }

    fn oct_jwk(kid: &str, secret: &str) -> serde_json::Value {
        json!({"kty": "oct", "kid": kid, "k": b64(secret.as_bytes())})
    }

    fn jwks(keys: &[serde_json::Value]) -> String {
        json!({ "keys": keys }).to_string()
    }

    fn claims() -> serde_json::Value {
        let exp = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs() + 600;
        json!({"exp": exp, "canvases": ["c1"]})
    }

    fn sign(alg: Algorithm, kid: Option<&str>, key: &EncodingKey, claims: &serde_json::Value) -> String {
        let mut header = Header::new(alg);
        header.kid = kid.map(str::to_owned);
        encode(&header, claims, key).unwrap()
    }

    fn hs(kid: Option<&str>, secret: &str) -> String {
        sign(Algorithm::HS256, kid, &EncodingKey::from_secret(secret.as_bytes()), &claims())
    }

    fn rs(kid: Option<&str>) -> String {
        sign(Algorithm::RS256, kid, &EncodingKey::from_rsa_pem(RSA_PRIVATE.as_bytes()).unwrap(), &claims())
    }

    /// Writes `text` to `path` and sets its mtime to `at` seconds after the epoch, so that each
    /// version has a modification time of its own whatever the file system's resolution.
    fn write(path: &Path, text: &str, at: u64) {
        std::fs::write(path, text).unwrap();
        let file = std::fs::File::options().write(true).open(path).unwrap();
        file.set_modified(UNIX_EPOCH + Duration::from_secs(1_700_000_000 + at)).unwrap();
    }

    fn verifier(path: &Path, check_every: Duration) -> ClientTokens {
        ClientTokens::with(Keys::Jwks(Arc::new(JwksFile::open(path, check_every).unwrap())))
    }

    /// The code of the refusal and its words (`Ok` for an accepted token).
    fn outcome(tokens: &ClientTokens, token: &str) -> Result<(), (&'static str, String)> {
        tokens.authorize(Some(token), "c1", Action::Subscribe).map(|_| ()).map_err(|e| (e.code(), e.to_string()))
    }

    /// (name, verifier, token, expected: `Ok` or the code and words of the refusal).
    type KidCase<'a> = (&'a str, &'a ClientTokens, String, Result<(), (&'a str, &'a str)>);

    #[test]
    fn the_kid_picks_the_key_table() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("jwks.json");
        write(&path, &jwks(&[rsa_jwk("rsa-1"), oct_jwk("oct-1", OCT_1)]), 0);
        let tokens = verifier(&path, CHECK_EVERY);
        let with_aud = tokens.clone().require_audience("canvas-fleet");
        let none = format!("{}.{}.", b64(br#"{"alg":"none","kid":"oct-1"}"#), b64(claims().to_string().as_bytes()));
        let expired = sign(Algorithm::HS256, Some("oct-1"), &EncodingKey::from_secret(OCT_1.as_bytes()), &json!({"exp": 1, "canvases": ["c1"]}));
        let cases: Vec<KidCase> = vec![
            ("RSA key by kid", &tokens, rs(Some("rsa-1")), Ok(())),
            ("oct key by kid", &tokens, hs(Some("oct-1"), OCT_1), Ok(())),
            ("no kid", &tokens, hs(None, OCT_1), Err(("invalid_token", "no kid"))),
            ("no kid, RS256", &tokens, rs(None), Err(("invalid_token", "no kid"))),
            ("unknown kid", &tokens, hs(Some("oct-9"), OCT_1), Err(("invalid_token", "no key with kid \"oct-9\""))),
            ("wrong secret", &tokens, hs(Some("oct-1"), OCT_2), Err(("invalid_token", "bad signature"))),
            ("HS256 with the RSA key's kid", &tokens, hs(Some("rsa-1"), OCT_1), Err(("invalid_token", "alg HS256 is not the algorithm of key"))),
            // The public key used as an HMAC secret: the classic algorithm-confusion attack.
            ("HS256 signed with the public key", &tokens, hs(Some("rsa-1"), RSA_PUBLIC), Err(("invalid_token", "alg HS256"))),
            ("RS256 with the oct key's kid", &tokens, rs(Some("oct-1")), Err(("invalid_token", "alg RS256 is not the algorithm of key"))),
            ("alg none", &tokens, none, Err(("invalid_token", ""))),
            ("garbage", &tokens, "not.a.jwt".to_owned(), Err(("invalid_token", ""))),
            ("expired", &tokens, expired, Err(("token_expired", ""))),
            ("the rules apply too: aud required", &with_aud, hs(Some("oct-1"), OCT_1), Err(("invalid_token", "no aud claim"))),
        ];
        for (name, tokens, token, want) in cases {
            match (outcome(tokens, &token), want) {
                (Ok(()), Ok(())) => {}
                (Err((code, words)), Err((want_code, want_words))) => {
                    assert_eq!(code, want_code, "{name}: {words}");
                    assert!(words.contains(want_words), "{name}: {words}");
                }
                (got, want) => panic!("{name}: got {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn invalid_key_sets_are_refused_table() {
        let short_rsa = b64(&[0xc5; 128]); // a 1024-bit modulus
        let cases: Vec<(&str, String, &str)> = vec![
            ("not JSON", "{".to_owned(), "not a JWKS"),
            ("not a set", r#"{"kty":"oct","k":"AA"}"#.to_owned(), "not a JWKS"),
            ("no keys", jwks(&[]), "no keys"),
            ("no kid", jwks(&[json!({"kty": "oct", "k": b64(OCT_1.as_bytes())})]), "key 0 has no kid"),
            ("empty kid", jwks(&[json!({"kty": "oct", "kid": "", "k": b64(OCT_1.as_bytes())})]), "key 0 has no kid"),
            ("a kid twice", jwks(&[oct_jwk("a", OCT_1), oct_jwk("a", OCT_2)]), "kid \"a\" is used by two keys"),
            ("short oct key", jwks(&[oct_jwk("a", &"z".repeat(31))]), "key \"a\": an HS256 secret of 31 bytes"),
            ("oct key not base64url", jwks(&[json!({"kty": "oct", "kid": "a", "k": "a+b/"})]), "k: not base64url"),
            ("oct key for RS256", jwks(&[json!({"kty": "oct", "kid": "a", "alg": "RS256", "k": b64(OCT_1.as_bytes())})]), "oct keys are for HS256 only"),
            ("oct key for HS512", jwks(&[json!({"kty": "oct", "kid": "a", "alg": "HS512", "k": b64(OCT_1.as_bytes())})]), "oct keys are for HS256 only"),
            ("RSA key for HS256", jwks(&[json!({"kty": "RSA", "kid": "r", "alg": "HS256", "n": RSA_N, "e": RSA_E})]), "RSA keys are for RS256 only"),
            ("RSA key for PS256", jwks(&[json!({"kty": "RSA", "kid": "r", "alg": "PS256", "n": RSA_N, "e": RSA_E})]), "RSA keys are for RS256 only"),
            ("RSA key under 2048 bits", jwks(&[json!({"kty": "RSA", "kid": "r", "n": short_rsa, "e": RSA_E})]), "an RSA key of 1024 bits"),
            ("an encryption key", jwks(&[json!({"kty": "RSA", "kid": "r", "use": "enc", "n": RSA_N, "e": RSA_E})]), "is not sig"),
            (
                "an EC key",
                jwks(&[json!({"kty": "EC", "kid": "e", "crv": "P-256", "x": b64(&[1; 32]), "y": b64(&[2; 32])})]),
                "only RSA (RS256) and oct (HS256) keys",
            ),
            ("one good key and one bad", jwks(&[rsa_jwk("rsa-1"), oct_jwk("a", "short")]), "key \"a\""),
        ];
        for (name, json, words) in cases {
            match KeySet::parse(json.as_bytes()) {
                Ok(_) => panic!("{name}: accepted"),
                Err(e) => assert!(e.contains(words), "{name}: {e}"),
            }
        }
        // What they are refused for, for contrast: an RSA key without `alg` or `use` is RS256.
        let bare = KeySet::parse(jwks(&[json!({"kty": "RSA", "kid": "r", "n": RSA_N, "e": RSA_E})]).as_bytes()).unwrap();
        assert_eq!(bare.by_kid["r"].alg, KeyAlg::Rs256);
    }

    #[test]
    fn the_file_is_reloaded_when_it_changes_and_a_bad_version_keeps_the_keys() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("jwks.json");
        write(&path, &jwks(&[oct_jwk("a", OCT_1)]), 0);
        // Looked at on every token here; the one-second pace is the next test's.
        let tokens = verifier(&path, Duration::ZERO);
        assert_eq!(outcome(&tokens, &hs(Some("a"), OCT_1)), Ok(()));

        // A new key in place of the old one.
        write(&path, &jwks(&[oct_jwk("b", OCT_2)]), 1);
        assert_eq!(outcome(&tokens, &hs(Some("b"), OCT_2)), Ok(()), "the new key is used");
        assert_eq!(outcome(&tokens, &hs(Some("a"), OCT_1)).unwrap_err().0, "invalid_token", "the old key is gone");

        // A broken version, then an invalid one, then none: the last valid keys stay.
        write(&path, "{\"keys\": [", 2);
        assert_eq!(outcome(&tokens, &hs(Some("b"), OCT_2)), Ok(()), "kept after a broken file");
        write(&path, &jwks(&[oct_jwk("c", "short")]), 3);
        assert_eq!(outcome(&tokens, &hs(Some("b"), OCT_2)), Ok(()), "kept after an invalid key");
        assert_eq!(outcome(&tokens, &hs(Some("c"), "short")).unwrap_err().0, "invalid_token");
        std::fs::remove_file(&path).unwrap();
        assert_eq!(outcome(&tokens, &hs(Some("b"), OCT_2)), Ok(()), "kept while the file is missing");

        // Replaced by a rename (as a mounted ConfigMap is), with two keys, one RSA.
        let next = dir.path().join("jwks.json.new");
        write(&next, &jwks(&[rsa_jwk("rsa-1"), oct_jwk("a", OCT_1)]), 4);
        std::fs::rename(&next, &path).unwrap();
        assert_eq!(outcome(&tokens, &rs(Some("rsa-1"))), Ok(()), "valid again");
        assert_eq!(outcome(&tokens, &hs(Some("a"), OCT_1)), Ok(()));
        assert_eq!(outcome(&tokens, &hs(Some("b"), OCT_2)).unwrap_err().0, "invalid_token");
    }

    #[test]
    fn the_file_is_looked_at_at_most_once_per_interval() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("jwks.json");
        write(&path, &jwks(&[oct_jwk("a", OCT_1)]), 0);
        let tokens = verifier(&path, Duration::from_secs(3600));
        write(&path, &jwks(&[oct_jwk("b", OCT_2)]), 1);
        // Not looked at yet: the keys read at start are still the ones in use.
        assert_eq!(outcome(&tokens, &hs(Some("a"), OCT_1)), Ok(()));
        assert_eq!(outcome(&tokens, &hs(Some("b"), OCT_2)).unwrap_err().0, "invalid_token");
    }

    #[test]
    fn settings_load_a_jwks_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("jwks.json");
        write(&path, &jwks(&[rsa_jwk("rsa-1"), oct_jwk("oct-1", OCT_1)]), 0);
        let settings = ClientTokenSettings { jwks_file: Some(path.clone()), ..Default::default() };
        let tokens = settings.load().unwrap().expect("tokens on");
        assert_eq!(outcome(&tokens, &rs(Some("rsa-1"))), Ok(()));
        assert!(format!("{tokens:?}").contains("jwks.json"));
        assert!(settings.describe().contains(&("CLIENT_TOKEN_JWKS_FILE", path.display().to_string())));
        // At start, an invalid file is a problem naming the file and what is wrong.
        write(&path, &jwks(&[oct_jwk("oct-1", "short")]), 1);
        let problems = settings.problems();
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(problems[0].starts_with(&format!("CLIENT_TOKEN_JWKS_FILE {}: ", path.display())), "{problems:?}");
        assert!(problems[0].contains("an HS256 secret of 5 bytes"), "{problems:?}");
    }
}
