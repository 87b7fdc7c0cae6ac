//! Queue maths: who is ahead of a waiter, and how many changes it waits for before its turn,
//! from what a look at the queue found. No API calls here, so that the counting, which must
//! match the SQLite store's, is tested without a cluster.

use k8s_openapi::api::coordination::v1::Lease;
use rota_core::NodeState;
use rota_store::Millis;

use crate::crd::{RotaNode, RotaNodeStatus};
use crate::slots;

/// A queued node as the queue sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Waiter {
    pub node: String,
    pub queued_at: Millis,
    pub alive: bool,
    pub holds_slot: bool,
    /// Its session is renewed sparsely: it waited far from the front when it last renewed.
    pub sparse: bool,
}

/// A waiter with fewer places ahead of it than this counts as alive only if it renews its
/// session as usual (not sparsely): a node whose agent died far back is passed over as soon
/// as it nears the front, not once its long deadline runs out.
pub(super) fn near(concurrency: u32) -> usize {
    usize::try_from(concurrency)
        .unwrap_or(usize::MAX)
        .saturating_add(2)
}

/// A waiter with at least this many places ahead of it renews its session sparsely. Far
/// enough behind [`near`] that it is renewing as usual again, with room to spare, by the time
/// the others' looks need it to.
pub(super) fn far(concurrency: u32) -> usize {
    near(concurrency).saturating_mul(3)
}

/// The waiters that stand in the queue (queued, not holding a slot), other than `me`, in
/// queue order.
fn in_line<'a>(me: &str, waiters: &'a [Waiter], now: Millis) -> Vec<&'a Waiter> {
    let mut line: Vec<&Waiter> = waiters
        .iter()
        .filter(|w| w.node != me && !w.holds_slot && w.queued_at <= now)
        .collect();
    line.sort_by(|a, b| (a.queued_at, &a.node).cmp(&(b.queued_at, &b.node)));
    line
}

fn is_ahead(w: &Waiter, me: &str, mine: Millis) -> bool {
    (w.queued_at, w.node.as_str()) < (mine, me)
}

/// How many waiters stand ahead of `me`, queued at `mine`, alive or not.
pub(super) fn places_ahead(me: &str, mine: Millis, waiters: &[Waiter], now: Millis) -> usize {
    in_line(me, waiters, now)
        .iter()
        .filter(|w| is_ahead(w, me, mine))
        .count()
}

/// How many live waiters are ahead of `me`, queued at `mine`, in the queue: those whose
/// session has not run out, and near the front only those that renew it as usual.
pub(super) fn waiters_ahead(
    me: &str,
    mine: Millis,
    waiters: &[Waiter],
    concurrency: u32,
    now: Millis,
) -> usize {
    let near = near(concurrency);
    in_line(me, waiters, now)
        .iter()
        .enumerate()
        .filter(|(place, w)| w.alive && !(w.sparse && *place < near) && is_ahead(w, me, mine))
        .count()
}

/// How many wake-ups must happen at least before `me` (queued at `queued_at`) can take a slot,
/// as the SQLite store counts them: 0 when fewer live waiters are ahead of it than slots are
/// free; a node not queued or still in backoff waits for its own timer, counted as one.
pub(super) fn changes_before_turn(
    me: &str,
    queued_at: Option<Millis>,
    waiters: &[Waiter],
    concurrency: u32,
    held: usize,
    now: Millis,
) -> u64 {
    let Some(mine) = queued_at.filter(|q| *q <= now) else {
        return 1;
    };
    let ahead =
        i64::try_from(waiters_ahead(me, mine, waiters, concurrency, now)).unwrap_or(i64::MAX);
    let free = i64::from(concurrency) - i64::try_from(held).unwrap_or(i64::MAX);
    u64::try_from(ahead - free + 1).unwrap_or(0)
}

/// The node's place in the queue (its `queuedAt`) while it is queued.
pub(super) fn place_in_queue(status: &RotaNodeStatus) -> Option<Millis> {
    (status.state == NodeState::Queued)
        .then(|| status.queued_at.map(|t| t.0))
        .flatten()
}

/// A queued RotaNode as the queue sees it, read from its status (an object whose labels do
/// not tell it, see `queue_labels`); `None` for one that does not hold the queue up.
pub(super) fn waiter_of(object: &RotaNode, holders: &[&str], now: Millis) -> Option<Waiter> {
    // A blocked node keeps its place without holding the queue up.
    let s = object.status.as_ref().filter(|s| s.blocked.is_none())?;
    Some(Waiter {
        node: object.spec.node.clone(),
        queued_at: s.queued_at?.0,
        alive: s.session.as_ref().is_some_and(|x| x.deadline.0 > now),
        holds_slot: holders.contains(&object.spec.node.as_str()),
        sparse: s.session.as_ref().is_some_and(|x| x.sparse),
    })
}

