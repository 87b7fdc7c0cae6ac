use super::*;
use crate::lifecycle::Event;
use HistoryEvent as H;
use NodeState as S;
use Process::{Maintenance, Reboot};
use RequestState as R;
use WindowChange as W;

/// The time every write happens at.
const NOW: Millis = 1_000_000;
/// The slot the node holds, unless a test says otherwise.
const SLOT: u32 = 2;
/// docs/design.md §6's second example: 1, 2, 4, 5, 5 s.
const POLICY: BackoffPolicy = BackoffPolicy {
    initial: Duration::from_secs(1),
    maximum: Duration::from_secs(5),
    exponent: 2.0,
};

fn node() -> NodeName {
    NodeName::new("node-1").expect("valid node name")
}

fn mop(name: &str) -> Process {
    Process::mop(name).expect("valid procedure name")
}

fn request(id: i64, process: Process, state: RequestState) -> RequestRecord {
    RequestRecord {
        id,
        node: node(),
        process,
        source: format!("source-{id}"),
        created_at: 100 + id,
        state,
    }
}

fn active(id: i64, process: Process) -> RequestRecord {
    request(id, process, R::Active)
}

fn pending(id: i64, process: Process) -> RequestRecord {
    request(id, process, R::Pending)
}

/// A backoff of `secs` that ran until 500.
fn backoff(process: Process, secs: u64) -> BackoffRecord {
    BackoffRecord {
        node: node(),
        process,
        until: 500,
        last_interval: Duration::from_secs(secs),
        cause: "earlier".into(),
    }
}

/// A node in `state` since 10, holding `slot`, with `requests` open and a previous result.
fn overview(state: NodeState, slot: Option<u32>, requests: Vec<RequestRecord>) -> NodeOverview {
    let mut record = NodeRecord::new(node(), state, 10);
    record.slot = slot;
    record.last_result = Some("before".into());
    NodeOverview {
        record,
        open_requests: requests,
        backoffs: Vec::new(),
    }
}

/// A node in `state` holding [`SLOT`].
fn holding(state: NodeState, requests: Vec<RequestRecord>) -> NodeOverview {
    overview(state, Some(SLOT), requests)
}

fn fail(keep_slot: bool) -> WindowChange {
    W::Fail {
        cause: "boom".into(),
        policy: POLICY,
        keep_slot,
    }
}

fn cancel() -> WindowChange {
    W::Cancel {
        reason: "why".into(),
    }
}

fn postpone() -> WindowChange {
    W::Postpone {
        reason: "closed".into(),
    }
}

fn queue(queued_at: Option<Millis>) -> WindowChange {
    W::Queue { queued_at }
}

fn transition(from: NodeState, to: NodeState, window: WindowChange) -> Write {
    Write::Transition(Transition::new(from, to).window(window))
}

fn apply(before: &NodeOverview, write: &Write) -> Applied {
    match before.apply(write, NOW) {
        Ok(applied) => applied,
        Err(err) => panic!("{write:?}: {err}"),
    }
}

fn entry(process: Process, event: HistoryEvent, cause: Option<&str>, released: bool) -> Entry {
    Entry {
        process,
        event,
        at: NOW,
        cause: cause.map(str::to_string),
        slot: Some(SLOT),
        released,
    }
}

/// The id and state of each request.
fn states(requests: &[RequestRecord]) -> Vec<(i64, RequestState)> {
    requests.iter().map(|r| (r.id, r.state)).collect()
}

/// The process, interval (s), end and cause of each backoff.
fn backoffs(applied: &Applied) -> Vec<(Process, u64, Millis, &str)> {
    let mut out = Vec::new();
    for b in &applied.after.backoffs {
        let secs = b.last_interval.as_secs();
        out.push((b.process.clone(), secs, b.until, b.cause.as_str()));
    }
    out
}

