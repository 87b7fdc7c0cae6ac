//! A node's history in the cluster: the RotaNode's own entries and its ring of `RotaWindow`s
//! (see `history_ring`). Every write of a RotaNode first moves the entries that are due to the
//! next ring place; `Store::history` reads both back.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{ListParams, PostParams};
use kube::{Api, Resource, ResourceExt};
use rota_core::NodeName;
use rota_kube_client::is_conflict;
use rota_store::{HistoryEntry, HistoryFilter, Result, StepRecord};
use serde_json::json;

use super::ledger::LEDGER_LABEL;
use super::{KubeStore, NAMESPACE_LABEL, node_name};
use crate::crd::{ArchivedRequest, HistoryStatus, RotaNode, RotaNodeStatus, StepStatus};
use crate::error::Context;
use crate::history_ring;
use crate::window::{NODE_TAG_LABEL, RotaWindow, RotaWindowSpec, ring_name};

pub(super) const ROTA_WINDOWS: &str = "rotawindows.rota.dev";
/// RotaWindows listed per request when reading every node's history.
const PAGE: u32 = 500;

impl KubeStore {
    pub(super) fn rota_windows(&self) -> Api<RotaWindow> {
        Api::all(self.inner.rota_nodes.clone().into_client())
    }

    /// Before `object` is written: writes its history to the next RotaWindow when it is due,
    /// and removes the entries from `object` once that is done (the write of `object` is the
    /// commit). Leaves them where they are when the ring place holds a chunk that another
    /// writer of the same generation may still commit.
    pub(super) async fn move_history(&self, object: &mut RotaNode) -> Result<()> {
        let Some(owner) = Owner::of(object) else {
            return Ok(());
        };
        let Some(status) = object.status.as_mut() else {
            return Ok(());
        };
        if history_ring::due(status).is_none() {
            return Ok(());
        }
        // A node's first chunk, or a count an older rota dropped: one list finds where the
        // ring stands.
        if status.history_ring.is_none() {
            let selector = format!("{},{NODE_TAG_LABEL}={}", self.selector(), status.tag);
            let windows = self.list_windows(&selector).await?;
            let own = windows.iter().filter(|w| owned_by(w, &owner.uid));
            status.history_ring = history_ring::recovered(own.map(|w| &w.spec), &status.history);
        }
        let Some((sequence, entries)) = history_ring::due(status) else {
            return Ok(());
        };
        let window = owner.window(
            &ring_name(&owner.name, sequence),
            &self.inner.config.namespace,
            (NODE_TAG_LABEL, status.tag),
            sequence,
            Chunk::History {
                entries: entries.to_vec(),
                steps: status.steps.clone(),
            },
        );
        if self
            .write_window(window, &owner.uid, owner.generation)
            .await?
        {
            history_ring::commit(status);
        }
        Ok(())
    }

    /// Writes `window` to its ring place; `false` when the place holds a chunk this writer must
    /// leave (see `history_ring::may_overwrite`). One request unless someone else wrote the
    /// place for this lap: a create on the first lap, then a JSON patch that applies only to
    /// the chunk of the lap before.
    async fn write_window(&self, window: RotaWindow, owner: &str, generation: i64) -> Result<bool> {
        let api = self.rota_windows();
        let name = window.name_any();
        let sequence = window.spec.sequence;
        let first = match sequence.checked_sub(crate::window::RING_SIZE) {
            None => api.create(&PostParams::default(), &window).await.map(drop),
            Some(before) => self.patch_lap(&name, before, &window).await,
        };
        match first {
            Ok(()) => return Ok(true),
            Err(kube::Error::Api(status)) if matches!(status.code, 404 | 409 | 422) => {}
            Err(e) => return Err(e).context("write", ROTA_WINDOWS, name),
        }
        let found = api
            .get_opt(&name)
            .await
            .context("get", ROTA_WINDOWS, name.clone())?;
        let written = match found {
            None => api.create(&PostParams::default(), &window).await,
            Some(found) => {
                let found_owner = owner_uid(&found);
                if !history_ring::may_overwrite(
                    &found.spec,
                    found_owner,
                    owner,
                    sequence,
                    generation,
                ) {
                    return Ok(false);
                }
                let mut window = window;
                window.metadata.resource_version = found.resource_version();
                api.replace(&name, &PostParams::default(), &window).await
            }
        };
        match written {
            Ok(_) => Ok(true),
            Err(e) if is_conflict(&e) => Ok(false),
            Err(e) => Err(e).context("write", ROTA_WINDOWS, name),
        }
    }

