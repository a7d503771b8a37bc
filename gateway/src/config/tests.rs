use super::*;

#[test]
fn nodes_parse_and_errors_name_the_entry() {
    let n = parse_nodes("ws-1=http://127.0.0.1:8081/, ws-2=http://h:2").unwrap().0;
    assert_eq!(n[0], NodeAddr { id: "ws-1".into(), url: "http://127.0.0.1:8081".into() });
    assert_eq!(n[1].id, "ws-2");
    for (raw, needle) in [
        ("ws-1", "not id=url"),
        ("=http://h:1", "empty id"),
        ("ws-1=ftp://h", "must start with http"),
        ("ws-1=http://a:1,ws-1=http://b:2", "twice"),
        ("", "no nodes"),
    ] {
        let e = parse_nodes(raw).unwrap_err();
        assert!(e.contains(needle), "{raw}: {e}");
    }
}

fn config(publishers: &str) -> Config {
    Config::try_parse_from(["gateway", "--nodes", "ws-1=http://h:1", "--publisher-url", publishers]).unwrap()
}

#[test]
fn publishers_parse_as_a_list_and_every_problem_is_reported() {
    assert_eq!(config("http://a:1").publisher_url.0, ["http://a:1"]);
    let c = config(" http://a:1/, ,https://b:2 ");
    assert_eq!(c.publisher_url.0, ["http://a:1", "https://b:2"]);
    assert!(c.problems().is_empty(), "{:?}", c.problems());
    assert!(c.describe().lines().any(|l| l == "PUBLISHER_URL=http://a:1,https://b:2"), "{}", c.describe());
    let p = config("ftp://a,http://b:1,http://,http://b:1").problems();
    assert_eq!(p.len(), 3, "{p:?}");
    assert!(p[0].contains("\"ftp://a\" must start with http"), "{p:?}");
    assert!(p[1].contains("\"http://\""), "{p:?}");
    assert!(p[2].contains("http://b:1 twice"), "{p:?}");
    assert!(config(",").problems()[0].contains("names no publisher"));
}

#[test]
fn admin_urls_name_configured_nodes_and_the_admin_listener_is_loopback() {
    let c = Config::try_parse_from([
        "gateway",
        "--nodes",
        "ws-1=http://h:1,ws-2=http://h:2",
        "--node-admin-urls",
        "ws-2=http://127.0.0.1:9082",
    ])
    .unwrap();
    assert!(c.problems().is_empty(), "{:?}", c.problems());
    assert_eq!(c.admin_url_of(&c.nodes.0[0]), "http://h:1");
    assert_eq!(c.admin_url_of(&c.nodes.0[1]), "http://127.0.0.1:9082");
    let c = Config::try_parse_from(["gateway", "--nodes", "ws-1=http://h:1", "--node-admin-urls", "ws-9=http://x:1", "--admin-listen", "0.0.0.0:9000"])
        .unwrap();
    let p = c.problems();
    assert_eq!(p.len(), 2, "{p:?}");
    assert!(p[0].contains("ws-9") && p[1].contains("ADMIN_LISTEN_ADDR"), "{p:?}");
    let c = Config::try_parse_from(["gateway", "--nodes", "ws-1=http://h:1", "--admin-token", "t", "--admin-listen", "0.0.0.0:9000"]).unwrap();
    assert!(c.problems().is_empty(), "{:?}", c.problems());
    assert!(c.describe().lines().any(|l| l == "ADMIN_TOKEN=<set>"));
}

