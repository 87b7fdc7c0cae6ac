//! What the store needs of the cluster besides permissions (those are `permissions`), checked
//! when it connects: rota's custom resources served, its namespace there, and the client's
//! credentials accepted. An installation that lacks one fails with an error naming what is
//! missing and how to add it, instead of the bare 404 or 401 of whichever call met it first
//! (a missing CRD answers `404 page not found`, not even a Status; a missing namespace lets
//! every list and watch answer an empty collection and only the first create fail).
//!
//! Four requests: a list of one item of each custom resource, which answers 404 exactly when
//! the API server does not serve it (API discovery lags a moment behind a CRD that just became
//! established, so it is only asked when the client may not list), and a dry-run create of the
//! ConfigMap `rota-config`, which the API server refuses with a 404 on `namespaces` when the
//! namespace does not exist, and which writes nothing. A ConfigMap, not a Lease: an agent may
//! create `rota-config` (its first pause or concurrency does), but no Lease (only the scheduler
//! takes slots), and RBAC refuses a create it does not allow before the namespace is looked
//! at. The first list goes alone and the other three together
//! once it answered: an API server that turns the client away (overloaded, unavailable) is
//! asked once per attempt, not four times, while a fleet that started together retries.

use futures::future::join_all;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{ApiResource, DynamicObject, ListParams, PostParams};
use kube::core::Status;
use kube::{Api, Client};

use crate::ApiError;
use crate::CONFIG_MAP;

/// A resource the store uses, as the API server serves it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ServedResource {
    /// The CRD's name: `<plural>.<group>` (`rotanodes.rota.dev`).
    pub name: &'static str,
    pub version: &'static str,
}

impl ServedResource {
    fn plural(&self) -> &'static str {
        self.name
            .split_once('.')
            .map_or(self.name, |(plural, _)| plural)
    }

    fn group(&self) -> &'static str {
        self.name.split_once('.').map_or("", |(_, group)| group)
    }

    fn api_version(&self) -> String {
        format!("{}/{}", self.group(), self.version)
    }
}

/// rota's custom resources (`charts/rota/crds/`).
pub const ROTA_RESOURCES: [ServedResource; 3] = [
    ServedResource {
        name: "rotanodes.rota.dev",
        version: "v1alpha1",
    },
    ServedResource {
        name: "rotawindows.rota.dev",
        version: "v1alpha1",
    },
    ServedResource {
        name: "procedures.rota.dev",
        version: "v1alpha1",
    },
];

/// The ConfigMap whose dry-run create tells whether the namespace exists: `rota-config`, which
/// an agent and an operator may create (the chart's RBAC and node-scoped policy let an agent
/// create it empty). One that exists says so too (409).
const PROBE_CONFIG_MAP: &str = CONFIG_MAP;

/// Checks that the client's credentials are accepted, that rota's custom resources are
/// installed and that `namespace` exists, in that order: the first that fails is the error.
pub async fn check(client: &Client, namespace: &str) -> Result<(), ApiError> {
    let [first, rest @ ..] = &ROTA_RESOURCES;
    let first = match served(client, first).await {
        Err(e) if e.is_unavailable() => return Err(e),
        answer => answer,
    };
    let (rest, namespace) = tokio::join!(
        join_all(rest.iter().map(|r| served(client, r))),
        check_namespace(client, namespace)
    );
    let answers = std::iter::once(first).chain(rest).collect();
    match (verdict(&ROTA_RESOURCES, answers), namespace) {
        (_, Err(e @ ApiError::Unauthorized)) => Err(e),
        (Err(e), _) | (Ok(()), Err(e)) if e.is_forbidden() => {
            ready(client).await?;
            Err(e)
        }
        (Err(e), _) | (Ok(()), Err(e)) => Err(e),
        (Ok(()), Ok(())) => Ok(()),
    }
}

/// Fails with an unavailable error (which the caller retries) while the API server reports
/// itself not ready on `/readyz`. An API server that has just started serves requests before
/// its authorizer has read the cluster's roles: for a moment RBAC refuses everything, and a
/// review answers that the client may do nothing. A refusal is taken as final only once the
/// server is ready. `/readyz` is open to every client (`system:public-info-viewer`); where an
/// installation closed it, or it does not exist, there is nothing to wait for.
pub async fn ready(client: &Client) -> Result<(), ApiError> {
    let request = http::Request::get("/readyz")
        .body(Vec::new())
        .expect("a GET of a fixed path is a valid request");
    match client.request_text(request).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if matches!(status.code, 401 | 403 | 404) => Ok(()),
        Err(source) => Err(ApiError::call("get", "/readyz", "the API server's", source)),
    }
}

/// Fails with [`ApiError::CrdMissing`] naming every one of `resources` that the API server
/// does not serve; else with the first refusal to list one (a missing permission), as before
/// the store could read them.
pub async fn check_resources(
    client: &Client,
    resources: &[ServedResource],
) -> Result<(), ApiError> {
    let answers = join_all(resources.iter().map(|r| served(client, r))).await;
    verdict(resources, answers)
}

