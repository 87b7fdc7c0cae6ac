/// A node action (drain, uncordon, reboot, health check) that did not succeed.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{action} failed: {detail}")]
pub struct ActionError {
    pub action: &'static str,
    pub detail: String,
}
