//! [`client`]: how rota builds a Kubernetes client.

/// A client for `config` with kube's default retry of 429, 503 and 504 turned off. With it on,
/// every eviction that a PodDisruptionBudget refuses is retried inside the client (up to 15
/// times, with pauses up to many minutes) before the drain even sees the refusal; rota's own
/// callers decide what to try again, and when.
pub fn client(mut config: kube::Config) -> Result<kube::Client, kube::Error> {
    config.default_retry = false;
    kube::Client::try_from(config)
}