/// What `answers`, one for each of `resources` in order, say together (see
/// [`check_resources`]).
fn verdict(
    resources: &[ServedResource],
    answers: Vec<Result<bool, ApiError>>,
) -> Result<(), ApiError> {
    let mut missing = Vec::new();
    let mut failed = None;
    for (resource, answer) in resources.iter().zip(answers) {
        match answer {
            Ok(true) => {}
            Ok(false) => missing.push(resource.name.to_owned()),
            Err(ApiError::Unauthorized) => return Err(ApiError::Unauthorized),
            Err(e) => {
                failed.get_or_insert(e);
            }
        }
    }
    if !missing.is_empty() {
        return Err(ApiError::CrdMissing { resources: missing });
    }
    failed.map_or(Ok(()), Err)
}

async fn served(client: &Client, resource: &ServedResource) -> Result<bool, ApiError> {
    let api: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &ApiResource {
            group: resource.group().into(),
            version: resource.version.into(),
            api_version: resource.api_version(),
            kind: String::new(),
            plural: resource.plural().into(),
        },
    );
    match api.list_metadata(&ListParams::default().limit(1)).await {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(status)) => match status.code {
            // A collection the API server serves never answers 404 to a list.
            404 => Ok(false),
            401 => Err(ApiError::Unauthorized),
            // Authorization comes before the 404: ask discovery, which every authenticated
            // client may read, so that a missing CRD is not hidden behind missing RBAC.
            403 => match discovered(client, resource).await? {
                true => Err(list_error(resource, kube::Error::Api(status))),
                false => Ok(false),
            },
            _ => Err(list_error(resource, kube::Error::Api(status))),
        },
        Err(source) => Err(list_error(resource, source)),
    }
}

/// Whether API discovery lists `resource` (it lags a moment behind a new CRD: only asked
/// when the list cannot tell).
async fn discovered(client: &Client, resource: &ServedResource) -> Result<bool, ApiError> {
    match client
        .list_api_group_resources(&resource.api_version())
        .await
    {
        Ok(list) => Ok(list.resources.iter().any(|r| r.name == resource.plural())),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(false),
        Err(kube::Error::Api(status)) if status.code == 401 => Err(ApiError::Unauthorized),
        Err(source) => Err(ApiError::call(
            "get",
            "API discovery",
            resource.api_version(),
            source,
        )),
    }
}

fn list_error(resource: &ServedResource, source: kube::Error) -> ApiError {
    ApiError::call("list", resource.name, "all", source)
}

/// Fails with [`ApiError::NamespaceMissing`] if `namespace` does not exist. Any other answer
/// to the dry run (created, forbidden, unavailable) is left to the store's own calls, which
/// name the call that met it.
async fn check_namespace(client: &Client, namespace: &str) -> Result<(), ApiError> {
    let probe = ConfigMap {
        metadata: ObjectMeta {
            name: Some(PROBE_CONFIG_MAP.into()),
            ..ObjectMeta::default()
        },
        ..ConfigMap::default()
    };
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    match config_maps.create(&dry_run, &probe).await {
        Err(kube::Error::Api(status)) if status.code == 401 => Err(ApiError::Unauthorized),
        Err(kube::Error::Api(status)) if is_namespace_missing(&status) => {
            Err(ApiError::NamespaceMissing {
                namespace: namespace.into(),
            })
        }
        _ => Ok(()),
    }
}

/// The API server's refusal of an object in a namespace that does not exist: a 404 whose
/// details name the namespace, not the object (`namespaces "x" not found`).
fn is_namespace_missing(status: &Status) -> bool {
    status.code == 404
        && status
            .details
            .as_ref()
            .is_some_and(|d| d.kind == "namespaces")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_404_on_the_namespace_means_it_is_missing() {
        // As the API server sends them.
        let not_found = |kind: &str| -> Status {
            serde_json::from_value(serde_json::json!({
                "kind": "Status",
                "apiVersion": "v1",
                "status": "Failure",
                "message": format!("{kind} \"x\" not found"),
                "reason": "NotFound",
                "details": { "name": "x", "kind": kind },
                "code": 404,
            }))
            .expect("a Status")
        };
        assert!(is_namespace_missing(&not_found("namespaces")));
        assert!(!is_namespace_missing(&not_found("configmaps")));
        assert!(!is_namespace_missing(
            &Status::failure("404 page not found", "Failed to parse error data").with_code(404)
        ));
    }

    #[test]
    fn the_namespace_probe_is_a_create_an_agent_may_make() {
        // RBAC answers before the namespace is looked at: a probe the agent may not create
        // would tell it nothing.
        let agent = crate::permissions::agent_permissions("rota-system", false);
        assert!(
            agent.iter().any(|p| p.verb == "create"
                && p.group.is_empty()
                && p.resource == "configmaps"
                && p.namespace.as_deref() == Some("rota-system")),
            "{agent:?}"
        );
        assert_eq!(PROBE_CONFIG_MAP, "rota-config");
    }

    #[test]
    fn the_resources_checked_are_rotas_crds() {
        let crds = [
            crate::rota_node_crd(),
            crate::rota_window_crd(),
            crate::procedure_crd(),
        ];
        assert_eq!(crds.len(), ROTA_RESOURCES.len());
        for (resource, crd) in ROTA_RESOURCES.iter().zip(&crds) {
            assert_eq!(Some(resource.name), crd.metadata.name.as_deref());
            assert_eq!(resource.group(), crd.spec.group);
            assert_eq!(resource.plural(), crd.spec.names.plural);
            assert!(
                crd.spec.versions.iter().any(|v| v.name == resource.version),
                "{resource:?}"
            );
        }
    }
}
