//! What can be checked of the Docker deployment without a Docker engine:
//!
//! - `docker-compose.yml` parses and validates with compose-go, the library `docker compose`
//!   itself uses (`scripts/compose-check`, run with the machine's Go);
//! - every fleet service's command and environment are accepted by that binary's own parser
//!   (`--check-config`), and every variable it is given is one the binary reads (a typo fails);
//! - ports, service names, URLs between services and health-check paths agree with what the
//!   binaries listen on and serve (the paths are requested from the real binaries, started here
//!   with the compose environment on loopback); the health checks are the orchestrators' probes
//!   (`/readyz`, `/livez` for the nodes: see `ports_names_urls_and_dependencies_agree`);
//! - HAProxy's configuration (deploy/haproxy/haproxy.cfg) is valid for the real `haproxy`, lists
//!   every gateway service on its port, checks the gateways' `/readyz`, and is what compose
//!   publishes and mounts;
//! - the Dockerfile builds with the project's own profile and binaries.

use e2e::broker::{free_port, repo_root, Broker, BrokerKind};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;
use std::time::Duration;

const IMAGE: &str = "canvas-fleet:local";

/// The compose project, normalized by compose-go.
fn compose() -> Value {
    let root = repo_root();
    let out = Command::new("go")
        .args(["run", "."])
        .arg(root.join("docker-compose.yml"))
        .current_dir(root.join("scripts/compose-check"))
        .env("ADMIN_TOKEN", COMPOSE_ADMIN_TOKEN)
        .env_remove("HOST_BIND")
        .output()
        .expect("run the machine's Go (scripts/compose-check)");
    assert!(out.status.success(), "docker-compose.yml does not load: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("compose-check prints JSON")
}

/// The `ADMIN_TOKEN` a user of the compose file sets (it has no default).
const COMPOSE_ADMIN_TOKEN: &str = "3f9c2a7e5b1d4c6f8a0e2b4d6f8a1c3e5b7d9f0a2c4e6b8d";

#[test]
fn the_compose_file_has_no_working_default_secret_and_publishes_on_loopback() {
    let root = repo_root();
    // Without ADMIN_TOKEN, compose refuses to start the fleet (no published default to fall to).
    let out = Command::new("go")
        .args(["run", "."])
        .arg(root.join("docker-compose.yml"))
        .current_dir(root.join("scripts/compose-check"))
        .env_remove("ADMIN_TOKEN")
        .output()
        .expect("run the machine's Go (scripts/compose-check)");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("ADMIN_TOKEN"), "compose loads without ADMIN_TOKEN: {err}");
    // Every published port listens on loopback unless HOST_BIND says otherwise.
    let project = compose();
    for (name, svc) in project["services"].as_object().unwrap() {
        for p in svc["ports"].as_array().into_iter().flatten() {
            assert_eq!(p["host_ip"], "127.0.0.1", "{name} publishes {p} beyond loopback by default");
        }
    }
    // And a published demo token is refused by a binary that serves beyond loopback.
    for (binary, args) in [("ws-node", vec!["--check-config", "--node-id", "ws-1"]), ("gateway", vec!["--check-config", "--nodes", "ws-1=http://ws-1:9001"])] {
        let out = Command::new(bin(binary))
            .args(&args)
            .env("LISTEN_ADDR", "0.0.0.0:9001")
            .env("ADMIN_TOKEN", "local-demo-admin-token")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && text.contains("demo value"), "{binary} accepted a demo admin token on 0.0.0.0: {text}");
    }
}

fn bin(name: &str) -> std::path::PathBuf {
    e2e::procs::ensure_binaries().expect("the fleet's binaries");
    e2e::procs::bin_dir().join(name)
}

/// Our services: name → (binary, args, environment).
fn fleet_services(project: &Value) -> BTreeMap<String, (String, Vec<String>, BTreeMap<String, String>)> {
    project["services"]
        .as_object()
        .unwrap()
        .iter()
        .filter(|(_, s)| s["image"] == IMAGE)
        .map(|(name, s)| {
            let command: Vec<String> = s["command"].as_array().unwrap().iter().map(|c| c.as_str().unwrap().to_owned()).collect();
            let env = s["environment"]
                .as_object()
                .map(|e| e.iter().map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned())).collect())
                .unwrap_or_default();
            (name.clone(), (command[0].clone(), command[1..].to_vec(), env))
        })
        .collect()
}

