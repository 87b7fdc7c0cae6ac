//! What an agent in a cluster needs the API server to allow, checked once as it starts: an
//! agent whose service account lacks a permission stops at once and names every one it lacks,
//! instead of failing in the middle of a maintenance window (with a slot taken and the node
//! cordoned) on the first one it uses.
//!
//! One SelfSubjectRulesReview per namespace the permissions name (for an agent: one, in rota's
//! namespace) lists what the service account may do there, the cluster-wide rules included,
//! and the permissions are matched against it as RBAC matches them. A DaemonSet of 5,000
//! agents that start together sends 5,000 reviews, not one per permission (43 each, 215,000
//! in all, before). Where the authorizer cannot list every rule (a webhook authorizer: the
//! review says `incomplete`), each permission gets a SelfSubjectAccessReview of its own.
//!
//! The lists are the chart's RBAC (`charts/rota/templates/rbac.yaml`): for the agent
//! ([`agent_permissions`]), for the FleetLock server ([`fleetlock_permissions`]) and for the
//! scheduler ([`scheduler_permissions`]), each the ClusterRole's rules cluster-wide and the
//! Role's in the rota namespace. The chart's tests check that each service account is allowed
//! all of its list.

use std::fmt;

use futures::{StreamExt, TryStreamExt, stream};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, ResourceRule, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
    SelfSubjectRulesReview, SelfSubjectRulesReviewSpec,
};
use kube::Api;
use kube::api::PostParams;

use crate::ApiError;

/// Reviews sent at once.
const CONCURRENT_REVIEWS: usize = 8;

/// One verb on one resource, cluster-wide or in one namespace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Permission {
    pub verb: &'static str,
    /// The API group; empty for the core group.
    pub group: &'static str,
    pub resource: &'static str,
    pub subresource: Option<&'static str>,
    /// `None`: in every namespace (or a cluster-scoped resource).
    pub namespace: Option<String>,
}

impl Permission {
    /// Whether an agent without it cannot work (see [`Permission::courtesy`]).
    pub fn needed(&self) -> bool {
        self.courtesy().is_none()
    }

    /// What an agent without it goes without, when it is a courtesy: the Events on the Node,
    /// and the Node's lifecycle conditions (a patch of `nodes/status`). An agent that may not
    /// write them still does its work, and logs each refusal.
    pub fn courtesy(&self) -> Option<&'static str> {
        match (self.group, self.resource, self.subresource) {
            ("events.k8s.io", _, _) => Some("its Node gets no Events of its transitions"),
            ("", "nodes", Some("status")) => Some(
                "its Node gets no lifecycle conditions (KEP-5683; --node-conditions=false \
                 stops asking for them)",
            ),
            _ => None,
        }
    }

    /// Whether it is the patch of the Node's status that only the lifecycle conditions need.
    pub fn is_node_status(&self) -> bool {
        (self.group, self.resource, self.subresource) == ("", "nodes", Some("status"))
    }
}

impl fmt::Display for Permission {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "`{}` on `{}", self.verb, self.resource)?;
        if let Some(subresource) = self.subresource {
            write!(f, "/{subresource}")?;
        }
        if !self.group.is_empty() {
            write!(f, ".{}", self.group)?;
        }
        f.write_str("`")?;
        match &self.namespace {
            Some(namespace) => write!(f, " in namespace {namespace}"),
            None => Ok(()),
        }
    }
}

