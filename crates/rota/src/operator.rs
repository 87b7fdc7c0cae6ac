//! The operator's interventions: `rota unlock`, `retry`, `request`, `cancel`, `pause` and
//! `resume`, each recorded in the audit trail once it is done.

use anyhow::Result;
use rota_store::{NodeRecord, OperatorCommand, StoreExt};

use crate::audit::Operator;
use crate::cli::{PauseArgs, RequestArgs, ResumeArgs, RetryArgs, UnlockArgs};
use crate::output;

/// What `unlock` did, from the node before and after.
pub fn describe_unlock(before: Option<&NodeRecord>, after: &NodeRecord) -> String {
    let node = &after.node;
    let was = before.map_or_else(String::new, |b| format!(" (was {})", b.state));
    let slot = match before.and_then(|b| b.slot) {
        Some(slot) => format!("slot {slot} released"),
        None => "slot released".to_owned(),
    };
    let mut text = format!(
        "unlocked {node}{was}: {slot}, now {}; reason recorded in history\n",
        after.state
    );
    if after.cordoned_by_rota {
        text.push_str(&format!(
            "{node} stays cordoned until its agent uncordons it\n"
        ));
    }
    text
}

/// What `retry` did.
pub fn describe_retry(after: &NodeRecord) -> String {
    let slot = match after.slot {
        Some(slot) => format!("keeps slot {slot}"),
        None => "holds no slot".to_owned(),
    };
    format!(
        "retrying {}: now {}, {slot}; its agent resumes the window's work\n",
        after.node, after.state
    )
}

pub async fn unlock(args: UnlockArgs) -> Result<()> {
    let operator = Operator::open(&args.store).await?;
    let before = operator.store.node(&args.node).await?;
    let after = operator.store.unlock(&args.node, &args.reason).await?;
    let process = before.as_ref().and_then(|b| b.process.as_ref());
    operator
        .record(
            OperatorCommand::Unlock,
            Some(&args.node),
            process,
            Some(&args.reason),
        )
        .await?;
    output::emit(&describe_unlock(before.as_ref(), &after))
}

pub async fn retry(args: RetryArgs) -> Result<()> {
    let operator = Operator::open(&args.store).await?;
    let after = operator.store.retry(&args.node).await?;
    operator
        .record(
            OperatorCommand::Retry,
            Some(&args.node),
            after.process.as_ref(),
            args.reason.as_deref(),
        )
        .await?;
    output::emit(&describe_retry(&after))
}

pub async fn request(args: RequestArgs) -> Result<()> {
    let process = args.process()?;
    let operator = Operator::open(&args.store).await?;
    let (request, created) = operator
        .store
        .request(&args.node, &process, "operator")
        .await?;
    let text = if created {
        operator
            .record(
                OperatorCommand::Request,
                Some(&args.node),
                Some(&process),
                args.reason.as_deref(),
            )
            .await?;
        format!(
            "requested {process} on {}: its agent takes it into the next window\n",
            args.node
        )
    } else {
        format!(
            "{process} on {} was already requested ({}, from {})\n",
            args.node,
            request.state.as_str(),
            request.source
        )
    };
    output::emit(&text)
}

pub async fn cancel(args: RequestArgs) -> Result<()> {
    let process = args.process()?;
    let operator = Operator::open(&args.store).await?;
    let text = if operator.store.cancel(&args.node, &process).await? {
        operator
            .record(
                OperatorCommand::Cancel,
                Some(&args.node),
                Some(&process),
                args.reason.as_deref(),
            )
            .await?;
        format!("canceled the pending {process} request of {}\n", args.node)
    } else {
        format!(
            "{} has no pending {process} request (work already in a window is given up with `rota unlock`)\n",
            args.node
        )
    };
    output::emit(&text)
}

pub async fn pause(args: PauseArgs) -> Result<()> {
    let operator = Operator::open(&args.store).await?;
    let pause = operator.store.pause(&args.reason).await?;
    operator
        .record(OperatorCommand::Pause, None, None, Some(&args.reason))
        .await?;
    output::emit(&format!(
        "fleet paused since {}: {}; no node takes a slot or reboots until `rota resume`\n",
        output::rfc3339_seconds(pause.since),
        pause.reason
    ))
}

pub async fn resume(args: ResumeArgs) -> Result<()> {
    let operator = Operator::open(&args.store).await?;
    // Every resume starts a new rollout, paused or not: each one is recorded.
    let lifted = operator.store.resume().await?;
    operator
        .record(OperatorCommand::Resume, None, None, args.reason.as_deref())
        .await?;
    let text = match lifted {
        Some(pause) => format!(
            "fleet resumed (paused since {}: {})\n",
            output::rfc3339_seconds(pause.since),
            pause.reason
        ),
        None => "the fleet was not paused\n".to_string(),
    };
    output::emit(&text)
}

#[cfg(test)]
mod tests {
    use rota_core::{NodeName, NodeState, Process};

    use super::*;

    fn failed() -> NodeRecord {
        NodeRecord {
            process: Some(Process::Reboot),
            slot: Some(0),
            cordoned_by_rota: true,
            ..NodeRecord::new(
                NodeName::new("node-3").expect("valid"),
                NodeState::Failed,
                0,
            )
        }
    }

    #[test]
    fn unlock_says_what_happened() {
        let before = failed();
        let after = NodeRecord {
            state: NodeState::Idle,
            slot: None,
            process: None,
            ..failed()
        };
        insta::assert_snapshot!(describe_unlock(Some(&before), &after), @r"
        unlocked node-3 (was failed): slot 0 released, now idle; reason recorded in history
        node-3 stays cordoned until its agent uncordons it
        ");
    }

    #[test]
    fn retry_says_what_happened() {
        let after = NodeRecord {
            state: NodeState::Maintaining,
            ..failed()
        };
        insta::assert_snapshot!(describe_retry(&after), @"retrying node-3: now maintaining, keeps slot 0; its agent resumes the window's work");
    }
}