/// The environment variables a binary reads, from its `--help` (`[env: NAME=]`, or `[env: NAME]`
/// for a secret whose value help does not show).
fn env_vars_read_by(binary: &str) -> BTreeSet<String> {
    let out = Command::new(bin(binary)).arg("--help").output().expect("--help");
    let help = String::from_utf8_lossy(&out.stdout);
    let mut vars: BTreeSet<String> =
        help.split("[env: ").skip(1).filter_map(|s| s.split(['=', ']']).next()).map(str::to_owned).collect();
    // Read by the logging set-up of every binary (shared::telemetry).
    vars.extend(["RUST_LOG".to_owned(), "NO_COLOR".to_owned(), "LOG_FORMAT".to_owned()]);
    vars
}

fn port_of(addr: &str) -> u16 {
    addr.rsplit(':').next().and_then(|p| p.parse().ok()).unwrap_or_else(|| panic!("no port in {addr:?}"))
}

/// `http://host:port/path` → (host, port, path).
fn split_url(url: &str) -> (String, u16, String) {
    let rest = url.strip_prefix("http://").unwrap_or_else(|| panic!("{url} is not http://"));
    let (hostport, path) = rest.split_once('/').map_or((rest, String::new()), |(h, p)| (h, format!("/{p}")));
    let (host, port) = hostport.split_once(':').unwrap_or_else(|| panic!("{url} names no port"));
    (host.to_owned(), port.parse().unwrap(), path)
}

