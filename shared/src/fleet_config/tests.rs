use super::*;
use clap::Arg;

const DIMS: CanvasDims = CanvasDims { width: 64, height: 64 };
const RENAMED: &[Renamed] = &[Renamed { old: "MAX_CANVASES", new: "MAX_CHANNELS" }];

/// A publisher-like binary: a few settings, a secret, the file's own flag.
fn reader() -> Reader {
    let command = clap::Command::new("core-publisher")
        .arg(Arg::new("config").long("config").env(ENV))
        .arg(Arg::new("kafka_bootstrap").long("kafka-bootstrap").env("KAFKA_BOOTSTRAP"))
        .arg(Arg::new("topic").long("topic").env("KAFKA_TOPIC"))
        .arg(Arg::new("partitions").long("partitions").env("TOPIC_PARTITIONS"))
        .arg(Arg::new("max_channels").long("max-channels").env("MAX_CHANNELS"))
        .arg(Arg::new("standby").long("standby").env("PUBLISHER_STANDBY"))
        .arg(Arg::new("trusted").long("trusted-proxies").env("TRUSTED_PROXIES"))
        .arg(Arg::new("secret").long("client-token-hs256-secret").env("CLIENT_TOKEN_HS256_SECRET").hide_env_values(true))
        .arg(Arg::new("admin_token").long("admin-token").env("ADMIN_TOKEN").hide_env_values(true))
        .arg(Arg::new("key").long("signing-key").env("SIGNING_KEY").hide_env_values(true));
    Reader::new("core-publisher", "publisher", &command, RENAMED)
}

fn parse(text: &str) -> FleetFile {
    FleetFile::parse(text, Path::new("fleet.toml"), &reader())
}

fn values(f: &FleetFile) -> Vec<(&str, &str)> {
    f.settings.iter().map(|(k, s)| (k.as_str(), s.value.as_str())).collect()
}

#[test]
fn the_reader_knows_its_settings_and_secrets() {
    let r = reader();
    assert!(r.settings.contains("KAFKA_BOOTSTRAP") && r.settings.contains("MAX_CHANNELS"));
    assert!(!r.settings.contains(ENV), "the file's own variable is not a setting of the file");
    assert!(r.secrets.contains("ADMIN_TOKEN") && r.secrets.contains("SIGNING_KEY") && !r.settings.contains("SIGNING_KEY"));
    for s in FLEET_SETTINGS {
        assert!(!SECRETS.contains(s) && s.to_ascii_uppercase() == *s, "{s}");
    }
}

