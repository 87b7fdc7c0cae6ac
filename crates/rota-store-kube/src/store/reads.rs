//! Reads of nodes' records (`Store::record`, `Store::fleet`), of every request ever made, and
//! of the fleet's settings (`Store::settings`).

use rota_core::NodeName;
use rota_store::{
    Fleet, HistoryFilter, NodeOverview, NodeRecord, Pause, RequestRecord, Result, Settings,
};

use super::settings::{PAUSED_COLUMN, PAUSED_KEY, RESUMED_COLUMN, RESUMED_KEY, concurrency_of};
use super::slot_leases::held_by;
use super::{KubeStore, node_name};
use crate::crd::RotaNodeStatus;
use crate::{slots, status};

impl KubeStore {
    /// `Store::record`. The agent reads its node at the start of every pass: right after its own
    /// write, that write's answer (see `own_object`), and else one round trip, not two.
    pub(super) async fn read_record(&self, node: &NodeName) -> Result<Option<NodeOverview>> {
        if let Some(known) = self.recent(node).filter(|k| k.with_lease) {
            let status = known.object.status.unwrap_or_default();
            let record = status::node_record(node, &status, self.own_slot(node));
            return Ok(Some(overview(record, &status)));
        }
        let (object, leases) = tokio::try_join!(self.get_rota_node(node), self.list_leases())?;
        let Some(object) = object else {
            return Ok(None);
        };
        if self.local_session(node).is_some() {
            self.cache(node, &object, true);
            match held_by(&leases, node) {
                Some(lease) => self.cache_lease(node, lease),
                None => self.forget_lease(node),
            }
        }
        let record = self.record_of(&object, &leases)?;
        Ok(Some(overview(record, &object.status.unwrap_or_default())))
    }

    /// `Store::fleet`: every RotaNode and every slot Lease, in two lists.
    pub(super) async fn read_fleet(&self) -> Result<Fleet> {
        let selector = self.selector();
        let (objects, leases) =
            tokio::try_join!(self.list_rota_nodes(&selector), self.list_leases())?;
        let mut nodes = objects
            .iter()
            .map(|object| {
                let record = self.record_of(object, &leases)?;
                let status = object.status.clone().unwrap_or_default();
                Ok(overview(record, &status))
            })
            .collect::<Result<Vec<_>>>()?;
        nodes.sort_by(|a, b| a.record.node.cmp(&b.record.node));
        let mut slots = leases
            .iter()
            .filter_map(slots::slot_holder)
            .collect::<Result<Vec<_>, _>>()?;
        slots.sort_by_key(|h| h.slot);
        Ok(Fleet { nodes, slots })
    }

    /// Every request ever made that `filter` admits, open or closed, oldest first: the
    /// RotaNodes' and their procedure ledgers'.
    pub(super) async fn read_requests(&self, filter: &HistoryFilter) -> Result<Vec<RequestRecord>> {
        let mut all = Vec::new();
        let selector = self.selector();
        let (objects, ledgers) =
            tokio::try_join!(self.list_rota_nodes(&selector), self.all_ledgers())?;
        for object in objects {
            let node = node_name(&object)?;
            let ledger = object
                .metadata
                .uid
                .as_ref()
                .and_then(|uid| ledgers.get(uid))
                .cloned()
                .unwrap_or_default();
            let status = object.status.unwrap_or_default();
            all.extend(
                status::every_request(&status, &ledger)
                    .map(|r| status::request_record(&node, &r))
                    .filter(|r| {
                        // Requests have no event, and are read whatever their time.
                        filter.node.as_ref().is_none_or(|n| *n == r.node)
                            && filter.process.as_ref().is_none_or(|p| *p == r.process)
                    }),
            );
        }
        all.sort_by_key(|r| r.id);
        Ok(all)
    }

    /// `Store::settings`: one read of `rota-config` (see `config_map`).
    pub(super) async fn read_settings(&self) -> Result<Settings> {
        let map = self.config_map().await?;
        let value = |key: &str| {
            map.as_ref()
                .and_then(|c| c.data.as_ref())
                .and_then(|d| d.get(key))
                .map(String::as_str)
        };
        Ok(Settings {
            concurrency: concurrency_of(map.as_ref())?,
            pause: rota_store::decode_setting(PAUSED_COLUMN, value(PAUSED_KEY), Pause::decode)?,
            resumed_at: rota_store::decode_setting(RESUMED_COLUMN, value(RESUMED_KEY), str::parse)?,
        })
    }
}

/// A node's whole record: `record`, with the open requests (by id) and the backoffs (by
/// process) of its `status`.
fn overview(record: NodeRecord, status: &RotaNodeStatus) -> NodeOverview {
    let node = &record.node;
    let mut open_requests: Vec<_> = status::open_requests(status)
        .map(|r| status::request_record(node, r))
        .collect();
    open_requests.sort_by_key(|r| r.id);
    let mut backoffs: Vec<_> = status
        .backoff
        .iter()
        .map(|b| status::backoff_record(node, b))
        .collect();
    backoffs.sort_by_key(|b| b.process.to_string());
    NodeOverview {
        record,
        open_requests,
        backoffs,
    }
}
