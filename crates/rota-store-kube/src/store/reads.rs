//! Reads: a node's record (`Store::record`), the fleet's (`Store::fleet`), the past
//! (`Store::read_history`: a RotaNode's own records and the `RotaWindow`s it lists) and the
//! settings (`Store::settings`).

use std::collections::HashMap;

use futures::future::try_join_all;
use kube::api::ListParams;
use rota_core::NodeName;
use rota_kube_api::crd::{RequestStatus, RotaNode, RotaNodeStatus};
use rota_kube_api::slots;
use rota_kube_api::window::RotaWindowSpec;
use rota_store::{Fleet, History, HistoryFilter, NodeOverview, Part, Result, Settings};

use super::settings::settings_of;
use super::{KubeStore, node_name};
use crate::error::Context;
use crate::record::{self, history_entry, request_record, step_record};

const ROTA_WINDOWS: &str = "rotawindows.rota.dev";
const LEASES: &str = "leases.coordination.k8s.io";
/// Objects listed per request when reading every node's windows.
const PAGE: u32 = 500;

/// A node's past: its RotaNode's status, and the windows it lists, oldest first.
struct Past {
    node: NodeName,
    status: RotaNodeStatus,
    windows: Vec<RotaWindowSpec>,
}

impl KubeStore {
    /// `Store::record`: the node's RotaNode as this handle knows it (its agent's, which its
    /// watch keeps current), else read.
    pub(super) async fn read_record(&self, node: &NodeName) -> Result<Option<NodeOverview>> {
        let object = self.rota_node(node, false).await?;
        Ok(object.and_then(|o| Some(record::overview(node, o.status.as_ref()?))))
    }

    /// `Store::fleet`: every RotaNode and every slot Lease, in two lists.
    pub(super) async fn read_fleet(&self) -> Result<Fleet> {
        let selector = self.selector();
        let (objects, leases, notice) = tokio::try_join!(
            self.list_rota_nodes(&selector),
            self.list_slot_leases(),
            self.no_scheduler()
        )?;
        let mut nodes = Vec::new();
        for object in &objects {
            let node = node_name(object)?;
            if let Some(status) = &object.status {
                nodes.push(record::overview(&node, status));
            }
        }
        nodes.sort_by(|a, b| a.record.node.cmp(&b.record.node));
        let mut slots = leases
            .iter()
            .filter_map(slots::slot_holder)
            .collect::<Result<Vec<_>, _>>()
            .map_err(crate::KubeError::from)?;
        slots.sort_by_key(|h| h.slot);
        let notice = notice.map(|state| {
            crate::error::KubeError::NoScheduler {
                lease: self.lease_path(slots::LEADER_LEASE),
                state,
            }
            .to_string()
        });
        Ok(Fleet {
            nodes,
            slots,
            notice,
        })
    }

    async fn list_slot_leases(&self) -> Result<Vec<k8s_openapi::api::coordination::v1::Lease>> {
        let params = ListParams::default().labels(slots::SLOT_LABEL);
        let list = self.inner.leases.list(&params).await.context(
            "list",
            LEASES,
            format!(
                "{} with label {}",
                self.inner.config.namespace,
                slots::SLOT_LABEL
            ),
        )?;
        Ok(list.items)
    }

    /// `Store::read_history` of the parts kept with the nodes (not the audit trail).
    pub(super) async fn read_past(&self, filter: &HistoryFilter, part: Part) -> Result<History> {
        let mut history = History::default();
        for past in self.pasts(filter).await? {
            let node = &past.node;
            let windows = past.windows.iter();
            match part {
                Part::Entries => {
                    let own = past.status.history.iter();
                    let all = windows.flat_map(|w| &w.history).chain(own);
                    history
                        .entries
                        .extend(all.map(|h| history_entry(node, h)).filter(|e| {
                            filter.process.as_ref().is_none_or(|p| &e.process == p)
                                && filter.event.is_none_or(|ev| e.event == ev)
                                && filter.since.is_none_or(|s| e.at >= s)
                                && filter.until.is_none_or(|u| e.at <= u)
                        }));
                }
                Part::Steps => {
                    let all = windows.flat_map(|w| &w.steps).chain(&past.status.steps);
                    history
                        .steps
                        .extend(all.map(|s| step_record(node, s)).filter(|s| {
                            filter.since.is_none_or(|since| s.at >= since)
                                && filter.until.is_none_or(|until| s.at <= until)
                        }));
                }
                Part::Requests => {
                    history.requests.extend(
                        every_request(&past)
                            .into_iter()
                            .map(|r| request_record(node, r))
                            .filter(|r| filter.process.as_ref().is_none_or(|p| *p == r.process)),
                    );
                }
                Part::Audit => {}
            }
        }
        history
            .entries
            .sort_by(|a, b| (a.at, &a.node, a.id).cmp(&(b.at, &b.node, b.id)));
        history
            .requests
            .sort_by(|a, b| (a.created_at, &a.node, a.id).cmp(&(b.created_at, &b.node, b.id)));
        Ok(history)
    }

