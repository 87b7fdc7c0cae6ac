//! Shared by the tests that need the control plane of `testenv/` (never a mock of the API).

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use kube::api::{Patch, PatchParams};
use kube::runtime::wait::{await_condition, conditions};
use rota_core::{NodeName, ProcedureSpec, Write};
use rota_e2e::testenv::{Scope, TestEnv};
use rota_kube_api::{RotaNode, crds};
use rota_store::{
    Acquire, AuditRecord, Fleet, History, HistoryFilter, NewAuditRecord, NodeOverview, Part, Pause,
    ProcedureRecord, Result, Session, Setting, Settings, Store, Writer, Written,
};
use rota_store_kube::{KubeStore, KubeStoreConfig};
use tokio::sync::watch;

/// The environment, or `None` when `ROTA_E2E_SKIP=1`; panics (the test fails) when no control
/// plane can be had.
pub fn env() -> Option<&'static TestEnv> {
    match TestEnv::get() {
        Ok(env) => env,
        Err(e) => panic!("{e:#}"),
    }
}

/// Installs (or updates) rota's CRDs and waits until the API server serves them.
pub async fn install_crd(client: kube::Client) {
    let api: Api<CustomResourceDefinition> = Api::all(client);
    for crd in crds() {
        let name = crd.metadata.name.clone().expect("the CRD has a name");
        api.patch(
            &name,
            &PatchParams::apply("rota-store-kube-tests").force(),
            &Patch::Apply(&crd),
        )
        .await
        .unwrap_or_else(|e| panic!("apply the CRD {name}: {e}"));
        tokio::time::timeout(
            Duration::from_secs(60),
            await_condition(api.clone(), &name, conditions::is_crd_established()),
        )
        .await
        .unwrap_or_else(|_| panic!("the CRD {name} is established within a minute"))
        .expect("watch the CRD");
    }
}

/// A store of its own: a fresh namespace for the Leases and the ConfigMap, and the scope id as
/// RotaNode name prefix.
pub async fn scoped_store(env: &TestEnv, name: &str) -> (Scope, KubeStore) {
    let scope = env.scope(name).await.expect("a test scope");
    install_crd(scope.client()).await;
    let store = KubeStore::connect(scope.client(), store_config(&scope))
        .await
        .expect("connect the store");
    (scope, store)
}

/// The store configuration of `scope`: its namespace, and its id as RotaNode name prefix.
pub fn store_config(scope: &Scope) -> KubeStoreConfig {
    KubeStoreConfig {
        namespace: scope.namespace().into(),
        name_prefix: format!("{}-", scope.id()),
        ..KubeStoreConfig::default()
    }
}

#[allow(dead_code, reason = "used by the conformance tests only")]
pub async fn make() -> Option<Arc<dyn Store>> {
    let env = env()?;
    let (scope, store) = scoped_store(env, "conformance").await;
    Some(Arc::new(Scheduled {
        client: scope.client(),
        namespace: scope.namespace().into(),
        store,
        rounds: Rounds::default(),
        _scope: scope,
    }))
}

/// How long a grant may wait to be taken up in these tests: longer than any of them.
const TAKE_UP: Duration = Duration::from_secs(600);

/// One scheduler round (rota-scheduler's own code) on `scope`'s installation, grants waiting
/// [`TAKE_UP`] to be taken up.
#[allow(dead_code, reason = "not every test binary runs the scheduler")]
pub async fn round(scope: &Scope) {
    round_within(scope, TAKE_UP).await;
}

/// One scheduler round on `scope`'s installation, grants not taken up within `take_up`
/// withdrawn.
#[allow(dead_code, reason = "not every test binary runs the scheduler")]
pub async fn round_within(scope: &Scope, take_up: Duration) {
    rota_scheduler::round(scope.client(), scope.namespace(), take_up)
        .await
        .expect("a scheduler round");
}

/// The scheduler (rota-scheduler's own `run`) of `store`'s installation on `scope`, until the
/// token is canceled: the tests of what an agent costs need the procedures' fingerprint it
/// publishes.
#[allow(dead_code, reason = "not every test binary runs the scheduler")]
pub fn scheduler(scope: &Scope, store: &KubeStore) -> tokio_util::sync::DropGuard {
    let stop = tokio_util::sync::CancellationToken::new();
    tokio::spawn(rota_scheduler::run(
        scope.client(),
        rota_scheduler::SchedulerConfig {
            name_prefix: store.config().name_prefix.clone(),
            ..rota_scheduler::SchedulerConfig::new(scope.namespace(), "test")
        },
        stop.clone(),
    ));
    stop.drop_guard()
}

/// A scheduler round, then `session`'s asks until its node takes its grant up: the grant
/// reaches `store` through its watch, a moment after the round wrote it. The slot taken up;
/// fails if none was granted within ten seconds.
#[allow(dead_code, reason = "not every test binary runs the scheduler")]
pub async fn take_turn(scope: &Scope, store: &KubeStore, session: &Session) -> u32 {
    round(scope).await;
    rota_e2e::turn::granted(store, session, Duration::from_secs(10)).await
}

/// `node`'s RotaNode in `store`'s installation, read now.
#[allow(dead_code, reason = "not every test binary reads RotaNodes")]
pub async fn rota_node(scope: &Scope, store: &KubeStore, node: &NodeName) -> RotaNode {
    Api::<RotaNode>::all(scope.client())
        .get(&store.object_name(node))
        .await
        .expect("read the RotaNode")
}