/// The free slot (of `0..concurrency`) for the waiter `place` waiters behind the front, and
/// its Lease if it has one. The waiters at the front all take a slot at once (after a burst of
/// releases, or at the start): each its own, by its place in the queue, instead of all racing
/// for the first free one and all but one starting over.
pub(super) fn slot_for(
    leases: &[Lease],
    concurrency: u32,
    place: usize,
) -> Option<(u32, Option<&Lease>)> {
    let free: Vec<_> = (0..concurrency)
        .filter_map(|slot| {
            let name = slots::slot_name(slot);
            match leases
                .iter()
                .find(|l| l.metadata.name.as_deref() == Some(&name))
            {
                None => Some((slot, None)),
                Some(l) if slots::holder(l).is_none() => Some((slot, Some(l))),
                Some(_) => None,
            }
        })
        .collect();
    free.get(place).or(free.first()).copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: Millis = 1_800_000_000_000;

    fn waiter(node: &str, queued_at: Millis) -> Waiter {
        Waiter {
            node: node.into(),
            queued_at,
            alive: true,
            holds_slot: false,
            sparse: false,
        }
    }

    #[test]
    fn a_sparse_waiter_counts_far_back_but_not_near_the_front() {
        // One slot: near is 3 places, far 9.
        assert_eq!((near(1), far(1)), (3, 9));
        let mut waiters: Vec<Waiter> = (0..6)
            .map(|i| waiter(&format!("w{i}"), NOW - 60 + i))
            .collect();
        waiters[1].sparse = true;
        waiters[4].sparse = true;
        let me = ("me", NOW - 1);
        assert_eq!(places_ahead(me.0, me.1, &waiters, NOW), 6);
        assert_eq!(
            waiters_ahead(me.0, me.1, &waiters, 1, NOW),
            5,
            "w1 at place 1 renews sparsely: dead to the others; w4 at place 4 counts"
        );
        waiters[1].sparse = false;
        waiters[1].alive = false;
        assert_eq!(waiters_ahead(me.0, me.1, &waiters, 1, NOW), 5, "w1 ran out");
        assert_eq!(
            changes_before_turn(me.0, Some(me.1), &waiters, 1, 0, NOW),
            5
        );
    }

    #[test]
    fn the_front_of_the_queue_takes_a_free_slot() {
        let waiters = [
            waiter("a", NOW - 3),
            waiter("b", NOW - 2),
            waiter("c", NOW - 1),
        ];
        let turn = |me, q| changes_before_turn(me, Some(q), &waiters, 1, 0, NOW);
        assert_eq!(turn("a", NOW - 3), 0);
        assert_eq!(turn("b", NOW - 2), 1);
        assert_eq!(turn("c", NOW - 1), 2);
    }

    #[test]
    fn dead_waiters_and_holders_do_not_hold_the_queue_up() {
        let mut dead = waiter("a", NOW - 3);
        dead.alive = false;
        let mut holder = waiter("b", NOW - 2);
        holder.holds_slot = true;
        let waiters = [dead, holder, waiter("c", NOW - 1)];
        assert_eq!(
            changes_before_turn("c", Some(NOW - 1), &waiters, 2, 1, NOW),
            0
        );
        assert_eq!(
            changes_before_turn("c", Some(NOW - 1), &waiters, 1, 1, NOW),
            1,
            "no free slot: wait for one release"
        );
    }

    #[test]
    fn waiters_at_the_front_each_have_their_own_place() {
        let waiters = [
            waiter("a", NOW - 3),
            waiter("b", NOW - 2),
            waiter("c", NOW - 1),
        ];
        let places: Vec<usize> = waiters
            .iter()
            .map(|w| waiters_ahead(&w.node, w.queued_at, &waiters, 1, NOW))
            .collect();
        assert_eq!(places, [0, 1, 2]);
    }

    #[test]
    fn equal_times_go_by_name_and_backoff_waits_for_its_timer() {
        let waiters = [waiter("a", NOW - 1), waiter("b", NOW - 1)];
        assert_eq!(
            changes_before_turn("b", Some(NOW - 1), &waiters, 1, 0, NOW),
            1
        );
        assert_eq!(
            changes_before_turn("a", Some(NOW - 1), &waiters, 1, 0, NOW),
            0
        );
        assert_eq!(
            changes_before_turn("d", Some(NOW + 60_000), &waiters, 1, 0, NOW),
            1
        );
        assert_eq!(changes_before_turn("d", None, &waiters, 1, 0, NOW), 1);
    }

    #[test]
    fn each_waiter_at_the_front_takes_its_own_free_slot() {
        let leases = [
            slots::taken(0, None, "a", None, NOW - 9),
            slots::released(&slots::taken(1, None, "b", None, NOW - 9), NOW - 5),
        ];
        let slot = |concurrency, place| {
            slot_for(&leases, concurrency, place).map(|(s, l)| (s, l.is_some()))
        };
        assert_eq!(
            slot(3, 0),
            Some((1, true)),
            "a released Lease is taken over"
        );
        assert_eq!(
            slot(3, 1),
            Some((2, false)),
            "a slot without a Lease is created"
        );
        assert_eq!(
            slot(3, 5),
            Some((1, true)),
            "behind the free slots: the first"
        );
        assert_eq!(slot(1, 0), None, "slot 0 is held");
    }

    #[test]
    fn only_a_queued_node_has_a_place() {
        let mut status = RotaNodeStatus {
            state: NodeState::Queued,
            queued_at: Some(crate::crd::Timestamp(NOW - 1)),
            ..RotaNodeStatus::default()
        };
        assert_eq!(place_in_queue(&status), Some(NOW - 1));
        status.state = NodeState::Draining;
        assert_eq!(place_in_queue(&status), None);
    }
}