/// `permissions` for people: all verbs on one resource together, as an RBAC rule lists them
/// (`` `get`, `patch` on `nodes` ``), the resources separated by semicolons.
pub fn describe(permissions: &[Permission]) -> String {
    let mut groups: Vec<(Vec<&str>, &Permission)> = Vec::new();
    for p in permissions {
        let same = |q: &&Permission| {
            (q.group, q.resource, q.subresource, &q.namespace)
                == (p.group, p.resource, p.subresource, &p.namespace)
        };
        match groups.iter_mut().find(|(_, q)| same(q)) {
            Some((verbs, _)) => verbs.push(p.verb),
            None => groups.push((vec![p.verb], p)),
        }
    }
    groups
        .iter()
        .map(|(verbs, p)| {
            let verbs: Vec<String> = verbs.iter().map(|v| format!("`{v}`")).collect();
            let on = p.to_string();
            let on = on.split_once(" on ").map_or(on.as_str(), |(_, on)| on);
            format!("{} on {on}", verbs.join(", "))
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// Verbs on a resource, as an RBAC rule lists them.
struct Rule {
    group: &'static str,
    resource: &'static str,
    subresource: Option<&'static str>,
    verbs: &'static [&'static str],
}

const fn rule(
    group: &'static str,
    resource: &'static str,
    subresource: Option<&'static str>,
    verbs: &'static [&'static str],
) -> Rule {
    Rule {
        group,
        resource,
        subresource,
        verbs,
    }
}

/// The ClusterRole's rules for the drain, the health gate and the cordon, and the Node's
/// lifecycle conditions (`rota agent --node-conditions`, a patch of its status).
const DRAIN: &[Rule] = &[
    rule("", "nodes", None, &["patch"]),
    rule("", "nodes", Some("status"), &["patch"]),
    rule("apps", "replicasets", None, &["get", "list"]),
    rule("apps", "statefulsets", None, &["get", "list"]),
    rule("apps", "deployments", None, &["get", "list"]),
    rule("policy", "poddisruptionbudgets", None, &["get", "list"]),
    rule("", "pods", None, &["get", "list", "watch"]),
    rule("", "pods", Some("eviction"), &["create"]),
];

/// The ClusterRole's rules for the store.
const CLUSTER: &[Rule] = &[
    rule("", "nodes", None, &["get", "list", "watch"]),
    rule("events.k8s.io", "events", None, &["create", "patch"]),
    // The node's own RotaNode: made on the first start, watched, and written whole by
    // compare-and-swap (no status subresource; never a patch).
    rule(
        "rota.dev",
        "rotanodes",
        None,
        &["get", "list", "watch", "create", "update"],
    ),
    // The ended windows: each moved once into an immutable RotaWindow (never updated), the
    // ones beyond the kept number deleted; listed once by the start-up check.
    rule(
        "rota.dev",
        "rotawindows",
        None,
        &["get", "list", "create", "delete"],
    ),
    // The procedures: read and followed, never written (the scheduler writes their status).
    rule("rota.dev", "procedures", None, &["get", "list", "watch"]),
];

/// The Role's rules, in the rota namespace.
const NAMESPACED: &[Rule] = &[
    // The Lease of the node's grant: read by the fence, given back (an update) as the window
    // ends. The scheduler takes the Leases; an agent never creates, watches or deletes one.
    rule("coordination.k8s.io", "leases", None, &["get", "update"]),
    rule(
        "",
        "configmaps",
        None,
        &["get", "list", "watch", "create", "update"],
    ),
];

/// The FleetLock server's Role's rules, in the rota namespace: the Leases of its hosts'
/// grants read (the fence) and given back, as an agent's, and listed by its start's look at
/// the fleet (it takes over the windows under way); `rota-config` followed, and created only
/// by the store's start-up probe (a dry run): the server sets no setting of the fleet.
const FLEETLOCK_NAMESPACED: &[Rule] = &[
    rule(
        "coordination.k8s.io",
        "leases",
        None,
        &["get", "list", "update"],
    ),
    rule("", "configmaps", None, &["get", "list", "watch", "create"]),
];

/// The scheduler's ClusterRole's rules: every RotaNode followed, grants and withdrawals
/// written by compare-and-swap, and the Event of each withdrawal; the Procedures and the Nodes'
/// labels followed, and each Procedure's status written by compare-and-swap.
const SCHEDULER_CLUSTER: &[Rule] = &[
    rule(
        "rota.dev",
        "rotanodes",
        None,
        &["get", "list", "watch", "update"],
    ),
    rule("", "nodes", None, &["get", "list", "watch"]),
    rule("events.k8s.io", "events", None, &["create", "patch"]),
    rule("rota.dev", "procedures", None, &["list", "watch"]),
    rule("rota.dev", "procedures", Some("status"), &["patch"]),
];

/// The scheduler's Role's rules, in the rota namespace: the slot Leases followed, taken and
/// taken back, the leader Lease, and `rota-config` read, with the procedures' fingerprint
/// applied to it.
const SCHEDULER_NAMESPACED: &[Rule] = &[
    rule(
        "coordination.k8s.io",
        "leases",
        None,
        &["get", "list", "watch", "create", "update"],
    ),
    rule("", "configmaps", None, &["get", "list", "watch", "patch"]),
];

/// Every permission an agent whose installation lives in `namespace` uses; `drains`: it
/// cordons and drains its node through the API too (`--node-actions kube`).
pub fn agent_permissions(namespace: &str, drains: bool) -> Vec<Permission> {
    let drain: &'static [Rule] = if drains { DRAIN } else { &[] };
    expand(CLUSTER.iter().chain(drain), NAMESPACED, namespace)
}

/// Every permission the FleetLock server (`rota fleetlock --store kube`) of the installation
/// in `namespace` uses: an agent's that drains through the API, for every FleetLock host's
/// Node, but in the rota namespace the Role of [`FLEETLOCK_NAMESPACED`].
pub fn fleetlock_permissions(namespace: &str) -> Vec<Permission> {
    expand(CLUSTER.iter().chain(DRAIN), FLEETLOCK_NAMESPACED, namespace)
}

/// Every permission the scheduler (`rota scheduler`) of the installation in `namespace` uses.
pub fn scheduler_permissions(namespace: &str) -> Vec<Permission> {
    expand(SCHEDULER_CLUSTER.iter(), SCHEDULER_NAMESPACED, namespace)
}

/// One permission per verb of each rule: `cluster`'s cluster-wide, `namespaced`'s in
/// `namespace`.
fn expand<'a>(
    cluster: impl Iterator<Item = &'a Rule>,
    namespaced: &'a [Rule],
    namespace: &str,
) -> Vec<Permission> {
    let cluster = cluster.map(|r| (r, None));
    let namespaced = namespaced.iter().map(|r| (r, Some(namespace.to_owned())));
    cluster
        .chain(namespaced)
        .flat_map(|(r, namespace): (&Rule, Option<String>)| {
            r.verbs.iter().map(move |&verb| Permission {
                verb,
                group: r.group,
                resource: r.resource,
                subresource: r.subresource,
                namespace: namespace.clone(),
            })
        })
        .collect()
}

