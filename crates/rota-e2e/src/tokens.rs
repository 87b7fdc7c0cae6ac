//! Service account tokens as the kubelet gets them for a pod.

use anyhow::{Context as _, Result};
use k8s_openapi::api::core::v1::{Pod, ServiceAccount};
use kube::Client;
use kube::api::{Api, PostParams};
use serde_json::json;

/// A token for an hour for `pod`'s service account, bound to the pod as the one the kubelet
/// mounts into it: the API server puts the pod's node into the user info of every request made
/// with it (`authentication.kubernetes.io/node-name`).
pub async fn pod_token(admin: &Client, pod: &Pod) -> Result<String> {
    let namespace = pod
        .metadata
        .namespace
        .as_deref()
        .context("a pod without a namespace")?;
    let name = pod
        .metadata
        .name
        .as_deref()
        .context("a pod without a name")?;
    let account = pod
        .spec
        .as_ref()
        .and_then(|s| s.service_account_name.as_deref())
        .context("a pod without a service account")?;
    let request = serde_json::from_value(json!({
        "spec": {
            "expirationSeconds": 3600,
            "boundObjectRef": {
                "kind": "Pod",
                "apiVersion": "v1",
                "name": name,
                "uid": pod.metadata.uid,
            },
        }
    }))?;
    Api::<ServiceAccount>::namespaced(admin.clone(), namespace)
        .create_token_request(account, &PostParams::default(), &request)
        .await
        .with_context(|| format!("a token bound to the pod {namespace}/{name}"))?
        .status
        .and_then(|s| s.token)
        .context("a token request without a token")
}
