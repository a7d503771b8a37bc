//! A node reads `fleet.toml` (`--config`, `FLEET_CONFIG`): `--check-config` prints the settings
//! merged (flag over environment over file over default), the namespaces resolved and their
//! fingerprint; a bad file stops it with exit 2, every problem named.

use clap::CommandFactory;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Writes `text` as a file of this test's own.
fn fleet_toml(name: &str, text: &str) -> PathBuf {
    let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("node-{name}-{}.toml", std::process::id()));
    std::fs::write(&path, text).unwrap();
    path
}

/// Runs the node with `args` and only the environment `env`.
fn run(args: &[&str], env: &[(&str, &str)]) -> (Output, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_ws-node")).args(args).env_clear().envs(env.iter().copied()).output().expect("run the node");
    let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out, text)
}

fn line<'a>(text: &'a str, var: &str) -> &'a str {
    text.lines().find_map(|l| l.strip_prefix(&format!("{var}="))).unwrap_or_else(|| panic!("no {var} line in {text}"))
}

const FILE: &str = r#"
[default]
model = "pixels"

[namespaces.scores]
model = "json"
patch = "json-patch"

[namespaces.chat]
model = "stream"

[namespaces.prices]
model = "latest"
max_state_bytes = 4096

[fleet]
kafka_bootstrap = "kafka-from-file:9092"
KAFKA_TOPIC = "topic-from-file"
canvas_width = 48

[node]
node_id = "ws-from-file"
recent_events = 77
max_sessions = 500

[publisher]
max_channels = 10
"#;

#[test]
fn check_config_prints_the_file_merged_under_the_environment_and_the_flags() {
    let path = fleet_toml("merged", FILE);
    let (out, text) = run(&["--check-config", "--config", path.to_str().unwrap(), "--max-sessions", "9"], &[("KAFKA_TOPIC", "topic-from-env"), ("CANVAS_HEIGHT", "24")]);
    assert!(out.status.success(), "{text}");
    assert_eq!(line(&text, "NODE_ID"), "ws-from-file", "a required setting from [node]");
    assert_eq!(line(&text, "KAFKA_BOOTSTRAP"), "kafka-from-file:9092");
    assert_eq!(line(&text, "KAFKA_TOPIC"), "topic-from-env", "the environment over the file");
    assert_eq!(line(&text, "CATCHUP_GROUP"), "ws-catchup-ws-from-file");
    assert_eq!(line(&text, "RECENT_EVENTS"), "77");
    assert_eq!(line(&text, "MAX_SESSIONS"), "9", "the flag over the file");
    assert_eq!((line(&text, "CANVAS_WIDTH"), line(&text, "CANVAS_HEIGHT")), ("48", "24"));
    assert_eq!(line(&text, "FLEET_CONFIG"), path.to_str().unwrap());
    // The namespaces: the default one pixels of CANVAS_WIDTH x CANVAS_HEIGHT (it sets no size).
    for table in [
        "[default]\nmodel = \"pixels\"\nwidth = 48\nheight = 24\nmax_data_bytes = 65536\nmax_state_bytes = 1048576\n",
        "[namespaces.chat]\nmodel = \"stream\"\nmax_data_bytes = 65536\nmax_state_bytes = 1048576\n",
        "[namespaces.prices]\nmodel = \"latest\"\nmax_data_bytes = 65536\nmax_state_bytes = 4096\n",
        "[namespaces.scores]\nmodel = \"json\"\npatch = \"json-patch\"\nmax_data_bytes = 65536\nmax_state_bytes = 1048576",
    ] {
        assert!(text.contains(table), "{table} in {text}");
    }
    let reader = shared::fleet_config::Reader::new("ws-node", "node", &ws_node::config::Config::command(), &[]);
    let file = shared::fleet_config::FleetFile::parse(FILE, Path::new("fleet.toml"), &reader);
    let want = file.namespaces(shared::CanvasDims { width: 48, height: 24 }).unwrap();
    assert_eq!(line(&text, "NAMESPACES_FINGERPRINT"), want.fingerprint(), "{text}");
}

#[test]
fn a_bad_file_exits_2_naming_every_problem() {
    let path = fleet_toml("bad", "[node]\nnode_id = \"ws-1\"\nmax_channels = 5\n[fleet]\nnode_id = \"ws-2\"\n[gateway]\nadmin_token = \"t\"\n[namespaces.chat]\nmodel = \"stream\"\nwidth = 3\n");
    let shown = path.display().to_string();
    let (out, text) = run(&["--check-config"], &[("FLEET_CONFIG", &shown)]);
    assert_eq!(out.status.code(), Some(2), "{text}");
    for want in [
        format!("error: {shown}:3 [node]: max_channels is not a setting of ws-node"),
        format!("error: {shown}:5 [fleet]: node_id is not a fleet-wide setting; set it in [node]"),
        format!("error: {shown}:7 [gateway]: admin_token is a secret"),
        format!("error: {shown}: [namespaces.chat] width and height are a pixels namespace's settings, not stream's"),
    ] {
        assert!(text.contains(&want), "{want} in {text}");
    }
    // An unknown model: the TOML error, its line and column.
    let path = fleet_toml("model", "[node]\nnode_id = \"ws-1\"\n[namespaces.x]\nmodel = \"blob\"\n");
    let (out, text) = run(&["--check-config", "--config", path.to_str().unwrap()], &[]);
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert!(text.contains(&format!("error: {}:4:9: unknown variant `blob`", path.display())), "{text}");
}

/// The example at the repository's root is a valid file, its four models resolved.
#[test]
fn the_repository_fleet_toml_is_accepted() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../fleet.toml");
    let (out, text) = run(&["--check-config", "--config", root, "--node-id", "ws-1"], &[]);
    assert!(out.status.success(), "{text}");
    for ns in ["[default]\nmodel = \"pixels\"\nwidth = 64\nheight = 64\n", "[namespaces.chat]\nmodel = \"stream\"\n", "[namespaces.prices]\nmodel = \"latest\"\n", "[namespaces.scores]\nmodel = \"json\"\n"] {
        assert!(text.contains(ns), "{ns} in {text}");
    }
    let reader = shared::fleet_config::Reader::new("ws-node", "node", &ws_node::config::Config::command(), &[]);
    let want = shared::fleet_config::FleetFile::read(Path::new(root), &reader).namespaces(shared::CanvasDims { width: 64, height: 64 }).unwrap();
    assert_eq!(line(&text, "NAMESPACES_FINGERPRINT"), want.fingerprint());
}
