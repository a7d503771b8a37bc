//! The gateway reads `fleet.toml` (`--config`, `FLEET_CONFIG`): `--check-config` prints the
//! settings merged (flag over environment over file over default), the namespaces resolved and
//! their fingerprint; a bad file stops it with exit 2, every problem named.

use clap::CommandFactory;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Writes `text` as a file of this test's own.
fn fleet_toml(name: &str, text: &str) -> PathBuf {
    let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("gateway-{name}-{}.toml", std::process::id()));
    std::fs::write(&path, text).unwrap();
    path
}

/// Runs the gateway with `args` and only the environment `env`.
fn run(args: &[&str], env: &[(&str, &str)]) -> (Output, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_gateway")).args(args).env_clear().envs(env.iter().copied()).output().expect("run the gateway");
    let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out, text)
}

fn line<'a>(text: &'a str, var: &str) -> &'a str {
    text.lines().find_map(|l| l.strip_prefix(&format!("{var}="))).unwrap_or_else(|| panic!("no {var} line in {text}"))
}

const FILE: &str = r#"
[default]
model = "pixels"
width = 100
height = 50

[namespaces.scores]
model = "json"

[namespaces.chat]
model = "stream"

[namespaces.prices]
model = "latest"

[fleet]
kafka_bootstrap = "kafka-from-file:9092"
kafka_topic = "not-a-gateway-setting-but-fleet-wide"
control_topic = "control-from-file"

[gateway]
nodes = ["ws-1=http://ws-1:8081", "ws-2=http://ws-2:8081"]
up_threshold = 7
poll_interval_ms = 3000

[node]
node_id = "ws-1"
"#;

#[test]
fn check_config_prints_the_file_merged_under_the_environment_and_the_flags() {
    let path = fleet_toml("merged", FILE);
    let (out, text) = run(&["--check-config", "--config", path.to_str().unwrap(), "--up-threshold", "2"], &[("CONTROL_TOPIC", "control-from-env")]);
    assert!(out.status.success(), "{text}");
    assert_eq!(line(&text, "NODES"), "ws-1=http://ws-1:8081,ws-2=http://ws-2:8081", "a required setting from [gateway], an array");
    assert_eq!(line(&text, "KAFKA_BOOTSTRAP"), "kafka-from-file:9092", "[fleet]: the gateways elect through Kafka");
    assert_eq!(line(&text, "CONTROL_TOPIC"), "control-from-env", "the environment over the file");
    assert_eq!(line(&text, "UP_THRESHOLD"), "2", "the flag over the file");
    assert_eq!(line(&text, "POLL_INTERVAL_MS"), "3000");
    assert_eq!((line(&text, "CANVAS_WIDTH"), line(&text, "CANVAS_HEIGHT")), ("64", "64"), "the default namespace sets its own size");
    assert_eq!(line(&text, "FLEET_CONFIG"), path.to_str().unwrap());
    for table in [
        "[default]\nmodel = \"pixels\"\nwidth = 100\nheight = 50\nmax_data_bytes = 65536\nmax_state_bytes = 1048576\n",
        "[namespaces.chat]\nmodel = \"stream\"\nmax_data_bytes = 65536\nmax_state_bytes = 1048576\n",
        "[namespaces.prices]\nmodel = \"latest\"\nmax_data_bytes = 65536\nmax_state_bytes = 1048576\n",
        "[namespaces.scores]\nmodel = \"json\"\npatch = \"merge\"\nmax_data_bytes = 65536\nmax_state_bytes = 1048576",
    ] {
        assert!(text.contains(table), "{table} in {text}");
    }
    let reader = shared::fleet_config::Reader::new("gateway", "gateway", &gateway::config::Config::command(), &[]);
    let file = shared::fleet_config::FleetFile::parse(FILE, Path::new("fleet.toml"), &reader);
    let want = file.namespaces(shared::CanvasDims { width: 64, height: 64 }).unwrap();
    assert_eq!(line(&text, "NAMESPACES_FINGERPRINT"), want.fingerprint(), "{text}");
    // Without a file: the default namespace alone, pixels of CANVAS_WIDTH x CANVAS_HEIGHT.
    let (out, text) = run(&["--check-config", "--nodes", "ws-1=http://h:1"], &[("CANVAS_WIDTH", "100"), ("CANVAS_HEIGHT", "50")]);
    assert!(out.status.success(), "{text}");
    let pixels = shared::namespaces::Namespaces::pixels_only(shared::CanvasDims { width: 100, height: 50 });
    assert_eq!(line(&text, "NAMESPACES_FINGERPRINT"), pixels.fingerprint());
    assert!(text.contains("[default]\nmodel = \"pixels\"\nwidth = 100\nheight = 50\n"), "{text}");
}

#[test]
fn a_bad_file_exits_2_naming_every_problem() {
    let path = fleet_toml(
        "bad",
        "[gateway]\nnodes = \"ws-1=http://h:1\"\nadmin_token = \"t\"\nnode_id = \"ws-1\"\n[fleet]\nclient_token_hs256_secret = \"s\"\n[namespaces.\"bad name\"]\nmodel = \"json\"\n[namespaces.doc]\nmodel = \"latest\"\npatch = \"merge\"\n",
    );
    let shown = path.display().to_string();
    let (out, text) = run(&["--check-config", "--config", &shown], &[]);
    assert_eq!(out.status.code(), Some(2), "{text}");
    for want in [
        format!("error: {shown}:3 [gateway]: admin_token is a secret"),
        format!("error: {shown}:4 [gateway]: node_id is not a setting of gateway"),
        format!("error: {shown}:6 [fleet]: client_token_hs256_secret is a secret"),
        format!("error: {shown}: [namespaces.bad name] a namespace name is one or more of A-Z a-z 0-9 - _"),
        format!("error: {shown}: [namespaces.doc] patch is a json namespace's setting, not latest's"),
    ] {
        assert!(text.contains(&want), "{want} in {text}");
    }
    // A required setting the file does not give: clap's error, the file's problems before it.
    let path = fleet_toml("no-nodes", "[gateway]\nup_threshold = 3\nmax_canvases = 1\n");
    let (out, text) = run(&["--check-config", "--config", path.to_str().unwrap()], &[]);
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert!(text.contains(&format!("error: {}:3 [gateway]: max_canvases is not a setting of gateway", path.display())), "{text}");
    assert!(text.contains("--nodes <NODES>"), "{text}");
}

/// The example at the repository's root is a valid file, its four models resolved.
#[test]
fn the_repository_fleet_toml_is_accepted() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../fleet.toml");
    let (out, text) = run(&["--check-config", "--config", root, "--nodes", "ws-1=http://h:1"], &[]);
    assert!(out.status.success(), "{text}");
    for ns in ["[default]\nmodel = \"pixels\"\nwidth = 64\nheight = 64\n", "[namespaces.chat]\nmodel = \"stream\"\n", "[namespaces.prices]\nmodel = \"latest\"\n", "[namespaces.scores]\nmodel = \"json\"\n"] {
        assert!(text.contains(ns), "{ns} in {text}");
    }
    let reader = shared::fleet_config::Reader::new("gateway", "gateway", &gateway::config::Config::command(), &[]);
    let want = shared::fleet_config::FleetFile::read(Path::new(root), &reader).namespaces(shared::CanvasDims { width: 64, height: 64 }).unwrap();
    assert_eq!(line(&text, "NAMESPACES_FINGERPRINT"), want.fingerprint());
}
