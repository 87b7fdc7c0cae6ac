//! Crash points for the tests that kill the agent after every write it persists (the `failpoints`
//! feature, which only the tests turn on): `ROTA_CRASH_AT=<point>` aborts the process at the
//! point named, as a SIGKILL would, with no destructor, flush or graceful shutdown. The points
//! are fail-rs fail points; without the feature each is an empty function.

use rota_core::NodeState;

/// Right before the reboot command is spawned.
pub(crate) const BEFORE_REBOOT_COMMAND: &str = "before-reboot-command";
/// After the reboot command has exited successfully, before the marker that says so.
pub(crate) const AFTER_REBOOT_COMMAND: &str = "after-reboot-command";
/// After the marker that says the reboot command ran.
pub(crate) const AFTER_REBOOT_MARKER: &str = "after-reboot-marker";

/// After a procedure's run has started (its run directory written, its script spawned).
pub(crate) const AFTER_PROCEDURE_START: &str = "after-procedure-start";
/// After a procedure's successful end is recorded in the store.
pub(crate) const AFTER_PROCEDURE_RECORDED: &str = "after-procedure-recorded";

/// The point right after the store write of a transition from `from` to `to` has landed:
/// `after-write:<from>-><to>`.
pub(crate) fn after_write(from: NodeState, to: NodeState) {
    #[cfg(feature = "failpoints")]
    reached(&format!("after-write:{from}->{to}"));
    #[cfg(not(feature = "failpoints"))]
    let _ = (from, to);
}

/// The agent has reached `point`.
pub(crate) fn reached(point: &str) {
    #[cfg(feature = "failpoints")]
    fail::fail_point!(point);
    #[cfg(not(feature = "failpoints"))]
    let _ = point;
}

/// Arms the point `ROTA_CRASH_AT` names, if any.
#[cfg(feature = "failpoints")]
pub(crate) fn arm() {
    if let Ok(point) = std::env::var("ROTA_CRASH_AT") {
        tracing::warn!(point, "crash point armed: the agent aborts there");
        if let Err(e) = fail::cfg_callback(point.clone(), || std::process::abort()) {
            tracing::error!(point, error = %e, "cannot arm the crash point");
        }
    }
}