#[test]
fn publisher_admin_urls_are_one_per_publisher_in_order() {
    let parse = |args: &[&str]| {
        let mut all = vec!["gateway", "--nodes", "ws-1=http://h:1", "--publisher-url", "http://a:1,http://b:2"];
        all.extend_from_slice(args);
        Config::try_parse_from(all).unwrap()
    };
    let c = parse(&[]);
    assert!(c.problems().is_empty(), "{:?}", c.problems());
    assert_eq!((c.publisher_admin_url(0), c.publisher_admin_url(1), c.publisher_admin_url(2)), (Some("http://a:1"), Some("http://b:2"), None));
    assert!(c.describe().lines().any(|l| l == "PUBLISHER_ADMIN_URLS="), "{}", c.describe());
    let c = parse(&["--publisher-admin-urls", ""]);
    assert!(c.problems().is_empty(), "{:?}", c.problems());
    assert_eq!(c.publisher_admin_url(1), Some("http://b:2"), "empty: each publisher's own URL");
    let c = parse(&["--publisher-admin-urls", "http://127.0.0.1:9080/, http://127.0.0.1:9081"]);
    assert!(c.problems().is_empty(), "{:?}", c.problems());
    assert_eq!((c.publisher_admin_url(0), c.publisher_admin_url(1)), (Some("http://127.0.0.1:9080"), Some("http://127.0.0.1:9081")));
    assert!(c.describe().lines().any(|l| l == "PUBLISHER_ADMIN_URLS=http://127.0.0.1:9080,http://127.0.0.1:9081"), "{}", c.describe());
    let p = parse(&["--publisher-admin-urls", "http://127.0.0.1:9080"]).problems();
    assert_eq!(p.len(), 1, "{p:?}");
    assert!(p[0].contains("one URL per PUBLISHER_URL entry, in the same order (it lists 1, PUBLISHER_URL 2)"), "{p:?}");
    let p = parse(&["--publisher-admin-urls", "ftp://x,http://"]).problems();
    assert_eq!(p.len(), 2, "{p:?}");
    assert!(p[0].contains("\"ftp://x\" must start with http") && p[1].contains("\"http://\""), "{p:?}");
}

#[test]
fn the_hold_down_settings_are_checked_and_listed() {
    let c = Config::try_parse_from(["gateway", "--nodes", "ws-1=http://h:1"]).unwrap();
    assert_eq!((c.hold_down_base_ms, c.hold_down_max_ms, c.hold_down_window_ms), (60_000, 600_000, 1_800_000));
    assert!(c.describe().lines().any(|l| l == "HOLD_DOWN_BASE_MS=60000"), "{}", c.describe());
    assert!(c.describe().lines().any(|l| l == "HOLD_DOWN_MAX_MS=600000"));
    assert!(c.describe().lines().any(|l| l == "HOLD_DOWN_WINDOW_MS=1800000"));
    let c = Config::try_parse_from(["gateway", "--nodes", "ws-1=http://h:1", "--hold-down-base-ms", "5000", "--hold-down-max-ms", "4000"]).unwrap();
    assert!(c.problems().iter().any(|p| p.contains("HOLD_DOWN_MAX_MS (4000) must not be below HOLD_DOWN_BASE_MS (5000)")), "{:?}", c.problems());
    assert!(Config::try_parse_from(["gateway", "--nodes", "ws-1=http://h:1", "--hold-down-base-ms", "-1"]).is_err());
}

#[test]
fn the_fleet_file_sets_the_namespaces_and_joins_the_problems() {
    use clap::CommandFactory;
    let reader = shared::fleet_config::Reader::new("gateway", "gateway", &Config::command(), &[]);
    let file = |text: &str| FleetFile::parse(text, std::path::Path::new("fleet.toml"), &reader);
    let mut c = Config::try_parse_from(["gateway", "--nodes", "ws-1=http://h:1", "--canvas-width", "32"]).unwrap();
    assert!(c.describe().lines().any(|l| l == "CANVAS_WIDTH=32") && c.describe().lines().any(|l| l == "CANVAS_HEIGHT=64"), "{}", c.describe());
    assert_eq!(c.namespaces().fingerprint(), Namespaces::pixels_only(CanvasDims { width: 32, height: 64 }).fingerprint(), "without a file");
    c.fleet = file("[namespaces.chat]\nmodel = \"stream\"\n[gateway]\nup_threshold = 3\n[node]\nnode_id = \"ws-1\"\n");
    assert!(c.problems().is_empty(), "{:?}", c.problems());
    assert_eq!(c.fleet.settings["UP_THRESHOLD"].value, "3");
    assert!(c.describe().lines().any(|l| l == format!("NAMESPACES_FINGERPRINT={}", c.namespaces().fingerprint())), "{}", c.describe());
    c.fleet = file("[namespaces.chat]\nmodel = \"chat\"\n[gateway]\nnode_id = \"ws-1\"\n");
    let p = c.problems();
    assert_eq!(p.len(), 2, "{p:?}");
    assert!(p[0].starts_with("fleet.toml:2:9: unknown variant `chat`") && p[1].starts_with("fleet.toml:4 [gateway]: node_id is not a setting of gateway"), "{p:?}");
}