/// The namespace whose rules review answers for the cluster-wide permissions (any namespace's
/// includes the rules bound cluster-wide) when `wanted` names none.
const CLUSTER_RULES_NAMESPACE: &str = "default";

/// The permissions of `wanted` that the client's own identity is not allowed, in their order.
pub async fn missing(
    client: &kube::Client,
    wanted: &[Permission],
) -> Result<Vec<Permission>, ApiError> {
    let mut namespaces: Vec<&str> = Vec::new();
    for namespace in wanted.iter().filter_map(|p| p.namespace.as_deref()) {
        if !namespaces.contains(&namespace) {
            namespaces.push(namespace);
        }
    }
    if namespaces.is_empty() && !wanted.is_empty() {
        namespaces.push(CLUSTER_RULES_NAMESPACE);
    }
    let mut rules: Vec<(&str, Vec<ResourceRule>)> = Vec::new();
    for namespace in namespaces {
        match rules_in(client, namespace).await? {
            Some(found) => rules.push((namespace, found)),
            None => return reviewed_one_by_one(client, wanted).await,
        }
    }
    // Cluster-wide permissions are matched against the first namespace's rules.
    let granted = |p: &Permission| {
        rules
            .iter()
            .find(|(namespace, _)| p.namespace.as_deref().is_none_or(|n| n == *namespace))
            .is_some_and(|(_, rules)| rules.iter().any(|rule| allows(rule, p)))
    };
    Ok(wanted.iter().filter(|p| !granted(p)).cloned().collect())
}

