//! A `SASL_SSL` listener for the single JVM broker, beside its plaintext one: TLS with a
//! self-signed certificate for `127.0.0.1` made by the JDK's `keytool`, and SASL/PLAIN with one
//! user. The harness keeps using the plaintext listener; the services under test get
//! [`SaslSsl::client_env`], which points them at the secured one through the
//! `KAFKA_CLIENT_<NAME>` pass-through, as an operator would configure them.

use anyhow::{bail, Context};
use std::path::{Path, PathBuf};

/// The SASL/PLAIN user the broker accepts.
pub const USERNAME: &str = "fleet";
/// Its password.
pub const PASSWORD: &str = "fleet-secret";
/// The PKCS#12 keystore's password (the broker's key and certificate).
const STORE_PASSWORD: &str = "keystore-secret";

/// A secured listener's port and the files its clients need.
pub struct SaslSsl {
    /// The `SASL_SSL` listener's port on 127.0.0.1.
    pub port: u16,
    /// The broker's certificate in PEM: the CA a client trusts (`ssl.ca.location`).
    pub ca_pem: PathBuf,
    keystore: PathBuf,
    _dir: tempfile::TempDir,
}

impl SaslSsl {
    /// Makes the broker's key pair and certificate (valid for `IP:127.0.0.1` and `localhost`, so
    /// librdkafka's default hostname check passes) on `port`.
    ///
    /// # Errors
    /// When `keytool` is missing or fails.
    pub fn new(port: u16) -> anyhow::Result<Self> {
        let dir = tempfile::Builder::new().prefix("e2e-kafka-tls-").tempdir()?;
        let keystore = dir.path().join("broker.p12");
        let ca_pem = dir.path().join("ca.pem");
        keytool(&[
            "-genkeypair", "-alias", "broker", "-keyalg", "RSA", "-keysize", "2048", "-validity", "7",
            "-dname", "CN=localhost", "-ext", "SAN=IP:127.0.0.1,DNS:localhost",
            "-storetype", "PKCS12", "-keystore", &path(&keystore), "-storepass", STORE_PASSWORD, "-keypass", STORE_PASSWORD,
        ])?;
        keytool(&["-exportcert", "-rfc", "-alias", "broker", "-keystore", &path(&keystore), "-storepass", STORE_PASSWORD, "-file", &path(&ca_pem)])?;
        Ok(Self { port, ca_pem, keystore, _dir: dir })
    }

    /// The broker's extra `server.properties` lines (they follow start.sh's and win): the
    /// listeners with this one added, its TLS keystore and its SASL/PLAIN user.
    pub fn server_properties(&self, plaintext: u16, controller: u16) -> String {
        let s = self.port;
        format!(
            "listeners=PLAINTEXT://127.0.0.1:{plaintext},CONTROLLER://127.0.0.1:{controller},SASL_SSL://127.0.0.1:{s}\n\
             advertised.listeners=PLAINTEXT://127.0.0.1:{plaintext},SASL_SSL://127.0.0.1:{s}\n\
             listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL\n\
             sasl.enabled.mechanisms=PLAIN\n\
             listener.name.sasl_ssl.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required user_{USERNAME}=\"{PASSWORD}\";\n\
             ssl.keystore.type=PKCS12\n\
             ssl.keystore.location={}\n\
             ssl.keystore.password={STORE_PASSWORD}\n\
             ssl.key.password={STORE_PASSWORD}\n",
            path(&self.keystore)
        )
    }

    /// The environment of a service that talks to the broker over this listener only:
    /// `KAFKA_BOOTSTRAP` and the `KAFKA_CLIENT_*` settings for SASL/PLAIN over TLS, with
    /// `password` as the password.
    pub fn client_env(&self, password: &str) -> Vec<(String, String)> {
        [
            ("KAFKA_BOOTSTRAP", format!("127.0.0.1:{}", self.port)),
            ("KAFKA_CLIENT_SECURITY_PROTOCOL", "SASL_SSL".to_owned()),
            ("KAFKA_CLIENT_SASL_MECHANISMS", "PLAIN".to_owned()),
            ("KAFKA_CLIENT_SASL_USERNAME", USERNAME.to_owned()),
            ("KAFKA_CLIENT_SASL_PASSWORD", password.to_owned()),
            ("KAFKA_CLIENT_SSL_CA_LOCATION", path(&self.ca_pem)),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect()
    }
}

fn path(p: &Path) -> String {
    p.display().to_string()
}

/// Runs the JDK's `keytool` (`$JAVA_HOME/bin/keytool`, else the one on `PATH`).
fn keytool(args: &[&str]) -> anyhow::Result<()> {
    let bin = std::env::var_os("JAVA_HOME").map_or_else(|| PathBuf::from("keytool"), |h| PathBuf::from(h).join("bin/keytool"));
    let out = std::process::Command::new(&bin).args(args).output().with_context(|| format!("run {} (it comes with the JDK)", bin.display()))?;
    if !out.status.success() {
        bail!("keytool {} failed ({}): {}", args[0], out.status, String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(())
}