/// The store with a scheduler's round (rota-scheduler's own code, on the same API server)
/// before every ask for a slot, so that a grant is decided when a node asks, as the suite
/// expects. Asks at once are rounds at once: schedulers that all think they lead.
pub struct Scheduled {
    client: kube::Client,
    namespace: String,
    store: KubeStore,
    rounds: Rounds,
    _scope: Scope,
}

/// Rounds one at a time, and none for an ask that a round started after it already answers:
/// sixty-four agents asking at once make a few rounds, not sixty-four.
#[derive(Default)]
struct Rounds {
    started: std::sync::atomic::AtomicU64,
    /// The number of the last round that ended.
    ended: tokio::sync::Mutex<u64>,
}

impl Scheduled {
    async fn round(&self) -> Result<()> {
        use std::sync::atomic::Ordering;
        let asked = self.rounds.started.load(Ordering::SeqCst);
        let mut ended = self.rounds.ended.lock().await;
        if *ended > asked {
            return Ok(());
        }
        let this = self.rounds.started.fetch_add(1, Ordering::SeqCst) + 1;
        rota_scheduler::round(self.client.clone(), &self.namespace, TAKE_UP)
            .await
            .map_err(|e| rota_store::Error::Backend(Box::new(e)))?;
        *ended = this;
        Ok(())
    }
}

#[async_trait::async_trait]
impl Store for Scheduled {
    async fn open_session(&self, node: &NodeName, ttl: Duration) -> Result<Session> {
        self.store.open_session(node, ttl).await
    }

    async fn heartbeat(&self, session: &Session, ttl: Duration) -> Result<()> {
        self.store.heartbeat(session, ttl).await
    }

    async fn close_session(&self, session: &Session) -> Result<()> {
        self.store.close_session(session).await
    }

    async fn try_acquire_slot(&self, session: &Session) -> Result<Acquire> {
        self.round().await?;
        let rota_nodes: Api<RotaNode> = Api::all(self.client.clone());
        let name = format!("{}{}", self.store.config().name_prefix, session.node);
        let granted = rota_nodes
            .get_opt(&name)
            .await
            .map_err(|e| rota_store::Error::Backend(Box::new(e)))?
            .is_some_and(|n| n.spec.grant.is_some());
        // A grant reaches the store through its watch, a moment after the round wrote it.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            let answer = self.store.try_acquire_slot(session).await?;
            if !granted || answer.slot().is_some() || tokio::time::Instant::now() > deadline {
                return Ok(answer);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    async fn fence(&self, session: &Session, ttl: Duration) -> Result<u32> {
        self.store.fence(session, ttl).await
    }

    async fn write(&self, writer: Writer<'_>, write: Write) -> Result<Written> {
        self.store.write(writer, write).await
    }

    fn changes(&self) -> watch::Receiver<u64> {
        self.store.changes()
    }

    async fn record(&self, node: &NodeName) -> Result<Option<NodeOverview>> {
        self.store.record(node).await
    }

    async fn fleet(&self) -> Result<Fleet> {
        self.store.fleet().await
    }

    async fn settings(&self) -> Result<Settings> {
        self.store.settings().await
    }

    async fn set(&self, setting: Setting) -> Result<Option<Pause>> {
        self.store.set(setting).await
    }

    async fn submit_procedure(&self, spec: &ProcedureSpec) -> Result<(ProcedureRecord, bool)> {
        self.store.submit_procedure(spec).await
    }

    async fn procedures(&self) -> Result<Vec<ProcedureRecord>> {
        self.store.procedures().await
    }

    async fn read_history(&self, filter: &HistoryFilter, part: Part) -> Result<History> {
        self.store.read_history(filter, part).await
    }

    async fn record_audit(&self, record: &NewAuditRecord) -> Result<AuditRecord> {
        self.store.record_audit(record).await
    }
}

/// Opens the window of `session`'s node, whose grant reached it: the write takes the grant up.
#[allow(dead_code, reason = "not every test binary opens windows")]
pub async fn open_window(store: &KubeStore, session: &Session) {
    use rota_core::{NodeState, Process};
    use rota_store::{StoreExt, Transition, WindowChange};
    store
        .transition(
            session,
            Transition::new(NodeState::Queued, NodeState::Draining)
                .process(Some(Process::Reboot))
                .window(WindowChange::Open),
        )
        .await
        .expect("open the window");
}

/// Walks `session`'s node, whose grant reached it, through its window to a successful end:
/// the slot goes back.
#[allow(dead_code, reason = "not every test binary ends windows")]
pub async fn finish_window(store: &KubeStore, session: &Session) {
    use rota_core::NodeState;
    use rota_store::{StoreExt, Transition, WindowChange};
    open_window(store, session).await;
    for (from, to) in [
        (NodeState::Draining, NodeState::Maintaining),
        (NodeState::Maintaining, NodeState::Verifying),
    ] {
        store
            .transition(session, Transition::new(from, to))
            .await
            .expect("transition");
    }
    store
        .transition(
            session,
            Transition::new(NodeState::Verifying, NodeState::Idle).window(WindowChange::Finish),
        )
        .await
        .expect("finish the window");
}