#[test]
fn the_file_gives_the_binary_fleet_settings_then_its_own() {
    // (file, the settings the publisher takes, the line of KAFKA_BOOTSTRAP's origin)
    type Case = (&'static str, &'static [(&'static str, &'static str)], Option<&'static str>);
    let cases: &[Case] = &[
        ("", &[], None),
        ("[fleet]\nkafka_bootstrap = \"k:1\"\n", &[("KAFKA_BOOTSTRAP", "k:1")], Some("fleet.toml:2 [fleet]")),
        // Upper or lower case; the binary's own table over [fleet], wherever it is in the file.
        (
            "[publisher]\nKAFKA_BOOTSTRAP = \"own:1\"\n[fleet]\nkafka_bootstrap = \"k:1\"\nkafka_topic = \"t\"\n",
            &[("KAFKA_BOOTSTRAP", "own:1"), ("KAFKA_TOPIC", "t")],
            Some("fleet.toml:2 [publisher]"),
        ),
        // Numbers, booleans and arrays as the environment writes them.
        (
            "[publisher]\ntopic_partitions = 12\npublisher_standby = true\ntrusted_proxies = [\"10.0.0.0/8\", \"192.168.0.0/16\"]\n",
            &[("PUBLISHER_STANDBY", "true"), ("TOPIC_PARTITIONS", "12"), ("TRUSTED_PROXIES", "10.0.0.0/8,192.168.0.0/16")],
            None,
        ),
        // A fleet-wide setting this binary does not have, and the other binaries' tables: not its business.
        ("[fleet]\ncontrol_topic = \"c\"\n[node]\nnode_id = \"ws-1\"\n[gateway]\nnodes = [\"ws-1=http://h:1\"]\n", &[], None),
        // The namespaces are no settings.
        ("[default]\nmodel = \"stream\"\n[namespaces.s]\nmodel = \"json\"\n", &[], None),
    ];
    for (text, want, origin) in cases {
        let f = parse(text);
        assert!(f.problems.is_empty(), "{text}: {:?}", f.problems);
        assert_eq!(values(&f), *want, "{text}");
        assert_eq!(f.settings.get("KAFKA_BOOTSTRAP").map(|s| s.origin.as_str()), *origin, "{text}");
    }
    let f = parse("[default]\nmodel = \"stream\"\n[namespaces.s]\nmodel = \"json\"\n");
    assert_eq!(f.namespaces.namespaces.len(), 1);
    assert_eq!(f.namespaces(DIMS).unwrap().default_namespace().kind(), crate::model::ModelKind::Stream);
}

#[test]
fn every_problem_of_the_file_is_named_with_its_file_and_line() {
    // (file, the problems expected, each by its start)
    let cases: &[(&str, &[&str])] = &[
        ("[fleeet]\nkafka_bootstrap = \"k\"\n", &["fleet.toml:1: unknown table [fleeet]"]),
        ("[publisher]\nkafka_topicc = \"t\"\n", &["fleet.toml:2 [publisher]: kafka_topicc is not a setting of core-publisher"]),
        ("[fleet]\nmax_channels = 5\n", &["fleet.toml:2 [fleet]: max_channels is not a fleet-wide setting; set it in [publisher]"]),
        ("[fleet]\nnode_id = \"ws-1\"\n", &["fleet.toml:2 [fleet]: node_id is not a fleet-wide setting (those are kafka_bootstrap, "]),
        // Secrets, in any table, the other binaries' too.
        ("[fleet]\nadmin_token = \"t\"\n", &["fleet.toml:2 [fleet]: admin_token is a secret: secrets are never read from the file; set ADMIN_TOKEN in the environment"]),
        ("[node]\n\nADMIN_TOKEN = \"t\"\n", &["fleet.toml:3 [node]: ADMIN_TOKEN is a secret"]),
        ("[gateway]\nclient_token_hs256_secret = \"s\"\n", &["fleet.toml:2 [gateway]: client_token_hs256_secret is a secret"]),
        ("[publisher]\nsigning_key = \"s\"\n", &["fleet.toml:2 [publisher]: signing_key is a secret"]),
        ("[publisher]\ntopic_partitions = { n = 1 }\n", &["fleet.toml:2 [publisher]: topic_partitions: a setting is a string, a number, a boolean or an array of them"]),
        ("[publisher]\nkafka_topic = \"a\"\nKAFKA_TOPIC = \"b\"\n", &["fleet.toml:3 [publisher]: KAFKA_TOPIC and kafka_topic both set KAFKA_TOPIC; keep one"]),
        ("[publisher]\nmax_channels = 1\nmax_canvases = 2\n", &["fleet.toml:3 [publisher]: max_canvases and max_channels both set MAX_CHANNELS"]),
        // TOML errors: the line and column, and the message.
        ("[fleet]\nkafka_bootstrap = \n", &["fleet.toml:2:19: string values must be quoted"]),
        ("kafka_bootstrap = \"k\"\n", &["fleet.toml:1:19: invalid type: string \"k\", expected a map"]),
        ("[namespaces.x]\nmodel = \"blob\"\n", &["fleet.toml:2:9: unknown variant `blob`"]),
        ("[default]\nmodel = \"json\"\nmax_bytes = 1\n", &["fleet.toml:3:1: unknown field `max_bytes`"]),
        // All at once.
        (
            "[fleet]\nadmin_token = \"t\"\nnode_id = \"n\"\n[publisher]\nkafka_topicc = 1\n[extra]\n",
            &["fleet.toml:2 [fleet]: admin_token", "fleet.toml:3 [fleet]: node_id", "fleet.toml:5 [publisher]: kafka_topicc", "fleet.toml:6: unknown table [extra]"],
        ),
    ];
    for (text, want) in cases {
        let f = parse(text);
        assert_eq!(f.problems.len(), want.len(), "{text}: {:#?}", f.problems);
        for (p, w) in f.problems.iter().zip(*want) {
            assert!(p.starts_with(w), "{text}: {w:?} in {:#?} (in the file's order)", f.problems);
        }
        assert!(f.problems.iter().all(|p| !p.contains('\n')), "one line each: {:#?}", f.problems);
    }
    // The namespaces' own problems join them, naming the file.
    let f = parse("[namespaces.big]\nmodel = \"latest\"\nmax_data_bytes = 2000000\n[namespaces.c]\nmodel = \"pixels\"\nwidth = 2000\n[fleet]\nnode_id = \"n\"\n");
    let p = f.problems(DIMS);
    assert_eq!(p.len(), 3, "{p:#?}");
    assert!(p[1].starts_with("fleet.toml: [namespaces.big] max_data_bytes 2000000 is outside") && p[2].starts_with("fleet.toml: [namespaces.c] canvas size 2000x64"), "{p:#?}");
    // A file that cannot be read.
    let f = FleetFile::read(Path::new("/nonexistent/fleet.toml"), &reader());
    assert!(f.problems[0].starts_with("/nonexistent/fleet.toml: cannot read the fleet file (--config, FLEET_CONFIG): "), "{:?}", f.problems);
}

#[test]
fn the_environment_wins_over_the_file_and_old_names_still_work() {
    type Env = &'static [(&'static str, &'static str)];
    // (environment before, file, environment after, applied, notes)
    type Case = (Env, &'static str, Env, &'static [&'static str], &'static [&'static str]);
    let cases: &[Case] = &[
        (&[], "[fleet]\nkafka_bootstrap = \"file\"\n", &[("KAFKA_BOOTSTRAP", "file")], &["KAFKA_BOOTSTRAP"], &[]),
        (&[("KAFKA_BOOTSTRAP", "env")], "[fleet]\nkafka_bootstrap = \"file\"\n", &[("KAFKA_BOOTSTRAP", "env")], &[], &[]),
        // Set but empty is set: the environment decides.
        (&[("KAFKA_BOOTSTRAP", "")], "[fleet]\nkafka_bootstrap = \"file\"\n", &[("KAFKA_BOOTSTRAP", "")], &[], &[]),
        // The old name in the environment...
        (&[("MAX_CANVASES", "7")], "", &[("MAX_CANVASES", "7"), ("MAX_CHANNELS", "7")], &[], &["MAX_CANVASES is deprecated: read as MAX_CHANNELS"]),
        // ...loses to the new one, and wins over the file (it is the environment).
        (&[("MAX_CANVASES", "7"), ("MAX_CHANNELS", "9")], "", &[("MAX_CANVASES", "7"), ("MAX_CHANNELS", "9")], &[], &["MAX_CANVASES is ignored: MAX_CHANNELS is set too"]),
        (&[("MAX_CANVASES", "7")], "[publisher]\nmax_channels = 3\n", &[("MAX_CANVASES", "7"), ("MAX_CHANNELS", "7")], &[], &["MAX_CANVASES is deprecated"]),
        // The old name in the file.
        (&[], "[publisher]\nmax_canvases = 3\n", &[("MAX_CHANNELS", "3")], &["MAX_CHANNELS"], &["fleet.toml:2 [publisher]: max_canvases is deprecated: read as max_channels"]),
    ];
    for (before, text, after, applied, notes) in cases {
        let mut env: BTreeMap<String, OsString> = before.iter().map(|(k, v)| ((*k).to_owned(), (*v).into())).collect();
        let mut f = parse(text);
        f.apply(&reader(), &mut env);
        let got: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.to_str().unwrap())).collect();
        assert_eq!(got, *after, "{before:?} {text}");
        assert_eq!(f.applied, *applied, "{before:?} {text}");
        assert_eq!(f.notes.len(), notes.len(), "{:?}", f.notes);
        for (n, want) in f.notes.iter().zip(*notes) {
            assert!(n.starts_with(want), "{n:?} starts with {want:?}");
        }
    }
}

#[test]
fn the_path_comes_from_the_flag_then_the_environment() {
    let os = |v: &[&str]| v.iter().map(OsString::from).collect::<Vec<_>>();
    let cases: &[(&[&str], Option<&str>, Option<&str>)] = &[
        (&[], None, None),
        (&[], Some("env.toml"), Some("env.toml")),
        (&["--config", "a.toml"], Some("env.toml"), Some("a.toml")),
        (&["--topic", "t", "--config=b.toml", "--check-config"], None, Some("b.toml")),
        (&["--config", ""], Some("env.toml"), None),
        (&["--", "--config", "a.toml"], None, None),
        (&[], Some(""), None),
    ];
    for (args, env, want) in cases {
        assert_eq!(path_from(os(args), env.map(OsString::from)), want.map(PathBuf::from), "{args:?} {env:?}");
    }
}

#[test]
fn check_config_shows_the_namespaces_resolved_and_their_fingerprint() {
    let f = parse("[default]\nmodel = \"pixels\"\n[namespaces.scores]\nmodel = \"json\"\n[namespaces.chat]\nmodel = \"stream\"\nmax_data_bytes = 1024\n");
    let text = f.describe(CanvasDims { width: 32, height: 16 });
    let ns = f.namespaces(CanvasDims { width: 32, height: 16 }).unwrap();
    assert!(text.starts_with("FLEET_CONFIG=fleet.toml\n"), "{text}");
    assert!(text.lines().any(|l| l == format!("NAMESPACES_FINGERPRINT={}", ns.fingerprint())), "{text}");
    // The TOML part reads back as the same namespaces, every field set.
    let spec: NamespacesSpec = toml::from_str(&text[text.find("\n[").unwrap()..]).unwrap();
    assert_eq!(spec, ns.to_spec());
    let default = spec.default.as_ref().unwrap();
    assert_eq!((default.width, default.height, default.max_data_bytes), (Some(32), Some(16), Some(crate::namespaces::DEFAULT_MAX_DATA_BYTES)));
    assert_eq!(spec.namespaces["scores"].patch, Some(crate::model::json::PatchKind::Merge));
    assert_eq!(spec.namespaces["chat"].max_data_bytes, Some(1024));
    // Without a file: the pixels default namespace of the binary's size.
    let none = FleetFile::default();
    assert!(none.describe(DIMS).starts_with("FLEET_CONFIG=\n"));
    assert!(none.describe(DIMS).contains(&format!("NAMESPACES_FINGERPRINT={}", Namespaces::pixels_only(DIMS).fingerprint())));
}

/// The variables of [`Cli`]: this process's environment, so only this test sets them.
#[derive(Debug, clap::Parser)]
struct Cli {
    #[arg(long = "config", env = "FLEET_CONFIG")]
    _config: Option<PathBuf>,
    #[arg(long, env = "FLEETCFG_TEST_FLAG", default_value = "default")]
    flag: String,
    #[arg(long, env = "FLEETCFG_TEST_ENV", default_value = "default")]
    env: String,
    #[arg(long, env = "FLEETCFG_TEST_FILE", default_value = "default")]
    file: String,
    #[arg(long, env = "FLEETCFG_TEST_NONE", default_value = "default")]
    none: String,
    #[arg(long, env = "FLEETCFG_TEST_NEW", default_value_t = 1)]
    new: u64,
}

/// The one test that changes the process's environment (its own variables only).
#[test]
fn a_flag_wins_over_the_environment_which_wins_over_the_file_which_wins_over_the_default() {
    const RENAMED: &[Renamed] = &[Renamed { old: "FLEETCFG_TEST_OLD", new: "FLEETCFG_TEST_NEW" }];
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fleet.toml");
    std::fs::write(&path, "[publisher]\nfleetcfg_test_flag = \"file\"\nfleetcfg_test_env = \"file\"\nFLEETCFG_TEST_FILE = \"file\"\n").unwrap();
    std::env::set_var("FLEETCFG_TEST_ENV", "env");
    std::env::set_var("FLEETCFG_TEST_OLD", "5");
    let args = ["cli", "--flag", "flag", "--config"].iter().map(OsString::from).chain([path.clone().into_os_string()]).collect();
    let (cli, file) = load_from::<Cli>(args, "cli", "publisher", RENAMED);
    assert_eq!((cli.flag.as_str(), cli.env.as_str(), cli.file.as_str(), cli.none.as_str()), ("flag", "env", "file", "default"));
    assert_eq!(cli.new, 5, "the old name of a setting still works");
    assert_eq!(file.applied, ["FLEETCFG_TEST_FILE"], "the flag decided FLEETCFG_TEST_FLAG, not the file");
    assert!(file.notes.iter().any(|n| n.starts_with("FLEETCFG_TEST_OLD is deprecated")), "{:?}", file.notes);
    assert!(file.describe(DIMS).contains("# from the file: FLEETCFG_TEST_FILE\n"));
    for v in ["FLEETCFG_TEST_FLAG", "FLEETCFG_TEST_ENV", "FLEETCFG_TEST_FILE", "FLEETCFG_TEST_OLD", "FLEETCFG_TEST_NEW"] {
        std::env::remove_var(v);
    }
}
