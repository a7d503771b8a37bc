//! The publisher reads `fleet.toml` (`--config`, `FLEET_CONFIG`): `--check-config` prints the
//! settings merged (flag over environment over file over default), the namespaces resolved and
//! their fingerprint; a bad file stops it with exit 2, every problem named.

use clap::CommandFactory;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Writes `text` as a file of this test's own.
fn fleet_toml(name: &str, text: &str) -> PathBuf {
    let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("publisher-{name}-{}.toml", std::process::id()));
    std::fs::write(&path, text).unwrap();
    path
}

/// Runs the publisher with `args` and only the environment `env`.
fn run(args: &[&str], env: &[(&str, &str)]) -> (Output, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_core-publisher")).args(args).env_clear().envs(env.iter().copied()).output().expect("run the publisher");
    let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out, text)
}

fn line<'a>(text: &'a str, var: &str) -> &'a str {
    text.lines().find_map(|l| l.strip_prefix(&format!("{var}="))).unwrap_or_else(|| panic!("no {var} line in {text}"))
}

const FILE: &str = r#"
[default]
model = "pixels"
width = 32
height = 16

[namespaces.scores]
model = "json"

[namespaces.chat]
model = "stream"
max_data_bytes = 1024

[namespaces.prices]
model = "latest"

[fleet]
kafka_bootstrap = "kafka-from-file:9092"
kafka_topic = "topic-from-file"
control_topic = "control-from-file"

[publisher]
TOPIC_PARTITIONS = 12
max_canvases = 500

[node]
node_id = "ws-1"
"#;

#[test]
fn check_config_prints_the_file_merged_under_the_environment_and_the_flags() {
    let path = fleet_toml("merged", FILE);
    let (out, text) = run(
        &["--check-config", "--config", path.to_str().unwrap(), "--replication-factor", "3"],
        &[("KAFKA_TOPIC", "topic-from-env"), ("TOPIC_REPLICATION_FACTOR", "2")],
    );
    assert!(out.status.success(), "{text}");
    assert_eq!(line(&text, "KAFKA_BOOTSTRAP"), "kafka-from-file:9092", "[fleet] over the default");
    assert_eq!(line(&text, "KAFKA_TOPIC"), "topic-from-env", "the environment over the file");
    assert_eq!(line(&text, "TOPIC_REPLICATION_FACTOR"), "3", "the flag over the environment");
    assert_eq!(line(&text, "TOPIC_PARTITIONS"), "12", "[publisher], its key in capitals");
    assert_eq!(line(&text, "CONTROL_TOPIC"), "control-from-file");
    assert_eq!(line(&text, "SNAPSHOT_TOPIC"), "topic-from-env-snapshots");
    assert_eq!(line(&text, "MAX_CHANNELS"), "500", "the old name in the file");
    assert!(text.contains("# note: ") && text.contains("max_canvases is deprecated: read as max_channels"), "{text}");
    assert_eq!(line(&text, "FLEET_CONFIG"), path.to_str().unwrap());
    assert!(text.lines().any(|l| l == "# from the file: CONTROL_TOPIC, KAFKA_BOOTSTRAP, MAX_CHANNELS, TOPIC_PARTITIONS"), "{text}");
    let fingerprint = line(&text, "NAMESPACES_FINGERPRINT");
    assert!(fingerprint.len() == 16 && fingerprint.bytes().all(|b| b.is_ascii_hexdigit()), "{fingerprint}");
    // The namespaces resolved: every field set.
    for table in [
        "[default]\nmodel = \"pixels\"\nwidth = 32\nheight = 16\nmax_data_bytes = 65536\nmax_state_bytes = 1048576\n",
        "[namespaces.chat]\nmodel = \"stream\"\nmax_data_bytes = 1024\nmax_state_bytes = 1048576\n",
        "[namespaces.prices]\nmodel = \"latest\"\nmax_data_bytes = 65536\nmax_state_bytes = 1048576\n",
        "[namespaces.scores]\nmodel = \"json\"\npatch = \"merge\"\nmax_data_bytes = 65536\nmax_state_bytes = 1048576",
    ] {
        assert!(text.contains(table), "{table} in {text}");
    }
    // FLEET_CONFIG names the file as well; the same file gives the same fingerprint, another
    // canvas size another.
    let (_, by_env) = run(&["--check-config"], &[("FLEET_CONFIG", path.to_str().unwrap())]);
    assert_eq!(line(&by_env, "NAMESPACES_FINGERPRINT"), fingerprint, "{by_env}");
    let other = fleet_toml("other", &FILE.replace("width = 32", "width = 33"));
    let (_, by_other) = run(&["--check-config", &format!("--config={}", other.display())], &[]);
    assert_ne!(line(&by_other, "NAMESPACES_FINGERPRINT"), fingerprint);
    // The old environment variable still works, with a note.
    let (out, text) = run(&["--check-config"], &[("MAX_CANVASES", "42")]);
    assert!(out.status.success(), "{text}");
    assert_eq!(line(&text, "MAX_CHANNELS"), "42");
    assert!(text.contains("# note: MAX_CANVASES is deprecated: read as MAX_CHANNELS"), "{text}");
    assert_eq!(line(&text, "FLEET_CONFIG"), "");
}

