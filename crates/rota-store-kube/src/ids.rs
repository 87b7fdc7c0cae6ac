//! History and request ids without a shared counter.
//!
//! Each node writes its history into its own RotaNode, so there is no table sequence to number
//! entries across nodes. An id is built from the entry's time instead, so that sorting the
//! merged histories by id sorts them by time:
//!
//! ```text
//!  63       22 21      8 7     0
//!  | ms since |  node   | seq  |
//!  |  2024    |  tag    |      |
//! ```
//!
//! - 41 bits of milliseconds since 2024-01-01 (enough until 2093);
//! - the node's 14-bit tag, which no two nodes of an installation share: a new node claims one
//!   in the upper half ([`CLAIMED_TAGS`]) by creating a Lease named after it, starting at a
//!   place its name hashes to and moving on past the ones taken ([`tag_candidates`]), so that a
//!   fleet's first start claims its tags at once instead of taking turns at one counter.
//!   Nodes of earlier versions took theirs in the lower half, from a counter in the
//!   `rota-config` ConfigMap, which is still the fallback for a node that finds the tags it
//!   tries all taken;
//! - an 8-bit sequence for entries of one node in the same millisecond. A node's times never go
//!   backwards ([`next`] takes the later of the clock and its last entry), and a full sequence
//!   moves on to the next millisecond, so a node's ids strictly increase.

use rota_store::Millis;

/// 2024-01-01T00:00:00Z.
pub const EPOCH: Millis = 1_704_067_200_000;
pub const TAG_BITS: u32 = 14;
pub const SEQ_BITS: u32 = 8;
pub const TAG_LIMIT: u32 = 1 << TAG_BITS;
const SEQ_LIMIT: u32 = 1 << SEQ_BITS;

/// The tags new nodes claim: the upper half, above every tag the counter of earlier versions
/// handed out (an installation would need 8192 nodes to reach it).
pub const CLAIMED_TAGS: std::ops::Range<u32> = TAG_LIMIT / 2..TAG_LIMIT;

/// The tags a node with `key` tries to claim, in order: every claimable tag once, starting at
/// the one `key` hashes to (FNV-1a, stable across versions and platforms), so that a node
/// started again finds its own claim first.
pub fn tag_candidates(key: &str) -> impl Iterator<Item = u32> {
    let hash = key.bytes().fold(0x811c_9dc5_u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    });
    let span = CLAIMED_TAGS.end - CLAIMED_TAGS.start;
    (0..span).map(move |i| CLAIMED_TAGS.start + (hash.wrapping_add(i) % span))
}

/// Where a new entry goes: its time and its sequence within that millisecond.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stamp {
    pub at: Millis,
    pub seq: u32,
}

impl Stamp {
    /// The entry's id for a node with `tag`.
    pub fn id(self, tag: u32) -> i64 {
        let ms = self.at.saturating_sub(EPOCH).max(0);
        (ms << (TAG_BITS + SEQ_BITS))
            | (i64::from(tag % TAG_LIMIT) << SEQ_BITS)
            | i64::from(self.seq % SEQ_LIMIT)
    }
}

/// The stamp of an entry written at `now` after a last entry stamped `last` (if any).
pub fn next(last: Option<Stamp>, now: Millis) -> Stamp {
    match last {
        Some(last) if now <= last.at => {
            if last.seq + 1 < SEQ_LIMIT {
                Stamp {
                    at: last.at,
                    seq: last.seq + 1,
                }
            } else {
                Stamp {
                    at: last.at + 1,
                    seq: 0,
                }
            }
        }
        _ => Stamp { at: now, seq: 0 },
    }
}

/// The stamp an existing entry was given, recovered from its id and time.
pub fn stamp_of(id: i64, at: Millis) -> Stamp {
    Stamp {
        at,
        seq: u32::try_from(id & i64::from(SEQ_LIMIT - 1)).unwrap_or(0),
    }
}

/// The time an id was stamped with (the time of its entry or request).
pub fn at_of(id: i64) -> Millis {
    EPOCH + (id >> (TAG_BITS + SEQ_BITS))
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Millis = 1_800_000_000_000;

    #[test]
    fn an_id_tells_its_time() {
        assert_eq!(at_of(Stamp { at: T, seq: 200 }.id(TAG_LIMIT - 1)), T);
    }

    #[test]
    fn ids_sort_by_time_first() {
        let early = Stamp { at: T, seq: 255 }.id(TAG_LIMIT - 1);
        let late = Stamp { at: T + 1, seq: 0 }.id(0);
        assert!(early < late);
    }

    #[test]
    fn nodes_with_different_tags_never_share_an_id() {
        let s = Stamp { at: T, seq: 3 };
        assert_ne!(s.id(1), s.id(2));
        assert_eq!(s.id(7) & 0xff, 3);
        assert_eq!((s.id(7) >> 8) & 0x3fff, 7);
    }

    #[test]
    fn entries_in_one_millisecond_count_up() {
        let first = next(None, T);
        let second = next(Some(first), T);
        assert_eq!(second, Stamp { at: T, seq: 1 });
        assert!(second.id(5) > first.id(5));
    }

    #[test]
    fn a_clock_going_back_does_not_move_ids_back() {
        let last = Stamp { at: T, seq: 0 };
        let next = next(Some(last), T - 5000);
        assert_eq!(next, Stamp { at: T, seq: 1 });
    }

    #[test]
    fn a_full_millisecond_moves_to_the_next() {
        let last = Stamp { at: T, seq: 255 };
        assert_eq!(next(Some(last), T), Stamp { at: T + 1, seq: 0 });
    }

    #[test]
    fn a_stamp_survives_the_round_trip_through_its_id() {
        let s = Stamp { at: T, seq: 17 };
        assert_eq!(stamp_of(s.id(99), T), s);
    }

    #[test]
    fn a_node_tries_every_claimable_tag_once_from_where_its_name_hashes() {
        let tried: Vec<u32> = tag_candidates("node-1").collect();
        assert_eq!(
            tried.len(),
            (CLAIMED_TAGS.end - CLAIMED_TAGS.start) as usize
        );
        assert!(tried.iter().all(|t| CLAIMED_TAGS.contains(t)));
        let distinct: std::collections::BTreeSet<u32> = tried.iter().copied().collect();
        assert_eq!(distinct.len(), tried.len());
        assert_eq!(tag_candidates("node-1").next(), tried.first().copied());
    }

    #[test]
    fn nodes_of_a_fleet_start_at_different_tags() {
        let starts: std::collections::BTreeSet<u32> = (0..1000)
            .filter_map(|i| tag_candidates(&format!("worker-{i:04}")).next())
            .collect();
        assert!(starts.len() > 900, "{} distinct starts", starts.len());
    }

    #[test]
    fn ids_fit_until_2093() {
        let end_of_2092 = 3_881_174_400_000;
        let id = Stamp {
            at: end_of_2092,
            seq: 255,
        }
        .id(TAG_LIMIT - 1);
        assert!(id > 0, "no overflow into the sign bit");
    }
}
