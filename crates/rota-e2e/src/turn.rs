//! A node's turn as a test walks it on any store, as its agent would: queued, then its slot
//! once the store (or the scheduler) grants it.

use std::time::Duration;

use rota_core::NodeState;
use rota_store::{Session, Store, StoreExt, Transition, WindowChange, now_millis};

/// Queues `session`'s idle node, a second ago.
pub async fn queue(store: &dyn Store, session: &Session) {
    store
        .transition(
            session,
            Transition::new(NodeState::Idle, NodeState::Queued).window(WindowChange::Queue {
                queued_at: Some(now_millis() - 1000),
            }),
        )
        .await
        .expect("queue");
}

/// Asks for `session`'s slot until the store answers one (on Kubernetes, until the
/// scheduler's grant reached the agent's watch); fails after `within`.
pub async fn granted(store: &dyn Store, session: &Session, within: Duration) -> u32 {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let answer = store
            .try_acquire_slot(session)
            .await
            .expect("ask for a slot");
        if let Some(slot) = answer.slot() {
            return slot;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{} was granted no slot within {within:?}: {answer:?}",
            session.node
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