/// What a window change does to a node with two active requests and a pending one between
/// them, and backoffs for the first active one and the pending one.
struct WindowRow {
    from: NodeState,
    to: NodeState,
    window: WindowChange,
    open: Vec<(i64, RequestState)>,
    closed: Vec<(i64, RequestState)>,
    history: Vec<Entry>,
    slot: Option<u32>,
    last_result: &'static str,
    backoffs: Vec<(Process, u64, Millis, &'static str)>,
}

#[test]
fn every_window_change_moves_requests_records_history_backs_off_and_releases() {
    let (a, m) = (mop("a"), Maintenance);
    let kept = vec![(a.clone(), 2, 500, "earlier"), (Reboot, 4, 500, "earlier")];
    // Sorted by process name.
    let backed_off = vec![
        (m.clone(), 1, NOW + 1_000, "boom"),
        (a.clone(), 4, NOW + 4_000, "boom"),
        (Reboot, 4, 500, "earlier"),
    ];
    // One entry for each active request; the last one gives the slot back if `released`.
    let each = |event, cause, released| {
        let first = entry(a.clone(), event, cause, false);
        vec![first, entry(m.clone(), event, cause, released)]
    };
    let apa = vec![(1, R::Active), (2, R::Pending), (3, R::Active)];
    let aaa = vec![(1, R::Active), (2, R::Active), (3, R::Active)];
    let ppp = vec![(1, R::Pending), (2, R::Pending), (3, R::Pending)];
    let started = vec![entry(Reboot, H::Started, None, false)];
    #[rustfmt::skip]
    let rows = [
        WindowRow { from: S::Maintaining, to: S::Maintaining, window: W::None,
            open: apa.clone(), closed: vec![], history: vec![],
            slot: Some(SLOT), last_result: "before", backoffs: kept.clone() },
        WindowRow { from: S::Idle, to: S::Queued, window: queue(Some(77)),
            open: apa.clone(), closed: vec![], history: vec![],
            slot: Some(SLOT), last_result: "before", backoffs: kept.clone() },
        WindowRow { from: S::Queued, to: S::Draining, window: W::Open,
            open: aaa.clone(), closed: vec![], history: started.clone(),
            slot: Some(SLOT), last_result: "before", backoffs: kept.clone() },
        WindowRow { from: S::Maintaining, to: S::Maintaining, window: W::Join,
            open: aaa.clone(), closed: vec![], history: started.clone(),
            slot: Some(SLOT), last_result: "before", backoffs: kept.clone() },
        // Only the finished processes' backoffs go.
        WindowRow { from: S::Verifying, to: S::Idle, window: W::Finish,
            open: vec![(2, R::Pending)], closed: vec![(1, R::Done), (3, R::Done)],
            history: each(H::Finished, None, true),
            slot: None, last_result: "finished", backoffs: vec![(Reboot, 4, 500, "earlier")] },
        WindowRow { from: S::Maintaining, to: S::Failed, window: fail(true),
            open: apa.clone(), closed: vec![], history: each(H::Failed, Some("boom"), false),
            slot: Some(SLOT), last_result: "failed: boom", backoffs: backed_off.clone() },
        WindowRow { from: S::Draining, to: S::Queued, window: fail(false),
            open: ppp.clone(), closed: vec![], history: each(H::Failed, Some("boom"), true),
            slot: None, last_result: "failed: boom", backoffs: backed_off.clone() },
        WindowRow { from: S::Failed, to: S::Idle, window: cancel(),
            open: vec![(2, R::Pending)], closed: vec![(1, R::Canceled), (3, R::Canceled)],
            history: each(H::Canceled, Some("why"), true),
            slot: None, last_result: "canceled: why", backoffs: kept.clone() },
        WindowRow { from: S::Maintaining, to: S::Queued, window: postpone(),
            open: ppp.clone(), closed: vec![], history: each(H::Postponed, Some("closed"), true),
            slot: None, last_result: "postponed: closed", backoffs: kept.clone() },
    ];
    for row in rows {
        let requests = vec![
            active(1, a.clone()),
            pending(2, Reboot),
            active(3, m.clone()),
        ];
        let mut before = holding(row.from, requests);
        before.backoffs = vec![backoff(a.clone(), 2), backoff(Reboot, 4)];
        let what = format!("{:?}", row.window);
        let applied = apply(&before, &transition(row.from, row.to, row.window));
        assert_eq!(states(&applied.after.open_requests), row.open, "{what}");
        assert_eq!(states(&applied.closed), row.closed, "{what}");
        for closed in &applied.closed {
            let was = before.open_requests.iter().find(|r| r.id == closed.id);
            let was = was.expect("a closed request was open");
            let same = (&closed.process, &closed.source) == (&was.process, &was.source);
            assert!(same, "{what}: {closed:?}");
        }
        assert_eq!(applied.history, row.history, "{what}");
        let r = &applied.after.record;
        assert_eq!(r.slot, row.slot, "{what}");
        assert_eq!(r.last_result.as_deref(), Some(row.last_result), "{what}");
        assert_eq!((r.state, r.since), (row.to, NOW), "{what}");
        assert_eq!(backoffs(&applied), row.backoffs, "{what}");
        assert!(applied.opened.is_empty() && applied.changed, "{what}");
    }
}

#[test]
fn window_result_names_the_change_that_ends_a_window() {
    #[rustfmt::skip]
    let rows = [
        (W::Finish, Some("finished")),
        (fail(true), Some("failed: boom")),
        (fail(false), Some("failed: boom")),
        (cancel(), Some("canceled: why")),
        (postpone(), Some("postponed: closed")),
        (W::None, None), (queue(None), None), (W::Open, None), (W::Join, None),
    ];
    for (window, expected) in rows {
        assert_eq!(window_result(&window).as_deref(), expected, "{window:?}");
    }
}

#[test]
fn a_release_with_no_request_is_recorded_for_the_nodes_process_or_a_reboot() {
    // (window, from, to, event, cause, released, backs off)
    #[rustfmt::skip]
    let rows = [
        (W::Finish,   S::Verifying,   S::Idle,   H::Released,  None,           true,  false),
        (fail(true),  S::Maintaining, S::Failed, H::Failed,    Some("boom"),   false, true),
        (fail(false), S::Draining,    S::Queued, H::Failed,    Some("boom"),   true,  true),
        (cancel(),    S::Failed,      S::Idle,   H::Canceled,  Some("why"),    true,  false),
        (postpone(),  S::Maintaining, S::Queued, H::Postponed, Some("closed"), true,  false),
    ];
    for process in [Some(mop("b")), None] {
        let fallback = process.clone().unwrap_or(Reboot);
        for (window, from, to, event, cause, released, backs_off) in rows.clone() {
            let what = format!("{window:?} with process {process:?}");
            let mut before = holding(from, vec![pending(2, mop("p"))]);
            before.record.process = process.clone();
            let applied = apply(&before, &transition(from, to, window));
            let expected = vec![entry(fallback.clone(), event, cause, released)];
            assert_eq!(applied.history, expected, "{what}");
            // The pending request is not the window's: it waits for the next one.
            let open = states(&applied.after.open_requests);
            assert_eq!(open, [(2, R::Pending)], "{what}");
            assert!(applied.closed.is_empty(), "{what}");
            let expected = match backs_off {
                true => vec![(fallback.clone(), 1, NOW + 1_000, "boom")],
                false => vec![],
            };
            assert_eq!(backoffs(&applied), expected, "{what}");
        }
    }
    // Opening or joining with nothing pending records nothing.
    for (window, from, to) in [
        (W::Open, S::Queued, S::Draining),
        (W::Join, S::Draining, S::Draining),
    ] {
        let before = holding(from, vec![active(1, mop("a"))]);
        let applied = apply(&before, &transition(from, to, window));
        assert!(applied.history.is_empty());
        assert_eq!(states(&applied.after.open_requests), [(1, R::Active)]);
    }
}

#[test]
fn each_failure_lengthens_the_backoff_by_the_policy() {
    let mut node = holding(S::Maintaining, vec![active(1, mop("a"))]);
    let failures = [(1, true), (2, true), (4, false), (5, true), (5, true)];
    for (i, (secs, keep_slot)) in (0..).zip(failures) {
        let now = NOW + 60_000 * i;
        let (from, to) = match keep_slot {
            true => (S::Maintaining, S::Failed),
            false => (S::Draining, S::Queued),
        };
        node.record.state = from;
        node.record.slot = Some(SLOT);
        let applied = node.apply(&transition(from, to, fail(keep_slot)), now);
        let applied = applied.expect("applies");
        let [b] = applied.after.backoffs.as_slice() else {
            panic!("one backoff expected: {:?}", applied.after.backoffs);
        };
        assert_eq!(b.last_interval, Duration::from_secs(secs), "failure {i}");
        assert_eq!(b.until, now + 1_000 * i64::try_from(secs).expect("small"));
        assert_eq!((&b.process, b.cause.as_str()), (&mop("a"), "boom"));
        node = applied.after;
        // A failure that gives the slot back leaves the request waiting for the next window.
        node.open_requests[0].state = R::Active;
    }
    // The end of a backoff saturates rather than wrapping.
    let mut late = holding(S::Maintaining, vec![active(1, mop("a"))]);
    late.backoffs = vec![backoff(mop("a"), 4)];
    let write = transition(S::Maintaining, S::Failed, fail(true));
    let applied = late.apply(&write, i64::MAX - 10).expect("applies");
    assert_eq!(applied.after.backoffs[0].until, i64::MAX);
}

#[test]
fn postpone_leaves_done_work_done_and_starts_no_backoff() {
    let requests = vec![active(1, mop("a")), active(2, mop("b"))];
    let mut before = holding(S::Maintaining, requests);
    before.backoffs = vec![backoff(mop("b"), 2)];
    let done = complete(mop("a"), Outcome::Succeeded { detail: None });
    let done = apply(&before, &done);
    assert_eq!(states(&done.closed), [(1, R::Done)]);
    let applied = apply(
        &done.after,
        &transition(S::Maintaining, S::Queued, postpone()),
    );
    assert_eq!(states(&applied.after.open_requests), [(2, R::Pending)]);
    assert!(applied.closed.is_empty() && applied.opened.is_empty());
    let expected = entry(mop("b"), H::Postponed, Some("closed"), true);
    assert_eq!(applied.history, [expected]);
    assert_eq!(backoffs(&applied), [(mop("b"), 2, 500, "earlier")]);
}

#[test]
fn queue_sets_the_place_open_clears_it_and_nothing_else_touches_it() {
    #[rustfmt::skip]
    let rows = [
        (S::Idle, S::Queued, queue(Some(77)), None, Some(77)),
        (S::Queued, S::Idle, queue(None), Some(77), None),
        (S::Queued, S::Draining, W::Open, Some(77), None),
        (S::Queued, S::Queued, W::None, Some(77), Some(77)),
        (S::Maintaining, S::Maintaining, W::Join, Some(5), Some(5)),
        (S::Maintaining, S::Queued, postpone(), Some(5), Some(5)),
    ];
    for (from, to, window, queued_at, expected) in rows {
        let what = format!("{from} -> {to} {window:?}");
        let mut before = holding(from, vec![]);
        before.record.queued_at = queued_at;
        let applied = apply(&before, &transition(from, to, window));
        assert_eq!(applied.after.record.queued_at, expected, "{what}");
    }
}

#[test]
fn the_process_is_kept_or_replaced_outside_idle_and_queued_and_cleared_in_them() {
    let a = || Some(mop("a"));
    // (from, to, the transition's process, the node's, after)
    #[rustfmt::skip]
    let rows = [
        (S::Maintaining, S::Verifying, None, a(), a()),
        (S::Draining, S::Maintaining, Some(Maintenance), a(), Some(Maintenance)),
        (S::Maintaining, S::Rebooting, Some(Reboot), None, Some(Reboot)),
        (S::Maintaining, S::Queued, Some(Reboot), a(), None),
        (S::Verifying, S::Idle, Some(Reboot), a(), None),
        (S::Idle, S::Queued, Some(Reboot), None, None),
    ];
    for (from, to, process, before_process, expected) in rows {
        let mut before = holding(from, vec![]);
        before.record.process = before_process;
        let write = Write::Transition(Transition::new(from, to).process(process));
        let applied = apply(&before, &write);
        assert_eq!(applied.after.record.process, expected, "{from} -> {to}");
    }
}

#[test]
fn cordon_bookkeeping_resets_in_idle_and_queued_unless_the_write_says() {
    let f = |pre, by_rota| NodeFields {
        pre_cordoned: pre,
        cordoned_by_rota: by_rota,
        ..NodeFields::default()
    };
    let none = f(None, None);
    let both = |pre, by_rota| f(Some(pre), Some(by_rota));
    // (from, to, window, fields, before (pre, by rota), after)
    #[rustfmt::skip]
    let rows = [
        (S::Verifying, S::Idle, W::Finish, none.clone(), (true, false), (false, false)),
        (S::Verifying, S::Idle, W::Finish, none.clone(), (false, true), (false, false)),
        (S::Draining, S::Queued, fail(false), none.clone(), (false, true), (false, false)),
        (S::Draining, S::Queued, fail(false), both(false, true), (false, true), (false, true)),
        (S::Maintaining, S::Rebooting, W::None, none.clone(), (true, false), (true, false)),
        (S::Maintaining, S::Failed, fail(true), none.clone(), (false, true), (false, true)),
        (S::Queued, S::Draining, W::Open, both(true, false), (false, false), (true, false)),
        (S::Draining, S::Maintaining, W::None, f(None, Some(false)), (false, true), (false, false)),
    ];
    for (from, to, window, fields, (pre, by_rota), expected) in rows {
        let what = format!("{from} -> {to} {fields:?}");
        let mut before = holding(from, vec![]);
        before.record.pre_cordoned = pre;
        before.record.cordoned_by_rota = by_rota;
        let write = Write::Transition(Transition::new(from, to).window(window).fields(fields));
        let r = apply(&before, &write).after.record;
        assert_eq!((r.pre_cordoned, r.cordoned_by_rota), expected, "{what}");
    }
}

#[test]
fn reboot_fields_are_set_cleared_or_left_as_the_write_says() {
    let mut before = holding(S::Maintaining, vec![]);
    before.record.boot_id = Some("old".into());
    before.record.reboot_deadline = Some(3);
    before.record.last_reboot_at = Some(1);
    let set = NodeFields {
        boot_id: Some(Some("new".into())),
        reboot_started_at: Some(Some(5)),
        reboot_deadline: Some(Some(9)),
        last_reboot_at: Some(7),
        ..NodeFields::default()
    };
    let write = |to, fields| Write::Transition(Transition::new(S::Maintaining, to).fields(fields));
    let r = apply(&before, &write(S::Rebooting, set)).after.record;
    assert_eq!(r.boot_id.as_deref(), Some("new"));
    let times = (r.reboot_started_at, r.reboot_deadline, r.last_reboot_at);
    assert_eq!(times, (Some(5), Some(9), Some(7)));
    let clear = NodeFields {
        boot_id: Some(None),
        reboot_deadline: Some(None),
        ..NodeFields::default()
    };
    let r = apply(&before, &write(S::Verifying, clear)).after.record;
    assert_eq!((r.boot_id, r.reboot_deadline), (None, None));
    assert_eq!(r.last_reboot_at, Some(1), "left as it was");
    let keep = NodeFields::default();
    let r = apply(&before, &write(S::Verifying, keep)).after.record;
    let kept = (r.boot_id.as_deref(), r.reboot_deadline);
    assert_eq!(kept, (Some("old"), Some(3)));
}

#[test]
fn a_transition_from_another_state_conflicts_and_writes_nothing() {
    for actual in NodeState::ALL {
        for expected in NodeState::ALL.into_iter().filter(|s| *s != actual) {
            let before = holding(actual, vec![active(1, mop("a"))]);
            let t = Transition::new(expected, S::Idle).window(W::Finish);
            let write = Write::Transition(t.request(Reboot, "file"));
            let node = node();
            let conflict = RecordError::Conflict {
                node,
                expected,
                actual,
            };
            let what = format!("{expected} on a node {actual}");
            assert_eq!(before.apply(&write, NOW), Err(conflict), "{what}");
        }
    }
}

fn new(process: Process, source: &str) -> NewRequest {
    NewRequest {
        process,
        source: source.into(),
        created_at: NOW,
    }
}

#[test]
fn requests_of_a_transition_are_recorded_after_its_window_change() {
    let requests = || vec![active(1, mop("a")), pending(2, Reboot)];
    // The window opens the pending reboot: it is still open, so none is added.
    let t = Transition::new(S::Queued, S::Draining).window(W::Open);
    let write = Write::Transition(t.request(Reboot, "file"));
    let applied = apply(&holding(S::Queued, requests()), &write);
    assert!(applied.opened.is_empty());
    let open = states(&applied.after.open_requests);
    assert_eq!(open, [(1, R::Active), (2, R::Active)]);
    // The window finishes the active procedure first: a new one is recorded.
    let t = Transition::new(S::Verifying, S::Idle).window(W::Finish);
    let write = Write::Transition(t.request(mop("a"), "again").request(Reboot, "file"));
    let applied = apply(&holding(S::Verifying, requests()), &write);
    assert_eq!(states(&applied.closed), [(1, R::Done)]);
    assert_eq!(applied.opened, [new(mop("a"), "again")]);
    // Two of the same process in one write make one request.
    let t = Transition::new(S::Idle, S::Queued).window(queue(Some(NOW)));
    let t = t.request(Reboot, "first").request(Reboot, "second");
    let write = Write::Transition(t.request(Maintenance, "file"));
    let applied = apply(&overview(S::Idle, None, vec![]), &write);
    let expected = [new(Reboot, "first"), new(Maintenance, "file")];
    assert_eq!(applied.opened, expected);
}

#[test]
fn a_request_is_added_only_when_none_of_its_process_is_open() {
    let requests = vec![active(1, mop("a")), pending(2, Reboot)];
    let before = holding(S::Maintaining, requests);
    let add = |process| Write::AddRequest {
        process,
        source: "operator".into(),
    };
    for process in [mop("a"), Reboot] {
        let applied = apply(&before, &add(process.clone()));
        assert!(applied.opened.is_empty() && !applied.changed, "{process}");
        assert_eq!(applied.after, before, "{process}");
    }
    let applied = apply(&before, &add(Maintenance));
    assert_eq!(applied.opened, [new(Maintenance, "operator")]);
    assert!(applied.changed);
    assert_eq!(applied.after, before, "the store gives the request its id");
    assert!(applied.closed.is_empty() && applied.history.is_empty());
}

#[test]
fn cancel_request_withdraws_only_a_pending_request() {
    let requests = vec![active(1, mop("a")), pending(2, Reboot)];
    let before = holding(S::Maintaining, requests);
    let cancel = |process| Write::CancelRequest { process };
    let applied = apply(&before, &cancel(Reboot));
    assert_eq!(applied.closed, [request(2, Reboot, R::Canceled)]);
    assert_eq!(states(&applied.after.open_requests), [(1, R::Active)]);
    assert!(applied.changed && applied.history.is_empty());
    assert_eq!(applied.after.record, before.record);
    for process in [mop("a"), Maintenance] {
        let applied = apply(&before, &cancel(process.clone()));
        assert!(applied.closed.is_empty() && !applied.changed, "{process}");
        assert_eq!(applied.after, before, "{process}");
    }
}

/// A maintaining node with two active requests, a pending one, and two backoffs.
fn open_window() -> NodeOverview {
    let requests = vec![
        active(1, mop("a")),
        active(2, Reboot),
        pending(3, Maintenance),
    ];
    let mut before = holding(S::Maintaining, requests);
    before.backoffs = vec![backoff(mop("a"), 2), backoff(Reboot, 4)];
    before
}

fn complete(process: Process, outcome: Outcome) -> Write {
    Write::CompleteRequest { process, outcome }
}

fn failed(cause: &str) -> Outcome {
    Outcome::Failed {
        cause: cause.into(),
        policy: POLICY,
    }
}

#[test]
fn a_success_closes_its_request_and_clears_its_backoff_in_the_open_window() {
    let before = open_window();
    for detail in [Some("output tail".to_string()), None] {
        let outcome = Outcome::Succeeded {
            detail: detail.clone(),
        };
        let applied = apply(&before, &complete(mop("a"), outcome));
        assert_eq!(applied.closed, [request(1, mop("a"), R::Done)]);
        let open = states(&applied.after.open_requests);
        assert_eq!(open, [(2, R::Active), (3, R::Pending)]);
        assert_eq!(backoffs(&applied), [(Reboot, 4, 500, "earlier")]);
        let expected = entry(mop("a"), H::Finished, detail.as_deref(), false);
        assert_eq!(applied.history, [expected]);
        assert_eq!(applied.after.record, before.record, "the window stays open");
        assert!(applied.changed && applied.opened.is_empty());
    }
}

#[test]
fn a_failure_fails_the_node_closed_and_backs_its_process_off() {
    let before = open_window();
    let applied = apply(&before, &complete(mop("a"), failed("exit 3")));
    let r = &applied.after.record;
    assert_eq!((r.state, r.since, r.slot), (S::Failed, NOW, Some(SLOT)));
    assert_eq!(r.last_result.as_deref(), Some("failed: exit 3"));
    let open = &applied.after.open_requests;
    assert_eq!(open, &before.open_requests, "the request stays active");
    assert!(applied.closed.is_empty() && applied.opened.is_empty());
    let expected = [
        (mop("a"), 4, NOW + 4_000, "exit 3"),
        (Reboot, 4, 500, "earlier"),
    ];
    assert_eq!(backoffs(&applied), expected);
    let expected = entry(mop("a"), H::Failed, Some("exit 3"), false);
    assert_eq!(applied.history, [expected]);
    // A process with no backoff yet starts at the initial wait.
    let mut fresh = open_window();
    fresh.backoffs.clear();
    let applied = apply(&fresh, &complete(Reboot, failed("x")));
    assert_eq!(backoffs(&applied), [(Reboot, 1, NOW + 1_000, "x")]);
}

#[test]
fn completing_needs_an_active_request_and_a_failure_a_maintaining_node() {
    let before = open_window();
    for outcome in [Outcome::Succeeded { detail: None }, failed("x")] {
        for process in [Maintenance, mop("absent")] {
            let got = before.apply(&complete(process.clone(), outcome.clone()), NOW);
            let (node, what) = (node(), format!("{outcome:?} {process}"));
            let refused = Err(RecordError::NotActive { node, process });
            assert_eq!(got, refused, "{what}");
        }
    }
    for actual in NodeState::ALL.into_iter().filter(|s| *s != S::Maintaining) {
        let mut before = open_window();
        before.record.state = actual;
        let got = before.apply(&complete(mop("a"), failed("x")), NOW);
        let (node, expected) = (node(), S::Maintaining);
        let conflict = RecordError::Conflict {
            node,
            expected,
            actual,
        };
        assert_eq!(got, Err(conflict), "{actual}");
    }
}

#[test]
fn set_blocked_writes_only_a_new_reason() {
    let blocked = |reason: &str, since| {
        let reason = reason.into();
        Some(Blocked { reason, since })
    };
    let paused = blocked("paused", 5);
    // (before, written, after, changed)
    #[rustfmt::skip]
    let rows = [
        (None, paused.clone(), paused.clone(), true),
        (paused.clone(), blocked("paused", 9), paused.clone(), false),
        (paused.clone(), blocked("blocker x", 9), blocked("blocker x", 9), true),
        (paused.clone(), None, None, true),
        (None, None, None, false),
    ];
    for (was, write, expected, changed) in rows {
        let what = format!("{was:?} then {write:?}");
        let mut before = overview(S::Queued, None, vec![pending(1, mop("a"))]);
        before.record.blocked = was;
        let applied = apply(&before, &Write::SetBlocked(write));
        assert_eq!(applied.after.record.blocked, expected, "{what}");
        assert_eq!(applied.changed, changed, "{what}");
        let mut rest = applied.after.clone();
        rest.record.blocked.clone_from(&before.record.blocked);
        assert_eq!(rest, before, "{what}");
        assert!(applied.history.is_empty() && applied.closed.is_empty());
    }
}

fn unlock() -> Write {
    Write::Unlock {
        reason: "stuck".into(),
    }
}

#[test]
fn unlock_needs_a_node_that_holds_a_slot() {
    for state in NodeState::ALL {
        for slot in [Some(1), None] {
            let got = overview(state, slot, vec![]).apply(&unlock(), NOW);
            if state.holds_slot() || slot.is_some() {
                let after = got.expect("allowed").after.record;
                let idle = (after.state, after.slot) == (S::Idle, None);
                assert!(idle, "{state} {slot:?}");
            } else {
                let (node, write, needs) = (node(), "unlock", "holds a slot");
                let refused = RecordError::NotAllowed {
                    node,
                    state,
                    write,
                    needs,
                };
                assert_eq!(got, Err(refused));
            }
        }
    }
}

#[test]
fn unlock_cancels_the_window_and_keeps_the_cordon_bookkeeping() {
    let cause = "unlocked by an operator: stuck";
    let mut before = holding(S::Failed, vec![active(1, mop("a")), pending(2, Reboot)]);
    before.record.process = Some(mop("a"));
    before.record.queued_at = Some(3);
    before.record.cordoned_by_rota = true;
    before.backoffs = vec![backoff(mop("a"), 2)];
    let applied = apply(&before, &unlock());
    let r = &applied.after.record;
    assert_eq!((r.state, r.since, r.slot), (S::Idle, NOW, None));
    assert_eq!((&r.process, r.queued_at), (&None, None));
    assert_eq!((r.pre_cordoned, r.cordoned_by_rota), (false, true));
    let result = "canceled: unlocked by an operator: stuck";
    assert_eq!(r.last_result.as_deref(), Some(result));
    assert_eq!(states(&applied.closed), [(1, R::Canceled)]);
    assert_eq!(states(&applied.after.open_requests), [(2, R::Pending)]);
    let expected = entry(mop("a"), H::Canceled, Some(cause), true);
    assert_eq!(applied.history, [expected]);
    assert_eq!(applied.after.backoffs, before.backoffs);
    // A queued node granted a slot just before a restart: the release is a reboot's.
    let mut before = holding(S::Queued, vec![]);
    before.record.pre_cordoned = true;
    let applied = apply(&before, &unlock());
    let expected = entry(Reboot, H::Canceled, Some(cause), true);
    assert_eq!(applied.history, [expected]);
    assert!(applied.after.record.pre_cordoned);
}

#[test]
fn retry_takes_only_a_failed_node_back_to_maintaining() {
    for state in NodeState::ALL {
        let before = holding(state, vec![active(1, mop("a"))]);
        let got = before.apply(&Write::Retry, NOW);
        if state == S::Failed {
            let applied = got.expect("allowed");
            let mut expected = before.clone();
            expected.record.state = S::Maintaining;
            expected.record.since = NOW;
            assert_eq!(applied.after, expected);
            assert!(applied.history.is_empty() && applied.closed.is_empty());
        } else {
            let (node, write, needs) = (node(), "retry", "is failed");
            let refused = RecordError::NotAllowed {
                node,
                state,
                write,
                needs,
            };
            assert_eq!(got, Err(refused));
        }
    }
}

/// What a store does with an answer: keeps the record, and gives each new request an id.
fn persist(applied: Applied, next_id: &mut i64) -> NodeOverview {
    let mut after = applied.after;
    for new in applied.opened {
        let mut request = pending(*next_id, new.process);
        (request.source, request.created_at) = (new.source, new.created_at);
        after.open_requests.push(request);
        *next_id += 1;
    }
    after
}

#[test]
fn a_whole_window_through_the_lifecycles_decisions() {
    let (mut next_id, mut history) = (1, Vec::new());
    let mut node = overview(S::Idle, None, vec![]);
    let requested = Event::Requested { eligible_at: NOW };
    let acquired = Event::SlotAcquired {
        pre_cordoned: false,
    };
    let events = [
        requested.clone(),
        acquired.clone(),
        Event::Drained,
        Event::RebootStarted,
        Event::BootChanged,
        Event::Healthy,
    ];
    for event in events {
        let decision = node.record.lifecycle().apply(&event).expect("allowed");
        let mut t = Transition::of(decision);
        if event == requested {
            t = t.request(Reboot, "/var/run/reboot-required");
        } else if event == acquired {
            node.record.slot = Some(SLOT); // the store's grant
        } else if event == Event::RebootStarted {
            t = t.process(Some(Reboot));
        }
        let applied = apply(&node, &Write::Transition(t));
        history.extend(applied.history.iter().cloned());
        node = persist(applied, &mut next_id);
        let r = &node.record;
        if event == requested {
            assert_eq!((r.state, r.queued_at), (S::Queued, Some(NOW)));
            assert_eq!(states(&node.open_requests), [(1, R::Pending)]);
        } else if event == Event::Drained {
            assert!(r.cordoned_by_rota && r.queued_at.is_none());
            assert_eq!(states(&node.open_requests), [(1, R::Active)]);
        } else if event == Event::RebootStarted {
            assert_eq!((r.state, &r.process), (S::Rebooting, &Some(Reboot)));
        }
    }
    let r = &node.record;
    assert_eq!((r.state, r.slot, &r.process), (S::Idle, None, &None));
    assert_eq!((r.pre_cordoned, r.cordoned_by_rota), (false, false));
    assert_eq!(r.last_result.as_deref(), Some("finished"));
    assert!(node.open_requests.is_empty());
    let started = entry(Reboot, H::Started, None, false);
    assert_eq!(history, [started, entry(Reboot, H::Finished, None, true)]);
}

#[test]
fn a_request_state_reads_back_from_its_name_and_an_unknown_one_is_refused_by_name() {
    for state in [R::Pending, R::Active, R::Done, R::Canceled] {
        assert_eq!(state.as_str().parse::<RequestState>(), Ok(state));
    }
    let refused = "finished"
        .parse::<RequestState>()
        .expect_err("no such state");
    assert!(refused.contains("\"finished\""), "{refused}");
    assert!(
        refused.contains("pending, active, done or canceled"),
        "{refused}"
    );
}