#[test]
fn every_service_configuration_is_accepted_by_its_binary() {
    let _turn = crate::one_at_a_time();
    let project = compose();
    let services = fleet_services(&project);
    assert_eq!(
        services.keys().map(String::as_str).collect::<Vec<_>>(),
        ["core-publisher", "gateway", "gateway-2", "load", "ws-1", "ws-2"],
        "the fleet's services"
    );
    for (name, (binary, args, env)) in &services {
        let known = env_vars_read_by(binary);
        for var in env.keys() {
            assert!(known.contains(var), "service {name}: {binary} does not read {var} (a typo?); it reads {known:?}");
        }
        let out = Command::new(bin(binary))
            .args(args)
            .arg("--check-config")
            .env_clear()
            .envs(env)
            .output()
            .expect("run --check-config");
        assert!(
            out.status.success(),
            "service {name}: {binary} refuses its compose configuration: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn a_typo_in_a_variable_name_is_caught() {
    let _turn = crate::one_at_a_time();
    // The check above must be able to fail: a misspelt variable is not among those read.
    let known = env_vars_read_by("ws-node");
    assert!(known.contains("KAFKA_BOOTSTRAP") && known.contains("NODE_ID"));
    assert!(!known.contains("KAFKA_BOOTSTRAPP"));
    // And a bad value is refused by the parser.
    let out = Command::new(bin("ws-node"))
        .arg("--check-config")
        .env_clear()
        .envs([("NODE_ID", "ws-1"), ("KAFKA_HEARTBEAT_INTERVAL_MS", "9000")])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn ports_names_urls_and_dependencies_agree() {
    let _turn = crate::one_at_a_time();
    let project = compose();
    let services = fleet_services(&project);
    let listen = |name: &str| port_of(&services[name].2["LISTEN_ADDR"]);
    let svc = |name: &str| &project["services"][name];

    let gateways: Vec<&String> = services.iter().filter(|(_, s)| s.0 == "gateway").map(|(n, _)| n).collect();
    assert_eq!(gateways.len(), 2, "two gateway replicas");
    let ws_services: Vec<&String> = services.iter().filter(|(_, s)| s.0 == "ws-node").map(|(n, _)| n).collect();
    // Clients come in through HAProxy: it is the one published port, and its configuration
    // binds that port and balances over every gateway, by service name and LISTEN_ADDR port.
    let haproxy = svc("haproxy");
    assert!(haproxy["image"].as_str().unwrap().starts_with("haproxy:"), "the official image: {}", haproxy["image"]);
    let mounts = haproxy["volumes"].as_array().expect("haproxy mounts its configuration");
    assert!(
        mounts.iter().any(|m| m["source"].as_str().is_some_and(|s| s.ends_with("deploy/haproxy/haproxy.cfg"))
            && m["target"] == "/usr/local/etc/haproxy/haproxy.cfg"),
        "haproxy mounts deploy/haproxy/haproxy.cfg where the official image reads it: {mounts:?}"
    );
    let cfg = e2e::haproxy::deploy_config();
    let bound: Vec<u16> = cfg.lines().filter_map(|l| l.trim().strip_prefix("bind ")).map(port_of).collect();
    let published: Vec<u64> = haproxy["ports"].as_array().expect("haproxy is published").iter().filter_map(|p| p["target"].as_u64()).collect();
    assert_eq!(published.iter().map(|&p| p as u16).collect::<Vec<_>>(), bound, "haproxy publishes the port it binds");
    let servers: BTreeMap<String, String> = cfg
        .lines()
        .filter_map(|l| l.trim().strip_prefix("server "))
        .map(|l| {
            let mut words = l.split_whitespace();
            (words.next().unwrap().to_owned(), words.next().expect("a server address").to_owned())
        })
        .collect();
    assert_eq!(servers.keys().collect::<Vec<_>>(), gateways, "haproxy balances over every gateway");
    // A request's headers have a deadline (a slowloris holds no connection), and HAProxy adds the
    // client's address to X-Forwarded-For from its fixed address, which every gateway trusts.
    let directive = |d: &str| cfg.lines().map(str::trim).any(|l| l == d || l.starts_with(&format!("{d} ")));
    assert!(directive("timeout http-request"), "haproxy bounds a request's headers in time");
    assert!(directive("option forwardfor"), "haproxy adds X-Forwarded-For");
    let haproxy_ip = haproxy["networks"]["default"]["ipv4_address"].as_str().expect("haproxy has a fixed address on the compose network");
    for gw in &gateways {
        let trusted = services[gw.as_str()].2.get("TRUSTED_PROXIES").cloned().unwrap_or_default();
        assert!(trusted.split(',').any(|t| t.trim() == haproxy_ip), "{gw} trusts haproxy ({haproxy_ip}) in TRUSTED_PROXIES: {trusted:?}");
    }
    for gw in &gateways {
        assert_eq!(servers[gw.as_str()], format!("{gw}:{}", listen(gw)), "haproxy reaches {gw} by its service name and port");
        assert!(svc(gw)["ports"].is_null(), "{gw} is reached through haproxy, not published");
        assert!(svc("haproxy")["depends_on"][gw.as_str()].is_object(), "haproxy starts after {gw}");
        let env = &services[gw.as_str()].2;
        assert_eq!(env.get("GATEWAY_ID").map(String::as_str), Some(gw.as_str()), "{gw}'s GATEWAY_ID");
        assert!(env.contains_key("KAFKA_BOOTSTRAP"), "{gw} elects its leader through Kafka");
        for ws in &ws_services {
            assert_eq!(
                env.get("CONTROL_TOPIC").map_or(shared::control::DEFAULT_CONTROL_TOPIC, String::as_str),
                services[ws.as_str()].2.get("CONTROL_TOPIC").map_or(shared::control::DEFAULT_CONTROL_TOPIC, String::as_str),
                "{gw} and {ws} use the same control topic (the node checks the leader's fencing token there)"
            );
        }
    }
    // The real haproxy accepts the file (scripts/setup-haproxy.sh installs Debian's).
    let check = Command::new(e2e::haproxy::binary().expect("haproxy installed by scripts/setup-haproxy.sh"))
        .args(["-c", "-f"])
        .arg(repo_root().join("deploy/haproxy/haproxy.cfg"))
        .output()
        .unwrap();
    assert!(check.status.success(), "haproxy refuses deploy/haproxy/haproxy.cfg: {}", String::from_utf8_lossy(&check.stderr));

    // NODES names ws-node services by their service name, NODE_ID and port, the same on every gateway.
    for gw in &gateways {
        let nodes = &services[gw.as_str()].2["NODES"];
        let mut named = Vec::new();
        for entry in nodes.split(',') {
            let (id, url) = entry.split_once('=').unwrap();
            let (host, port, _) = split_url(url);
            let (binary, _, env) = services.get(id).unwrap_or_else(|| panic!("{gw}'s NODES names {id}, which is not a service"));
            assert_eq!(binary, "ws-node", "{id} runs ws-node");
            assert_eq!(env["NODE_ID"], id, "{id}'s NODE_ID");
            assert_eq!(host, id, "NODES reaches {id} by its service name");
            assert_eq!(port, listen(id), "NODES port of {id}");
            named.push(id.to_owned());
        }
        assert_eq!(named.len(), ws_services.len(), "every ws-node service is in {gw}'s NODES");
    }
    // The publisher's URL, for the gateway and the load.
    for user in ["gateway", "gateway-2", "load"] {
        let (host, port, _) = split_url(&services[user].2["PUBLISHER_URL"]);
        assert_eq!((host.as_str(), port), ("core-publisher", listen("core-publisher")), "{user}'s PUBLISHER_URL");
    }
    // Kafka: the bootstrap address is the broker's advertised listener.
    let advertised = svc("kafka")["environment"]["KAFKA_ADVERTISED_LISTENERS"].as_str().unwrap();
    for (name, (_, _, env)) in &services {
        if let Some(b) = env.get("KAFKA_BOOTSTRAP") {
            assert!(advertised.contains(&format!("://{b}")), "{name}'s KAFKA_BOOTSTRAP {b} is not advertised ({advertised})");
        }
    }
    // Start-up order: kafka → publisher (topic created) → nodes → gateway → load, on health.
    let healthy = |name: &str, on: &str| svc(name)["depends_on"][on]["condition"] == "service_healthy";
    assert!(healthy("core-publisher", "kafka"));
    for ws in &ws_services {
        assert!(healthy(ws, "core-publisher"), "{ws} waits for the publisher");
        for gw in &gateways {
            assert!(healthy(gw, ws), "{gw} waits for {ws}");
        }
        let restart = svc(ws)["restart"].as_str().unwrap_or("no");
        assert_eq!(restart, "no", "{ws} is not restarted automatically (a killed node stays down)");
    }
    assert!(healthy("load", "gateway"));
    // Every service has a health check on its own port, and it is one of the orchestrators'
    // probes: /readyz where "healthy" must mean "serves" (the publisher accepts writes, a gateway
    // routes), /livez for the nodes, which serve only after the gateway that waits for them has
    // sent start-recovery (their /readyz would hold the start-up for ever).
    for name in services.keys() {
        if name == "load" {
            continue;
        }
        let test: Vec<&str> = svc(name)["healthcheck"]["test"].as_array().unwrap().iter().map(|t| t.as_str().unwrap()).collect();
        let url = test.iter().find(|t| t.starts_with("http://")).unwrap_or_else(|| panic!("{name}'s health check has no URL"));
        let (host, port, path) = split_url(url);
        assert_eq!((host.as_str(), port), ("localhost", listen(name)), "{name}'s health check targets its own port");
        let probe = if ws_services.contains(&name) { shared::probe::LIVEZ } else { shared::probe::READYZ };
        assert_eq!(path, probe, "{name}'s health check is the {probe} probe");
    }
    // HAProxy takes a gateway out of rotation on its readiness probe.
    assert_eq!(haproxy_check_path(&cfg), shared::probe::READYZ, "haproxy checks each gateway's readiness probe");
}

/// The path of `option httpchk GET <path>` in an HAProxy configuration.
fn haproxy_check_path(cfg: &str) -> String {
    let line = cfg.lines().map(str::trim).find(|l| l.starts_with("option httpchk")).expect("haproxy checks the gateways over HTTP");
    let words: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(words.get(2), Some(&"GET"), "{line}");
    words.get(3).expect("a path").to_string()
}

/// The health-check paths are served: each binary, started here with its compose environment
/// (addresses moved to loopback), answers its health check with 200.
#[test]
fn health_check_paths_are_served_by_the_binaries() {
    let _turn = crate::one_at_a_time();
    let project = compose();
    let services = fleet_services(&project);
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let broker = Broker::start(BrokerKind::Embedded).await.unwrap();
        // The mock cluster does not take CreateTopics: the topic is made before the publisher starts.
        let topic = format!("deploy-check-{}", std::process::id());
        broker.precreate_topic(&topic, 6).unwrap();
        let control_topic = format!("deploy-check-control-{}", std::process::id());
        broker.precreate_one_topic(&control_topic, 1).unwrap();
        let http = reqwest::Client::new();
        let mut children = Vec::new();
        let mut local_port = BTreeMap::new();
        for name in services.keys() {
            local_port.insert(name.clone(), free_port().unwrap());
        }
        for (name, (binary, args, env)) in &services {
            if name == "load" {
                continue;
            }
            let mut env = env.clone();
            env.insert("LISTEN_ADDR".into(), format!("127.0.0.1:{}", local_port[name]));
            if env.contains_key("KAFKA_BOOTSTRAP") {
                env.insert("KAFKA_BOOTSTRAP".into(), broker.bootstrap.clone());
                if binary != "gateway" {
                    env.insert("KAFKA_TOPIC".into(), topic.clone());
                }
                env.insert("CONTROL_TOPIC".into(), control_topic.clone());
            }
            if let Some(nodes) = env.get("NODES").cloned() {
                let local: Vec<String> = nodes
                    .split(',')
                    .map(|e| {
                        let id = e.split_once('=').unwrap().0;
                        format!("{id}=http://127.0.0.1:{}", local_port[id])
                    })
                    .collect();
                env.insert("NODES".into(), local.join(","));
                env.insert("PUBLISHER_URL".into(), format!("http://127.0.0.1:{}", local_port["core-publisher"]));
            }
            let mut cmd = tokio::process::Command::new(bin(binary));
            cmd.args(args).env_clear().envs(&env).kill_on_drop(true).stdout(std::process::Stdio::null()).stderr(std::process::Stdio::null());
            e2e::procs::die_with_parent(cmd.as_std_mut());
            children.push(cmd.spawn().unwrap());
        }
        for (name, _) in services.iter().filter(|(n, _)| n.as_str() != "load") {
            let test: Vec<String> = project["services"][name]["healthcheck"]["test"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| t.as_str().unwrap().to_owned())
                .collect();
            let (_, _, path) = split_url(test.iter().find(|t| t.starts_with("http://")).unwrap());
            // The gateways also answer HAProxy's check path.
            let mut paths = vec![path];
            if services[name].0 == "gateway" {
                paths.push(haproxy_check_path(&e2e::haproxy::deploy_config()));
            }
            for path in paths {
                let url = format!("http://127.0.0.1:{}{path}", local_port[name]);
                let status = e2e::procs::eventually(&format!("{name} to answer {path} with 200"), Duration::from_secs(60), || {
                    let (http, url) = (http.clone(), url.clone());
                    async move {
                        match http.get(&url).send().await {
                            Ok(r) if r.status().is_success() => Ok(Some(r.status().as_u16())),
                            Ok(r) => Err(format!("{}", r.status())),
                            Err(e) => Err(e.to_string()),
                        }
                    }
                })
                .await
                .unwrap();
                assert_eq!(status, 200, "{name} {path}");
            }
        }
        drop(children);
    });
}

/// `LOG_FORMAT=json`: every line a service writes is one JSON object with the text line's fields;
/// an unknown format is refused at startup.
#[test]
fn json_logs_are_one_object_per_line_with_the_fields_of_the_text_lines() {
    let _turn = crate::one_at_a_time();
    use std::io::{BufRead, BufReader};
    let port = free_port().unwrap();
    // No broker is needed for the node's first line (UP, not ready); it is stopped after it.
    let mut child = Command::new(bin("ws-node"))
        .env_clear()
        .envs([("LOG_FORMAT", "json"), ("NODE_ID", "ws-json"), ("KAFKA_BOOTSTRAP", "127.0.0.1:1")])
        .env("LISTEN_ADDR", format!("127.0.0.1:{port}"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stderr.take().unwrap()).read_line(&mut line).unwrap();
    let _ = child.kill();
    let _ = child.wait();
    let v: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("not a JSON line ({e}): {line}"));
    assert_eq!(v["level"], "INFO", "{line}");
    assert_eq!(v["target"], "ws_node", "{line}");
    assert!(v["timestamp"].as_str().is_some_and(|t| t.ends_with('Z')), "{line}");
    assert_eq!(v["fields"]["node"], "ws-json", "the text line's fields are fields here too: {line}");
    assert_eq!(v["fields"]["addr"], format!("127.0.0.1:{port}"), "{line}");
    assert!(v["fields"]["message"].as_str().unwrap().starts_with("[NODE] ws-json is UP"), "{line}");

    let out = Command::new(bin("gateway")).env_clear().envs([("LOG_FORMAT", "logfmt"), ("NODES", "ws-1=http://127.0.0.1:1")]).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "an unknown LOG_FORMAT is a configuration error");
    assert!(String::from_utf8_lossy(&out.stderr).contains("LOG_FORMAT"), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn the_dockerfile_builds_the_project_release_binaries() {
    let _turn = crate::one_at_a_time();
    let root = repo_root();
    let dockerfile = std::fs::read_to_string(root.join("Dockerfile")).unwrap();
    let test_sh = std::fs::read_to_string(root.join("scripts/test.sh")).unwrap();
    let build = dockerfile
        .lines()
        .map(str::trim)
        .find(|l| l.starts_with("cargo build"))
        .expect("the Dockerfile runs cargo build");
    // The same profile as the test command's build.
    assert!(build.contains("--release") && test_sh.contains("cargo build --release"), "both build --release: {build}");
    assert!(build.contains("--locked"), "the image builds from Cargo.lock: {build}");
    // Every binary a compose service runs is built and copied into the runtime image.
    let project = compose();
    let runs: BTreeSet<String> = fleet_services(&project).values().map(|s| s.0.clone()).collect();
    let metadata = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args(["metadata", "--format-version", "1", "--no-deps", "--manifest-path"])
        .arg(root.join("Cargo.toml"))
        .output()
        .unwrap();
    let metadata: Value = serde_json::from_slice(&metadata.stdout).unwrap();
    for binary in &runs {
        let package = metadata["packages"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["targets"].as_array().unwrap().iter().any(|t| t["name"] == binary.as_str() && t["kind"][0] == "bin"))
            .unwrap_or_else(|| panic!("no package builds the binary {binary}"));
        let pkg = package["name"].as_str().unwrap();
        assert!(build.contains(&format!("-p {pkg}")), "the Dockerfile builds package {pkg} (for {binary}): {build}");
        assert!(dockerfile.contains(&format!("target/release/{binary}")), "the Dockerfile copies {binary} into the image");
    }
    // The toolchain is new enough for the workspace.
    let rust_version = dockerfile.lines().find_map(|l| l.strip_prefix("ARG RUST_VERSION=")).expect("ARG RUST_VERSION");
    let want = metadata["packages"][0]["rust_version"].as_str().unwrap_or("1.85");
    let minor = |v: &str| v.split('.').nth(1).and_then(|m| m.parse::<u32>().ok()).unwrap();
    assert!(minor(rust_version) >= minor(want), "Dockerfile Rust {rust_version} < workspace {want}");
    // Health checks call curl: the runtime image has it, and runs as a non-root user.
    let runtime = dockerfile.split("AS runtime").nth(1).expect("a runtime stage");
    assert!(runtime.contains("curl"), "the runtime image installs curl for the health checks");
    assert!(runtime.contains("USER fleet"), "the runtime image runs as a non-root user");
}