#[test]
fn a_bad_file_exits_2_naming_every_problem() {
    let path = fleet_toml(
        "bad",
        "[publisher]\nkafka_topicc = \"t\"\nadmin_token = \"a-secret-in-a-file\"\n[namespaces.big]\nmodel = \"latest\"\nmax_data_bytes = 2000000\n[extra]\n",
    );
    let shown = path.display().to_string();
    let (out, text) = run(&["--check-config", "--config", &shown], &[]);
    assert_eq!(out.status.code(), Some(2), "{text}");
    for want in [
        format!("error: {shown}:2 [publisher]: kafka_topicc is not a setting of core-publisher"),
        format!("error: {shown}:3 [publisher]: admin_token is a secret: secrets are never read from the file; set ADMIN_TOKEN in the environment"),
        format!("error: {shown}:7: unknown table [extra]"),
        format!("error: {shown}: [namespaces.big] max_data_bytes 2000000 is outside 1..=1048576"),
    ] {
        assert!(text.contains(&want), "{want} in {text}");
    }
    assert!(!text.contains("a-secret-in-a-file"), "the secret is not repeated: {text}");
    // A value the setting refuses: clap's error, and where the value came from.
    let path = fleet_toml("value", "[publisher]\ntopic_partitions = \"many\"\n");
    let (out, text) = run(&["--check-config", "--config", path.to_str().unwrap()], &[]);
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert!(text.contains("invalid value 'many'"), "{text}");
    assert!(text.contains(&format!("note: TOPIC_PARTITIONS = \"many\" came from {}:2 [publisher]", path.display())), "{text}");
    // A file that is not there, or not TOML.
    let (out, text) = run(&["--check-config", "--config", "/nonexistent/fleet.toml"], &[]);
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert!(text.contains("error: /nonexistent/fleet.toml: cannot read the fleet file"), "{text}");
    let path = fleet_toml("syntax", "[fleet]\nkafka_bootstrap = \"k\n");
    let (out, text) = run(&["--check-config", "--config", path.to_str().unwrap()], &[]);
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert!(text.contains(&format!("error: {}:2:21: invalid basic string", path.display())), "{text}");
}

/// The example at the repository's root is a valid file, its four models resolved.
#[test]
fn the_repository_fleet_toml_is_accepted() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../fleet.toml");
    let (out, text) = run(&["--check-config", "--config", root], &[]);
    assert!(out.status.success(), "{text}");
    for ns in ["[default]\nmodel = \"pixels\"\nwidth = 64\nheight = 64\n", "[namespaces.chat]\nmodel = \"stream\"\n", "[namespaces.prices]\nmodel = \"latest\"\n", "[namespaces.scores]\nmodel = \"json\"\n"] {
        assert!(text.contains(ns), "{ns} in {text}");
    }
    let reader = shared::fleet_config::Reader::new("core-publisher", "publisher", &core_publisher::config::Config::command(), &[]);
    let want = shared::fleet_config::FleetFile::read(Path::new(root), &reader).namespaces(shared::CanvasDims { width: 64, height: 64 }).unwrap();
    assert_eq!(line(&text, "NAMESPACES_FINGERPRINT"), want.fingerprint());
}