    /// Replaces the RotaWindow `name` with `window` if it holds chunk `before` (the same ring
    /// place, one lap earlier): a JSON patch whose `test` fails (422) otherwise.
    async fn patch_lap(
        &self,
        name: &str,
        before: u64,
        window: &RotaWindow,
    ) -> Result<(), kube::Error> {
        let patch = json!([
            { "op": "test", "path": "/spec/sequence", "value": before },
            { "op": "replace", "path": "/spec", "value": window.spec },
            { "op": "replace", "path": "/metadata/labels", "value": window.metadata.labels },
            {
                "op": "replace",
                "path": "/metadata/ownerReferences",
                "value": window.metadata.owner_references,
            },
        ]);
        let body = serde_json::to_vec(&patch).map_err(kube::Error::SerdeError)?;
        let request = http::Request::patch(RotaWindow::url_path(&(), None) + "/" + name)
            .header(http::header::CONTENT_TYPE, "application/json-patch+json")
            .body(body)
            .map_err(kube::Error::HttpError)?;
        self.inner
            .rota_nodes
            .clone()
            .into_client()
            .request::<RotaWindow>(request)
            .await
            .map(drop)
    }

    /// History entries: the RotaNodes' entries and their committed RotaWindows', filtered,
    /// each once, by id.
    pub(super) async fn read_entries(&self, filter: &HistoryFilter) -> Result<Vec<HistoryEntry>> {
        let mut entries = Vec::new();
        for (node, status, chunks) in self.read_rings(filter).await? {
            entries.extend(
                history_ring::merged(&node, &status, &chunks)
                    .into_iter()
                    .filter(|e| {
                        filter.process.as_ref().is_none_or(|p| &e.process == p)
                            && filter.event.is_none_or(|ev| e.event == ev)
                            && filter.since.is_none_or(|s| e.at >= s)
                            && filter.until.is_none_or(|u| e.at <= u)
                    }),
            );
        }
        entries.sort_by_key(|e| e.id);
        Ok(entries)
    }

    /// Steps: the RotaNodes' steps and their committed RotaWindows', each node's in
    /// order, the nodes by name.
    pub(super) async fn read_steps(&self, filter: &HistoryFilter) -> Result<Vec<StepRecord>> {
        let mut steps = Vec::new();
        for (node, status, chunks) in self.read_rings(filter).await? {
            steps.extend(
                history_ring::merged_steps(&node, &status, &chunks)
                    .into_iter()
                    .filter(|s| {
                        filter.since.is_none_or(|since| s.at >= since)
                            && filter.until.is_none_or(|until| s.at <= until)
                    }),
            );
        }
        Ok(steps)
    }

    /// The RotaNodes `filter` names (one, or all), each with its status and its ring's
    /// RotaWindows: two requests.
    async fn read_rings(
        &self,
        filter: &HistoryFilter,
    ) -> Result<Vec<(NodeName, RotaNodeStatus, Vec<RotaWindowSpec>)>> {
        let objects = match &filter.node {
            Some(node) => self.get_rota_node(node).await?.into_iter().collect(),
            None => self.list_rota_nodes(&self.selector()).await?,
        };
        let selector = match objects.as_slice() {
            [] => return Ok(Vec::new()),
            [one] if filter.node.is_some() => {
                let tag = one.status.as_ref().map_or(0, |s| s.tag);
                format!("{},{NODE_TAG_LABEL}={tag}", self.selector())
            }
            _ => self.selector(),
        };
        let mut windows: BTreeMap<String, Vec<RotaWindowSpec>> = BTreeMap::new();
        for window in self.list_windows(&selector).await? {
            if window.labels().contains_key(LEDGER_LABEL) {
                continue;
            }
            let Some(owner) = owner_uid(&window).map(str::to_owned) else {
                continue;
            };
            windows.entry(owner).or_default().push(window.spec);
        }
        let mut rings = Vec::new();
        for object in objects {
            let node = node_name(&object)?;
            let uid = object.uid().unwrap_or_default();
            let chunks = windows.remove(&uid).unwrap_or_default();
            rings.push((node, object.status.unwrap_or_default(), chunks));
        }
        rings.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(rings)
    }

