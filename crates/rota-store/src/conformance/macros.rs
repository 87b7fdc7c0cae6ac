//! The macro that instantiates the suite in a store's test file.

/// Runs every conformance case against stores made by `$make` (an async fn returning
/// `Arc<dyn Store>`), one `#[tokio::test]` per case.
///
/// `conformance_tests!(skippable $make, scheduled)` leaves out the cases of a store that decides
/// grants when a node asks (the SQL stores): how many handoffs a waiter is told to wait for,
/// and what moves the change counter. A store whose grants a scheduler writes runs the rest,
/// with the scheduler's round before each ask.
///
/// `conformance_tests!(skippable $make)` takes an async fn returning
/// `Option<Arc<dyn Store>>` instead: `None` ends a case at once, for substrates whose server the
/// environment was explicitly told not to provide (the maker decides, and says why).
#[macro_export]
macro_rules! conformance_tests {
    ($make:path) => {
        $crate::conformance_tests!(@list required $make);
    };
    (skippable $make:path) => {
        $crate::conformance_tests!(@list skippable $make);
    };
    (skippable $make:path, scheduled) => {
        $crate::conformance_tests!(@shared skippable $make);
    };
    (@list $mode:ident $make:path) => {
        $crate::conformance_tests!(@shared $mode $make);
        $crate::conformance_tests!(@cases $mode $make;
            a_waiter_is_told_how_many_handoffs_to_wait_for,
            blocking_a_node_wakes_the_waiters_behind_it,
            a_queued_node_without_a_live_session_does_not_hold_the_queue_up,
            a_release_moves_changes_by_one_and_a_grant_not_at_all,
            giving_back_an_unused_grant_is_one_change,
        );
    };
    (@shared $mode:ident $make:path) => {
        $crate::conformance_tests!(@cases $mode $make;
            slot_limit_is_never_exceeded,
            holder_readopts_its_slot_after_restart,
            superseded_session_is_fenced,
            expired_session_is_fenced_and_told_apart_from_a_superseded_one,
            fence_requires_a_held_slot,
            a_fenced_transition_needs_the_slot_and_the_session,
            transition_is_compare_and_swap,
            open_request_is_unique_per_process,
            a_transition_records_its_requests_only_when_written,
            racing_requests_create_one_open_request,
            the_overview_is_what_each_node_reads,
            backoff_follows_the_policy_and_success_clears_it,
            history_is_ordered_and_filterable,
            steps_record_every_state_a_node_enters,
            a_step_keeps_what_held_the_node_back,
            slots_are_granted_in_queue_order,
            a_new_concurrency_is_obeyed_at_once,
            unlock_frees_a_failed_node,
            retry_resumes_a_failed_node,
            drain_failure_releases_slot_and_requeues_requests,
            a_postponed_window_requeues_its_work_without_backoff,
            resume_starts_a_new_rollout,
            a_rollout_widens_as_its_nodes_finish_healthy,
            slot_groups_keep_their_limits_and_go_in_turn,
            procedures_are_stored_once_and_immutable,
            a_procedure_is_requested_once_per_node_ever,
            completing_a_request_keeps_the_window_open,
            a_failed_request_stays_active_and_backs_off,
            pause_is_recorded_and_resume_wakes_every_waiter,
            a_blocked_reason_is_written_once_per_change_and_fenced,
            a_blocked_node_keeps_its_place_without_holding_the_queue_up,
            an_operator_requests_and_cancels_without_a_session,
            operator_commands_are_audited_with_who_and_why,
            concurrent_stress_never_double_grants_or_loses_history,
            sixty_four_sessions_never_double_grant_or_lose_history,
        );
    };
    (@cases required $make:path; $($case:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $case() {
                let store = $make().await;
                $crate::conformance::$case(store).await;
            }
        )*
    };
    (@cases skippable $make:path; $($case:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $case() {
                let Some(store) = $make().await else {
                    return;
                };
                $crate::conformance::$case(store).await;
            }
        )*
    };
}
