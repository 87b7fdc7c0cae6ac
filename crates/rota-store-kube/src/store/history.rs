//! A node's history in the cluster: the RotaNode's own entries and its ring of `RotaWindow`s
//! (see `history_ring`). Every write of a RotaNode first moves the entries that are due to the
//! next ring place; `Store::history` reads both back.

use std::collections::BTreeMap;

use kube::api::{ListParams, PostParams};
use kube::{Api, Resource, ResourceExt};
use rota_kube_client::is_conflict;
use rota_store::{HistoryEntry, HistoryFilter, Result};
use serde_json::json;

use super::{KubeStore, NAMESPACE_LABEL, node_name};
use crate::crd::RotaNode;
use crate::error::Context;
use crate::history_ring;
use crate::window::{NODE_TAG_LABEL, RotaWindow, RotaWindowSpec, ring_name};

const ROTA_WINDOWS: &str = "rotawindows.rota.dev";
/// RotaWindows listed per request when reading every node's history.
const PAGE: u32 = 500;

impl KubeStore {
    fn rota_windows(&self) -> Api<RotaWindow> {
        Api::all(self.inner.rota_nodes.clone().into_client())
    }

    /// Before `object` is written: writes its history to the next RotaWindow when it is due,
    /// and removes the entries from `object` once that is done (the write of `object` is the
    /// commit). Leaves them where they are when the ring place holds a chunk that another
    /// writer of the same generation may still commit.
    pub(super) async fn move_history(&self, object: &mut RotaNode) -> Result<()> {
        let (Some(owner), Some(uid)) = (object.meta().name.clone(), object.meta().uid.clone())
        else {
            return Ok(());
        };
        let generation = object.meta().generation.unwrap_or(0);
        let owner_ref = object.owner_ref(&());
        let node = object.spec.node.clone();
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
            let own = windows.iter().filter(|w| owned_by(w, &uid));
            status.history_ring = history_ring::recovered(own.map(|w| &w.spec), &status.history);
        }
        let Some((sequence, entries)) = history_ring::due(status) else {
            return Ok(());
        };
        let mut window = RotaWindow::new(
            &ring_name(&owner, sequence),
            RotaWindowSpec {
                node,
                sequence,
                cut_at_generation: generation,
                entries: entries.to_vec(),
            },
        );
        window.metadata.labels = Some(BTreeMap::from([
            (NAMESPACE_LABEL.into(), self.inner.config.namespace.clone()),
            (NODE_TAG_LABEL.into(), status.tag.to_string()),
        ]));
        window.metadata.owner_references = owner_ref.map(|o| vec![o]);
        if self.write_window(window, &uid, generation).await? {
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

    /// `Store::history`: the RotaNodes' entries and their committed RotaWindows', filtered,
    /// each once, by id.
    pub(super) async fn read_history(&self, filter: &HistoryFilter) -> Result<Vec<HistoryEntry>> {
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
            let Some(owner) = owner_uid(&window).map(str::to_owned) else {
                continue;
            };
            windows.entry(owner).or_default().push(window.spec);
        }
        let mut entries = Vec::new();
        for object in objects {
            let node = node_name(&object)?;
            let uid = object.uid().unwrap_or_default();
            let status = object.status.unwrap_or_default();
            let chunks = windows.get(&uid).into_iter().flatten();
            entries.extend(
                history_ring::merged(&node, &status, chunks)
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

    /// The RotaWindows `selector` picks, a page at a time.
    async fn list_windows(&self, selector: &str) -> Result<Vec<RotaWindow>> {
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

/// The uid of the RotaNode that owns `window`.
fn owner_uid(window: &RotaWindow) -> Option<&str> {
    window.owner_references().first().map(|o| o.uid.as_str())
}

fn owned_by(window: &RotaWindow, uid: &str) -> bool {
    owner_uid(window) == Some(uid)
}
