//! [`CommandActions`], the node actions of a standalone host, with real `sh -c` commands: what
//! a missing command does, what a failing one's error says, and what each command sees.

use rota_actions::{ActionError, CommandActions, NodeActions};
use rota_core::NodeName;

fn node() -> NodeName {
    NodeName::new("node-7".to_string()).expect("a node name")
}

fn actions() -> CommandActions {
    CommandActions {
        node: Some(node()),
        ..CommandActions::default()
    }
}

async fn rebooted(actions: &CommandActions) -> Result<(), ActionError> {
    let handle = actions.reboot().await.expect("the reboot starts");
    handle.await.expect("the reboot's handle resolves")
}

#[tokio::test]
async fn a_missing_command_has_nothing_to_do_and_succeeds() {
    let actions = actions();
    assert!(!actions.is_cordoned().await.expect("the cordon is read"));
    actions.drain().await.expect("no drain command");
    actions.uncordon().await.expect("no uncordon command");
    actions.health().await.expect("no health command");
    assert!(actions.labels().await.expect("the labels").is_empty());
    actions.mark_pending(true).await.expect("nothing to mark");
}

#[tokio::test]
async fn a_failing_command_names_itself_its_exit_status_and_its_stderr() {
    let script = "echo on-stdout; echo first >&2; echo last-words >&2; exit 3";
    let actions = CommandActions {
        drain: Some(script.into()),
        ..actions()
    };
    let error = actions.drain().await.expect_err("the drain command fails");
    assert_eq!(error.action, "drain");
    assert_eq!(
        error.detail,
        format!("`{script}` exited with exit status: 3: first\nlast-words")
    );
    assert_eq!(
        error.to_string(),
        format!("drain failed: `{script}` exited with exit status: 3: first\nlast-words")
    );
}

#[tokio::test]
async fn a_failing_command_without_stderr_names_only_its_exit_status() {
    let actions = CommandActions {
        uncordon: Some("exit 2".into()),
        ..actions()
    };
    let error = actions.uncordon().await.expect_err("the uncordon fails");
    assert_eq!(error.action, "uncordon");
    assert_eq!(error.detail, "`exit 2` exited with exit status: 2");
}

#[tokio::test]
async fn a_long_stderr_is_cut_to_its_tail() {
    let script = "echo HEAD >&2; head -c 5000 /dev/zero | tr '\\0' x >&2; echo END >&2; exit 1";
    let actions = CommandActions {
        drain: Some(script.into()),
        ..actions()
    };
    let error = actions.drain().await.expect_err("the drain command fails");
    let (_, stderr) = error
        .detail
        .split_once("exit status: 1: ")
        .expect("the exit status, then stderr");
    assert!(stderr.starts_with('…'), "{stderr}");
    assert!(stderr.ends_with("xxxxEND"), "{stderr}");
    assert!(!stderr.contains("HEAD"), "{stderr}");
    assert_eq!(stderr.chars().count(), 1 + 2001, "{stderr}");
}

#[tokio::test]
async fn every_command_sees_rota_node() {
    let check = r#"test "$ROTA_NODE" = node-7"#;
    let actions = CommandActions {
        node: Some(node()),
        drain: Some(check.into()),
        uncordon: Some(check.into()),
        reboot: Some(check.into()),
        health: Some(check.into()),
    };
    actions.drain().await.expect("the drain sees ROTA_NODE");
    actions
        .uncordon()
        .await
        .expect("the uncordon sees ROTA_NODE");
    actions
        .health()
        .await
        .expect("the health check sees ROTA_NODE");
    rebooted(&actions).await.expect("the reboot sees ROTA_NODE");

    let other = CommandActions {
        node: Some(NodeName::new("node-8".to_string()).expect("a node name")),
        ..actions
    };
    other.drain().await.expect_err("another node's ROTA_NODE");
}

#[tokio::test]
async fn a_reboot_without_a_command_resolves_its_handle_with_an_error() {
    let error = rebooted(&actions())
        .await
        .expect_err("no reboot command is configured");
    assert_eq!(error.action, "reboot");
    assert_eq!(error.detail, "no reboot command is configured");
}

#[tokio::test]
async fn a_reboot_command_that_fails_resolves_its_handle_with_an_error() {
    let actions = CommandActions {
        reboot: Some("exit 4".into()),
        ..actions()
    };
    let error = rebooted(&actions)
        .await
        .expect_err("the reboot command fails");
    assert_eq!(error.action, "reboot");
    assert_eq!(error.detail, "`exit 4` exited with exit status: 4");

    let actions = CommandActions {
        reboot: Some("true".into()),
        ..actions
    };
    rebooted(&actions)
        .await
        .expect("the reboot command succeeds");
}

#[tokio::test]
async fn the_health_command_decides_the_health_check() {
    let healthy = CommandActions {
        health: Some("true".into()),
        ..actions()
    };
    healthy.health().await.expect("healthy");
    let unhealthy = CommandActions {
        health: Some("echo degraded >&2; false".into()),
        ..actions()
    };
    let error = unhealthy.health().await.expect_err("unhealthy");
    assert_eq!(error.action, "health check");
    assert_eq!(
        error.detail,
        "`echo degraded >&2; false` exited with exit status: 1: degraded"
    );
}
