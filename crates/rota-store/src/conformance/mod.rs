//! The store conformance suite: one set of tests that every [`Store`] must pass. A store's test
//! file instantiates it with [`conformance_tests!`](crate::conformance_tests), giving a function
//! that returns a fresh, empty store; the same test bodies then run against every substrate.
//! Each file holds the cases of one concern; this one, the helpers they share.

mod audit;
mod blocked;
mod failures;
mod groups;
mod history;
mod macros;
mod pause;
mod procedures;
mod requests;
mod rollout;
mod sessions;
mod slots;
mod stress;

use std::time::Duration;

use rota_core::{BackoffPolicy, NodeName, NodeState, Process};

pub use self::audit::operator_commands_are_audited_with_who_and_why;
pub use self::blocked::{
    a_blocked_node_keeps_its_place_without_holding_the_queue_up,
    a_blocked_reason_is_written_once_per_change_and_fenced,
    blocking_a_node_wakes_the_waiters_behind_it,
};
pub use self::failures::{
    a_postponed_window_requeues_its_work_without_backoff,
    backoff_follows_the_policy_and_success_clears_it,
    drain_failure_releases_slot_and_requeues_requests, retry_resumes_a_failed_node,
    unlock_frees_a_failed_node,
};
pub use self::groups::slot_groups_keep_their_limits_and_go_in_turn;
pub use self::history::{
    a_step_keeps_what_held_the_node_back, history_is_ordered_and_filterable,
    steps_record_every_state_a_node_enters,
};
pub use self::pause::{
    pause_is_recorded_and_resume_wakes_every_waiter, resume_starts_a_new_rollout,
};
pub use self::procedures::{
    a_failed_request_stays_active_and_backs_off, a_procedure_is_requested_once_per_node_ever,
    completing_a_request_keeps_the_window_open, procedures_are_stored_once_and_immutable,
};
pub use self::requests::{
    a_transition_records_its_requests_only_when_written,
    an_operator_requests_and_cancels_without_a_session, open_request_is_unique_per_process,
    racing_requests_create_one_open_request, the_overview_is_what_each_node_reads,
};
pub use self::rollout::a_rollout_widens_as_its_nodes_finish_healthy;
pub use self::sessions::{
    a_fenced_transition_needs_the_slot_and_the_session,
    expired_session_is_fenced_and_told_apart_from_a_superseded_one, fence_requires_a_held_slot,
    superseded_session_is_fenced, transition_is_compare_and_swap,
};
pub use self::slots::{
    a_new_concurrency_is_obeyed_at_once,
    a_queued_node_without_a_live_session_does_not_hold_the_queue_up,
    a_release_moves_changes_by_one_and_a_grant_not_at_all,
    a_waiter_is_told_how_many_handoffs_to_wait_for, giving_back_an_unused_grant_is_one_change,
    holder_readopts_its_slot_after_restart, slot_limit_is_never_exceeded,
    slots_are_granted_in_queue_order,
};
pub use self::stress::{
    Stress, concurrent_stress_across, concurrent_stress_never_double_grants_or_loses_history,
    sixty_four_sessions_never_double_grant_or_lose_history, stress,
};
use crate::model::{NodeFields, NodeRecord, Session, Transition, WindowChange};
use crate::store::{Store, StoreExt};

const TTL: Duration = Duration::from_secs(30);

fn node(name: &str) -> NodeName {
    NodeName::new(name).expect("valid node name")
}

async fn session(store: &dyn Store, name: &str) -> Session {
    store
        .open_session(&node(name), TTL)
        .await
        .expect("open session")
}

/// Requests a reboot and enters the queue at `queued_at`.
async fn enqueue(store: &dyn Store, s: &Session, queued_at: i64) -> NodeRecord {
    enqueue_with(store, s, queued_at, NodeFields::default()).await
}

/// [`enqueue`], the queueing transition setting `fields` (a group).
async fn enqueue_with(
    store: &dyn Store,
    s: &Session,
    queued_at: i64,
    fields: NodeFields,
) -> NodeRecord {
    store
        .add_request(s, &Process::Reboot, "conformance")
        .await
        .expect("add request");
    store
        .transition(
            s,
            Transition::new(NodeState::Idle, NodeState::Queued)
                .window(WindowChange::Queue {
                    queued_at: Some(queued_at),
                })
                .fields(fields),
        )
        .await
        .expect("enqueue")
}

/// Takes the slot the node was granted and opens its window (queued → draining). Public for
/// the tests of the crates above that put a store in a state by hand (`crates/rota/tests/`).
pub async fn open_window(store: &dyn Store, s: &Session) -> NodeRecord {
    store
        .transition(
            s,
            Transition::new(NodeState::Queued, NodeState::Draining)
                .process(Some(Process::Reboot))
                .window(WindowChange::Open)
                .fields(NodeFields {
                    cordoned_by_rota: Some(true),
                    ..NodeFields::default()
                }),
        )
        .await
        .expect("open window")
}

/// Walks an open window through maintenance to a successful finish.
async fn finish_window(store: &dyn Store, s: &Session) -> NodeRecord {
    for (from, to) in [
        (NodeState::Draining, NodeState::Maintaining),
        (NodeState::Maintaining, NodeState::Verifying),
    ] {
        store
            .transition(s, Transition::new(from, to))
            .await
            .expect("transition");
    }
    store
        .transition(
            s,
            Transition::new(NodeState::Verifying, NodeState::Idle).window(WindowChange::Finish),
        )
        .await
        .expect("finish window")
}

async fn fail_closed(store: &dyn Store, s: &Session) -> NodeRecord {
    store
        .transition(
            s,
            Transition::new(NodeState::Draining, NodeState::Maintaining),
        )
        .await
        .expect("drained");
    store
        .transition(
            s,
            Transition::new(NodeState::Maintaining, NodeState::Failed).window(WindowChange::Fail {
                cause: "script exited 3".into(),
                policy: policy(),
                keep_slot: true,
            }),
        )
        .await
        .expect("fail")
}

fn policy() -> BackoffPolicy {
    BackoffPolicy {
        initial: Duration::from_secs(1),
        maximum: Duration::from_secs(5),
        exponent: 2.0,
    }
}