/// What the client may do in `namespace`; `None` when the authorizer cannot list all of it.
async fn rules_in(
    client: &kube::Client,
    namespace: &str,
) -> Result<Option<Vec<ResourceRule>>, ApiError> {
    let reviews: Api<SelfSubjectRulesReview> = Api::all(client.clone());
    let review = SelfSubjectRulesReview {
        spec: SelfSubjectRulesReviewSpec {
            namespace: Some(namespace.to_owned()),
        },
        ..SelfSubjectRulesReview::default()
    };
    let answer = reviews
        .create(&PostParams::default(), &review)
        .await
        .map_err(|source| {
            ApiError::call(
                "create",
                "selfsubjectrulesreviews.authorization.k8s.io",
                format!("namespace {namespace}"),
                source,
            )
        })?;
    Ok(answer
        .status
        .filter(|status| !status.incomplete)
        .map(|status| status.resource_rules))
}

/// Whether `rule` grants `permission` on every object of its kind, as RBAC decides it: the
/// verb, the API group and the resource (or `resource/subresource`) each listed or `*`, a
/// subresource also by `*/subresource`, and no `resourceNames` (which grant named objects
/// only).
fn allows(rule: &ResourceRule, permission: &Permission) -> bool {
    let listed = |list: &[String], wanted: &str| list.iter().any(|v| v == "*" || v == wanted);
    if rule.resource_names.as_ref().is_some_and(|n| !n.is_empty()) {
        return false;
    }
    let resource = match permission.subresource {
        Some(subresource) => format!("{}/{subresource}", permission.resource),
        None => permission.resource.to_owned(),
    };
    let resource_matches = rule.resources.iter().flatten().any(|r| {
        r == "*"
            || *r == resource
            || permission
                .subresource
                .is_some_and(|sub| r.strip_prefix("*/") == Some(sub))
    });
    listed(&rule.verbs, permission.verb)
        && listed(
            rule.api_groups.as_deref().unwrap_or_default(),
            permission.group,
        )
        && resource_matches
}

