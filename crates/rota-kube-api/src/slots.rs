//! Slots as `coordination.k8s.io/v1` Leases `rota-slot-<i>`.
//!
//! A Lease is free when it has no `holderIdentity` (or does not exist). It never has a
//! `leaseDurationSeconds`: a slot is held until its holder releases it, an operator unlocks the
//! node, or the holder's Node object is deleted — never until a timer runs out, which would let
//! a second node go down while the first one is still rebooting slowly (kured's bug).
//!
//! `acquireTime` is when the holder took the slot; on a free Lease `renewTime` is when the last
//! holder gave it back. A new holder's `acquireTime` is always after that release, even if its
//! clock is behind, and the holder's history entries are never dated before its `acquireTime`;
//! so in the merged history a slot's next `started` always sorts after the previous holder's
//! release.

use std::collections::BTreeMap;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, OwnerReference};
use k8s_openapi::jiff;
use rota_core::NodeName;
use rota_store::{Millis, SlotHolder};

use crate::ApiError;

pub const SLOT_PREFIX: &str = "rota-slot-";
/// The Lease the schedulers elect their leader on, in rota's namespace.
pub const LEADER_LEASE: &str = "rota-scheduler";
/// Label on every slot Lease (value: the slot index); the watch selects on it.
pub const SLOT_LABEL: &str = "rota.dev/slot";

pub fn slot_name(slot: u32) -> String {
    format!("{SLOT_PREFIX}{slot}")
}

/// The slot a Lease stands for, from its name.
pub fn slot_of(lease: &Lease) -> Option<u32> {
    lease
        .metadata
        .name
        .as_deref()?
        .strip_prefix(SLOT_PREFIX)?
        .parse()
        .ok()
}

pub fn holder(lease: &Lease) -> Option<&str> {
    lease
        .spec
        .as_ref()?
        .holder_identity
        .as_deref()
        .filter(|h| !h.is_empty())
}

fn millis(t: &MicroTime) -> Millis {
    t.0.as_millisecond()
}

fn micro_time(at: Millis) -> Option<MicroTime> {
    jiff::Timestamp::from_millisecond(at).ok().map(MicroTime)
}

pub fn acquired_at(lease: &Lease) -> Option<Millis> {
    lease.spec.as_ref()?.acquire_time.as_ref().map(millis)
}

/// The slot a Lease stands for and who holds it, as the store reports them; `None` when it is
/// no slot or free. A holder that is no node name (a hand edit) is refused naming the Lease and
/// the field.
pub fn slot_holder(lease: &Lease) -> Option<Result<SlotHolder, ApiError>> {
    let (slot, holder) = (slot_of(lease)?, holder(lease)?);
    let holder = NodeName::new(holder).map_err(|e| ApiError::Unreadable {
        kind: "Lease",
        name: format!(
            "{}/{}",
            lease.metadata.namespace.as_deref().unwrap_or_default(),
            lease.metadata.name.as_deref().unwrap_or_default()
        ),
        field: "spec.holderIdentity",
        problem: e.to_string(),
    });
    Some(holder.map(|node| SlotHolder {
        slot,
        node,
        acquired_at: acquired_at(lease).unwrap_or(0),
    }))
}

/// When the last holder gave a free Lease back.
pub fn released_at(lease: &Lease) -> Option<Millis> {
    let spec = lease.spec.as_ref()?;
    if holder(lease).is_some() {
        return None;
    }
    spec.renew_time.as_ref().map(millis)
}

/// The ownerReference that makes the garbage collector delete (free) the Lease when its
/// holder's Node is deleted.
pub fn node_owner(node: &Node) -> Option<OwnerReference> {
    Some(OwnerReference {
        api_version: "v1".into(),
        kind: "Node".into(),
        name: node.metadata.name.clone()?,
        uid: node.metadata.uid.clone()?,
        ..OwnerReference::default()
    })
}

/// The Node (name, uid) a held Lease is tied to, if any.
pub fn owner_node(lease: &Lease) -> Option<(&str, &str)> {
    lease
        .metadata
        .owner_references
        .as_ref()?
        .iter()
        .find(|o| o.kind == "Node" && o.api_version == "v1")
        .map(|o| (o.name.as_str(), o.uid.as_str()))
}

/// `previous` (the Lease as read, or `None` to create it) taken by `node` at `at`.
pub fn taken(
    slot: u32,
    previous: Option<&Lease>,
    node: &str,
    owner: Option<OwnerReference>,
    at: Millis,
) -> Lease {
    let transitions = previous
        .and_then(|l| l.spec.as_ref())
        .and_then(|s| s.lease_transitions)
        .unwrap_or(0);
    Lease {
        metadata: ObjectMeta {
            name: Some(slot_name(slot)),
            labels: Some(BTreeMap::from([(SLOT_LABEL.into(), slot.to_string())])),
            resource_version: previous.and_then(|l| l.metadata.resource_version.clone()),
            owner_references: owner.map(|o| vec![o]),
            ..ObjectMeta::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(node.to_string()),
            acquire_time: micro_time(at),
            renew_time: micro_time(at),
            lease_transitions: Some(transitions.saturating_add(1)),
            ..LeaseSpec::default()
        }),
    }
}

/// A held Lease, renewed at `at` (the fence's proof of ownership).
pub fn renewed(lease: &Lease, at: Millis) -> Lease {
    let mut lease = lease.clone();
    if let Some(spec) = lease.spec.as_mut() {
        spec.renew_time = micro_time(at);
    }
    lease
}

/// A held Lease given back at `at`.
pub fn released(lease: &Lease, at: Millis) -> Lease {
    let mut lease = lease.clone();
    lease.metadata.owner_references = None;
    let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
    spec.holder_identity = None;
    spec.acquire_time = None;
    spec.renew_time = micro_time(at);
    lease
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Millis = 1_800_000_000_000;

    #[test]
    fn a_taken_lease_has_no_duration_and_names_its_holder() {
        let lease = taken(2, None, "node-a", None, T);
        assert_eq!(slot_of(&lease), Some(2));
        assert_eq!(holder(&lease), Some("node-a"));
        assert_eq!(acquired_at(&lease), Some(T));
        let spec = lease.spec.as_ref().expect("spec");
        assert_eq!(spec.lease_duration_seconds, None, "never a TTL");
        assert_eq!(spec.lease_transitions, Some(1));
    }

    #[test]
    fn a_released_lease_remembers_when() {
        let lease = released(&taken(0, None, "node-a", None, T), T + 5);
        assert_eq!(holder(&lease), None);
        assert_eq!(released_at(&lease), Some(T + 5));
        assert_eq!(acquired_at(&lease), None);
        let again = taken(0, Some(&lease), "node-b", None, T + 9);
        assert_eq!(again.spec.and_then(|s| s.lease_transitions), Some(2));
    }

    #[test]
    fn names_that_are_not_slots_are_ignored() {
        let mut lease = taken(0, None, "x", None, T);
        lease.metadata.name = Some("rota-slot-x".into());
        assert_eq!(slot_of(&lease), None);
    }
}