    /// The RotaWindows `selector` picks, a page at a time.
    pub(super) async fn list_windows(&self, selector: &str) -> Result<Vec<RotaWindow>> {
        let api = self.rota_windows();
        let mut params = ListParams::default().labels(selector).limit(PAGE);
        let mut all = Vec::new();
        loop {
            let page = api.list(&params).await.context(
                "list",
                ROTA_WINDOWS,
                format!("with labels {selector}"),
            )?;
            all.extend(page.items);
            match page.metadata.continue_ {
                Some(token) if !token.is_empty() => params = params.continue_token(&token),
                _ => return Ok(all),
            }
        }
    }
}

/// What a RotaWindow written for a RotaNode takes from it: its name (the RotaWindow's is made
/// from it), its uid and an owner reference (the garbage collector deletes the RotaWindow with
/// it), the generation it was read at, and its node.
pub(super) struct Owner {
    pub(super) name: String,
    pub(super) uid: String,
    pub(super) generation: i64,
    pub(super) owner_ref: Option<OwnerReference>,
    pub(super) node: String,
}

/// What a RotaWindow of a node holds: a chunk of its history ring, or its procedure ledger.
pub(super) enum Chunk {
    History {
        entries: Vec<HistoryStatus>,
        steps: Vec<StepStatus>,
    },
    Ledger(Vec<ArchivedRequest>),
}

impl Owner {
    /// `None` for a RotaNode not yet created (without a name or uid).
    pub(super) fn of(object: &RotaNode) -> Option<Owner> {
        Some(Owner {
            name: object.meta().name.clone()?,
            uid: object.meta().uid.clone()?,
            generation: object.meta().generation.unwrap_or(0),
            owner_ref: object.owner_ref(&()),
            node: object.spec.node.clone(),
        })
    }

    /// The RotaWindow `name` of this RotaNode holding `chunk` as number `sequence`, cut from
    /// its current generation, owned by it (so that it goes with it), and labelled with rota's
    /// `namespace` and `label`, the node's tag under the key that tells what it holds.
    pub(super) fn window(
        &self,
        name: &str,
        namespace: &str,
        label: (&str, u32),
        sequence: u64,
        chunk: Chunk,
    ) -> RotaWindow {
        let (entries, steps, procedure_requests) = match chunk {
            Chunk::History { entries, steps } => (entries, steps, Vec::new()),
            Chunk::Ledger(requests) => (Vec::new(), Vec::new(), requests),
        };
        let mut window = RotaWindow::new(
            name,
            RotaWindowSpec {
                node: self.node.clone(),
                sequence,
                cut_at_generation: self.generation,
                entries,
                procedure_requests,
                steps,
            },
        );
        window.metadata.labels = Some(BTreeMap::from([
            (NAMESPACE_LABEL.into(), namespace.to_owned()),
            (label.0.into(), label.1.to_string()),
        ]));
        window.metadata.owner_references = self.owner_ref.clone().map(|o| vec![o]);
        window
    }
}

/// The uid of the RotaNode that owns `window`.
pub(super) fn owner_uid(window: &RotaWindow) -> Option<&str> {
    window.owner_references().first().map(|o| o.uid.as_str())
}

fn owned_by(window: &RotaWindow, uid: &str) -> bool {
    owner_uid(window) == Some(uid)
}
