//! Slot groups end to end: real agents on a real SQLite store record the group their flags
//! give (`--group`, or `--group-by` a label), store the groups' rules (`--group-limit`,
//! `--groups-in-turn`), and a group's limit holds its second node back while another group's
//! node takes a slot beside the first.

mod common;

use std::process::Command;
use std::time::Duration;

use common::{Host, ROTA};
use rota_core::NodeState;
use rota_e2e::host::touch;
use rota_store::{Store, StoreExt};

#[tokio::test]
async fn a_groups_limit_holds_its_second_node_while_another_group_goes() {
    let a1 = Host::new();
    let a2 = Host::sharing("node-b", &a1);
    let c1 = Host::sharing("node-c", &a1);
    // Each window drains for long enough to see who is out together.
    let common = [
        "--concurrency",
        "3",
        "--group-limit",
        "1",
        "--drain-command",
        "sleep 3",
    ];
    let with = |extra: &[&'static str]| -> Vec<&'static str> {
        common.iter().chain(extra).copied().collect()
    };
    let _agent_a1 = a1.agent(&with(&["--group", "zone-a"]));
    let _agent_a2 = a2.agent(&with(&[
        "--group-by",
        "zone",
        "--node-label",
        "zone=zone-a",
    ]));
    let _agent_c1 = c1.agent(&with(&["--group", "zone-c"]));
    for host in [&a1, &a2, &c1] {
        host.wait_for("registered", |_| true).await;
    }
    for host in [&a1, &a2, &c1] {
        touch(&host.root("run/reboot-needed"));
    }
    let store = a1.store().await;
    let out = |records: &[rota_store::NodeRecord]| {
        records
            .iter()
            .filter(|r| r.slot.is_some())
            .map(|r| r.node.to_string())
            .collect::<Vec<_>>()
    };
    let deadline = tokio::time::Instant::now() + rota_e2e::host::PATIENCE;
    let holders = loop {
        let records = store.nodes().await.expect("nodes");
        let all_asked = records.iter().all(|r| r.state != NodeState::Idle);
        if all_asked && out(&records).len() == 2 {
            break records;
        }
        assert!(tokio::time::Instant::now() < deadline, "{records:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let zone = |node: &str| {
        holders
            .iter()
            .find(|r| r.node.as_str() == node)
            .and_then(|r| r.group.clone())
    };
    assert_eq!(zone("node-a").as_deref(), Some("zone-a"));
    assert_eq!(zone("node-b").as_deref(), Some("zone-a"), "from its label");
    assert_eq!(zone("node-c").as_deref(), Some("zone-c"));
    let together = out(&holders);
    assert!(together.contains(&"node-c".to_string()), "{together:?}");
    // A moment later, still one node of zone-a out, though a slot is free.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let records = store.nodes().await.expect("nodes");
    let zone_a_out = records
        .iter()
        .filter(|r| r.slot.is_some() && r.group.as_deref() == Some("zone-a"))
        .count();
    assert_eq!(zone_a_out, 1, "{records:?}");
    assert_eq!(
        store.settings().await.expect("settings").groups.to_string(),
        "*=1"
    );
    let status = a1.rota_ok(&["status"]);
    assert!(
        status.contains("slot groups: *=1") && status.contains("GROUP"),
        "{status}"
    );
}

/// A group limit above the concurrency, and a `--group-by` label the node does not carry (on
/// bare metal its `--node-label`s are all its labels), stop the agent at start with one line
/// naming the flag, the value and what is allowed.
#[test]
fn bad_group_flags_are_refused_at_start() {
    let cases: [(&[&str], &str); 4] = [
        (
            &["--concurrency", "2", "--group-limit", "3"],
            "--group-limit *=3 is above the concurrency of 2: a group's limit is a whole number \
             from 0 to the concurrency (2)",
        ),
        (
            &[
                "--concurrency",
                "3",
                "--group-limit",
                "1",
                "--group-limit",
                "zone-a=4",
            ],
            "--group-limit zone-a=4 is above the concurrency of 3",
        ),
        (
            &["--group-by", "zone", "--node-label", "rack=r1"],
            "--group-by zone: node node-a carries no label zone (its --node-label labels: rack); \
             give one with --node-label zone=<group>",
        ),
        (
            &["--group-by", "topology.kubernetes.io/zone"],
            "carries no label topology.kubernetes.io/zone (its --node-label labels: none)",
        ),
    ];
    for (flags, refusal) in cases {
        let host = Host::new();
        let output = Command::new(ROTA)
            .args(["agent", "--store", &host.store_url(), "--node", "node-a"])
            .arg("--host-root")
            .arg(host.path("root"))
            .arg("--boot-id-file")
            .arg(host.path("boot_id"))
            .args(flags)
            .output()
            .expect("run");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{flags:?} was accepted");
        let last = stderr.trim().lines().last().unwrap_or_default();
        assert!(last.contains(refusal), "{flags:?}: {stderr}");
        assert!(last.starts_with("error: "), "{flags:?}: {stderr}");
    }
}