    /// The RotaNodes `filter` names (one, or all), each with the windows it lists.
    async fn pasts(&self, filter: &HistoryFilter) -> Result<Vec<Past>> {
        let pasts = match &filter.node {
            Some(node) => {
                let Some(object) = self.rota_node(node, true).await? else {
                    return Ok(Vec::new());
                };
                let status = object.status.unwrap_or_else(|| record::new_status(0));
                let reads = status.windows.iter().map(|name| async move {
                    self.inner.rota_windows.get_opt(name).await.context(
                        "get",
                        ROTA_WINDOWS,
                        name.clone(),
                    )
                });
                let windows = try_join_all(reads).await?;
                let windows = windows.into_iter().flatten().map(|w| w.spec).collect();
                vec![Past {
                    node: node.clone(),
                    status,
                    windows,
                }]
            }
            None => {
                let selector = self.selector();
                let (objects, windows) =
                    tokio::try_join!(self.list_rota_nodes(&selector), self.list_windows())?;
                let mut by_name: HashMap<String, RotaWindowSpec> = windows;
                let mut pasts = Vec::new();
                for object in objects {
                    pasts.push(past_of(object, &mut by_name)?);
                }
                pasts.sort_by(|a, b| a.node.cmp(&b.node));
                pasts
            }
        };
        Ok(pasts)
    }

    /// Every RotaWindow of the installation, by name, a page at a time.
    async fn list_windows(&self) -> Result<HashMap<String, RotaWindowSpec>> {
        let selector = self.selector();
        let mut params = ListParams::default().labels(&selector).limit(PAGE);
        let mut all = HashMap::new();
        loop {
            let page = self.inner.rota_windows.list(&params).await.context(
                "list",
                ROTA_WINDOWS,
                format!("with labels {selector}"),
            )?;
            for window in page.items {
                if let Some(name) = window.metadata.name {
                    all.insert(name, window.spec);
                }
            }
            match page.metadata.continue_ {
                Some(token) if !token.is_empty() => params = params.continue_token(&token),
                _ => return Ok(all),
            }
        }
    }

    /// `Store::settings`: one read of `rota-config` (see `config_map`).
    pub(super) async fn read_settings(&self) -> Result<Settings> {
        settings_of(self.config_map().await?.as_ref())
    }
}

fn past_of(object: RotaNode, windows: &mut HashMap<String, RotaWindowSpec>) -> Result<Past> {
    let node = node_name(&object)?;
    let status = object.status.unwrap_or_else(|| record::new_status(0));
    let listed = status
        .windows
        .iter()
        .filter_map(|name| windows.remove(name));
    Ok(Past {
        windows: listed.collect(),
        node,
        status,
    })
}

/// Every request of a node, each once: those of its windows, then its own closed and open ones,
/// and the procedures it ran whose windows it no longer keeps.
fn every_request(past: &Past) -> Vec<&RequestStatus> {
    let mut all: Vec<&RequestStatus> = Vec::new();
    let own = past.status.closed.iter().chain(&past.status.requests);
    for request in past.windows.iter().flat_map(|w| &w.closed).chain(own) {
        all.retain(|r| r.id != request.id);
        all.push(request);
    }
    for ran in &past.status.procedures {
        if !all.iter().any(|r| r.id == ran.id) {
            all.push(ran);
        }
    }
    all
}
