//! A replica's default name is its own: two gateway processes on the same port (two hosts, or two
//! containers of one image) must not share a `GATEWAY_ID`, or a follower takes the leader's
//! decisions for its own and skips them.

use std::process::Command;

/// The `GATEWAY_ID` a gateway process started with `--check-config` (and no `GATEWAY_ID`) prints.
fn default_id() -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_gateway"))
        .args(["--check-config", "--listen", "0.0.0.0:8080", "--nodes", "ws-1=http://127.0.0.1:9001"])
        .env_remove("GATEWAY_ID")
        .env("ADMIN_TOKEN", "a-test-admin-token-that-is-long-enough")
        .output()
        .expect("run the gateway");
    let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "--check-config failed: {text}");
    text.lines().find_map(|l| l.strip_prefix("GATEWAY_ID=")).unwrap_or_else(|| panic!("no GATEWAY_ID line in {text}")).to_owned()
}

#[test]
fn two_processes_on_one_port_get_different_default_names() {
    let (a, b) = (default_id(), default_id());
    assert_ne!(a, b, "two replicas on port 8080 share the default name");
    assert!(a.starts_with("gateway-") && a.contains("-8080-"), "{a}");
}