/// [`missing`] with one SelfSubjectAccessReview per permission.
async fn reviewed_one_by_one(
    client: &kube::Client,
    wanted: &[Permission],
) -> Result<Vec<Permission>, ApiError> {
    let reviews: Api<SelfSubjectAccessReview> = Api::all(client.clone());
    let allowed: Vec<bool> = stream::iter(wanted)
        .map(|p| {
            let reviews = reviews.clone();
            async move {
                let review = SelfSubjectAccessReview {
                    spec: SelfSubjectAccessReviewSpec {
                        resource_attributes: Some(ResourceAttributes {
                            verb: Some(p.verb.into()),
                            group: Some(p.group.into()),
                            resource: Some(p.resource.into()),
                            subresource: p.subresource.map(Into::into),
                            namespace: p.namespace.clone(),
                            ..ResourceAttributes::default()
                        }),
                        ..SelfSubjectAccessReviewSpec::default()
                    },
                    ..SelfSubjectAccessReview::default()
                };
                let answer = reviews
                    .create(&PostParams::default(), &review)
                    .await
                    .map_err(|source| {
                        ApiError::call(
                            "create",
                            "selfsubjectaccessreviews.authorization.k8s.io",
                            p.to_string(),
                            source,
                        )
                    })?;
                Ok::<_, ApiError>(answer.status.is_some_and(|s| s.allowed))
            }
        })
        .buffered(CONCURRENT_REVIEWS)
        .try_collect()
        .await?;
    Ok(wanted
        .iter()
        .zip(allowed)
        .filter(|(_, allowed)| !allowed)
        .map(|(p, _)| p.clone())
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_permission_reads_as_what_to_grant() {
        let all = agent_permissions("rota-system", true);
        let shown: Vec<String> = all.iter().map(ToString::to_string).collect();
        assert!(
            shown.contains(&"`patch` on `nodes`".to_string()),
            "{shown:?}"
        );
        assert!(
            shown.contains(&"`create` on `pods/eviction`".to_string()),
            "{shown:?}"
        );
        assert!(
            shown.contains(
                &"`update` on `leases.coordination.k8s.io` in namespace rota-system".to_string()
            ),
            "{shown:?}"
        );
        assert!(
            shown.contains(&"`watch` on `procedures.rota.dev`".to_string()),
            "{shown:?}"
        );
        // Without the drain: no pods, no evictions, no cordon.
        let store_only = agent_permissions("rota-system", false);
        assert!(
            store_only
                .iter()
                .all(|p| p.resource != "pods" && !(p.resource == "nodes" && p.verb == "patch")),
            "{store_only:?}"
        );
        assert!(store_only.len() < all.len());
        // Only the Events and the Node's lifecycle conditions may be missing without
        // stopping the agent.
        let courtesy: Vec<String> = all
            .iter()
            .filter(|p| !p.needed())
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            courtesy,
            [
                "`create` on `events.events.k8s.io`",
                "`patch` on `events.events.k8s.io`",
                "`patch` on `nodes/status`",
            ]
        );
        assert!(store_only.iter().all(|p| !p.is_node_status()));
    }

    fn verbs_on(permissions: &[Permission], resource: &str) -> Vec<&'static str> {
        let (resource, subresource) = match resource.split_once('/') {
            Some((resource, subresource)) => (resource, Some(subresource)),
            None => (resource, None),
        };
        permissions
            .iter()
            .filter(|p| p.resource == resource && p.subresource == subresource)
            .map(|p| p.verb)
            .collect()
    }

    #[test]
    fn an_agent_takes_no_slot_and_never_rewrites_a_window() {
        let agent = agent_permissions("rota-system", true);
        // The scheduler takes the Leases: the agent reads the one of its grant and gives it
        // back, and neither creates, takes by watch, nor deletes one.
        assert_eq!(verbs_on(&agent, "leases"), ["get", "update"]);
        assert!(
            agent
                .iter()
                .filter(|p| p.resource == "leases")
                .all(|p| p.namespace.as_deref() == Some("rota-system")),
            "{agent:?}"
        );
        // An ended window is written once and deleted when no longer kept.
        assert_eq!(
            verbs_on(&agent, "rotawindows"),
            ["get", "list", "create", "delete"]
        );
        // One compare-and-swap update writes the whole RotaNode: no status subresource.
        assert_eq!(
            verbs_on(&agent, "rotanodes"),
            ["get", "list", "watch", "create", "update"]
        );
        assert!(verbs_on(&agent, "rotanodes/status").is_empty());
        // The procedures are read, never written: their status is the scheduler's.
        assert_eq!(verbs_on(&agent, "procedures"), ["get", "list", "watch"]);
        assert!(verbs_on(&agent, "procedures/status").is_empty());
        // Its Node: cordoned, labelled, tainted and annotated by patches, and its lifecycle
        // conditions set by a patch of its status; never created, updated whole or deleted.
        assert_eq!(verbs_on(&agent, "nodes"), ["get", "list", "watch", "patch"]);
        assert_eq!(verbs_on(&agent, "nodes/status"), ["patch"]);
        assert!(
            agent
                .iter()
                .filter(|p| p.is_node_status())
                .all(|p| p.namespace.is_none() && !p.needed()),
            "{agent:?}"
        );
    }

    #[test]
    fn the_scheduler_takes_slots_and_writes_grants_and_nothing_of_a_node() {
        let scheduler = scheduler_permissions("rota-system");
        assert_eq!(
            verbs_on(&scheduler, "leases"),
            ["get", "list", "watch", "create", "update"]
        );
        assert_eq!(
            verbs_on(&scheduler, "rotanodes"),
            ["get", "list", "watch", "update"]
        );
        // It reads rota-config and writes no ConfigMap; it drains, cordons and records no
        // history. It follows the Nodes' labels and the Procedures, and writes only their status.
        assert_eq!(
            verbs_on(&scheduler, "configmaps"),
            ["get", "list", "watch", "patch"]
        );
        assert_eq!(verbs_on(&scheduler, "nodes"), ["get", "list", "watch"]);
        assert_eq!(verbs_on(&scheduler, "procedures"), ["list", "watch"]);
        assert_eq!(verbs_on(&scheduler, "procedures/status"), ["patch"]);
        for resource in ["pods", "pods/eviction", "rotawindows"] {
            assert!(
                verbs_on(&scheduler, resource).is_empty(),
                "{resource}: {scheduler:?}"
            );
        }
        let namespaced: Vec<&str> = scheduler
            .iter()
            .filter(|p| p.namespace.is_some())
            .map(|p| p.resource)
            .collect();
        assert!(
            namespaced
                .iter()
                .all(|r| ["leases", "configmaps"].contains(r)),
            "{namespaced:?}"
        );
        let courtesy: Vec<&Permission> = scheduler.iter().filter(|p| !p.needed()).collect();
        assert!(
            !courtesy.is_empty() && courtesy.iter().all(|p| p.resource == "events"),
            "{courtesy:?}"
        );
    }

    fn rule(groups: &[&str], resources: &[&str], verbs: &[&str]) -> ResourceRule {
        let strings = |list: &[&str]| list.iter().map(ToString::to_string).collect::<Vec<_>>();
        ResourceRule {
            api_groups: Some(strings(groups)),
            resources: Some(strings(resources)),
            verbs: strings(verbs),
            resource_names: None,
        }
    }

    fn permission(verb: &'static str, group: &'static str, resource: &'static str) -> Permission {
        let (resource, subresource) = match resource.split_once('/') {
            Some((resource, subresource)) => (resource, Some(subresource)),
            None => (resource, None),
        };
        Permission {
            verb,
            group,
            resource,
            subresource,
            namespace: None,
        }
    }

    #[test]
    fn a_rule_grants_what_rbac_would_grant_and_nothing_more() {
        let eviction = permission("create", "", "pods/eviction");
        let status = permission("patch", "rota.dev", "rotanodes/status");
        let nodes = permission("patch", "", "nodes");
        assert!(allows(&rule(&[""], &["nodes"], &["get", "patch"]), &nodes));
        assert!(allows(&rule(&[""], &["nodes"], &["*"]), &nodes));
        assert!(allows(&rule(&["*"], &["*"], &["patch"]), &nodes));
        assert!(allows(
            &rule(&[""], &["pods/eviction"], &["create"]),
            &eviction
        ));
        assert!(allows(
            &rule(&["rota.dev"], &["*/status"], &["patch"]),
            &status
        ));
        assert!(allows(&rule(&["rota.dev"], &["*"], &["patch"]), &status));
        // A resource is not its subresources, nor one group another's, nor a verb another.
        assert!(!allows(&rule(&[""], &["pods"], &["create"]), &eviction));
        assert!(!allows(
            &rule(&["rota.dev"], &["rotanodes"], &["patch"]),
            &status
        ));
        assert!(!allows(&rule(&["apps"], &["nodes"], &["patch"]), &nodes));
        assert!(!allows(&rule(&[""], &["nodes"], &["get"]), &nodes));
        assert!(!allows(&rule(&[""], &["*/status"], &["patch"]), &nodes));
        // Named objects only: not every Node.
        let mut named = rule(&[""], &["nodes"], &["patch"]);
        named.resource_names = Some(vec!["node-a".into()]);
        assert!(!allows(&named, &nodes));
    }

    #[test]
    fn the_verbs_on_one_resource_are_named_together() {
        let all = agent_permissions("rota-system", true);
        let missing: Vec<Permission> = all
            .into_iter()
            .filter(|p| p.resource == "nodes" || p.resource == "leases")
            .collect();
        assert_eq!(
            describe(&missing),
            "`get`, `list`, `watch`, `patch` on `nodes`; `patch` on `nodes/status`; `get`, \
             `update` on `leases.coordination.k8s.io` in namespace rota-system"
        );
    }
}
