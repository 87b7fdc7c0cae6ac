//! How a node's reboot starts: a command run as a child process, or the signal that systemd
//! takes for `systemctl reboot` (kured's `--reboot-signal`), sent to the host's PID 1.

use rota_core::NodeName;
use rustix::process::{Pid, Signal, kill_process};
use rustix_libc_wrappers::process::SignalExt as _;
use tokio::sync::oneshot;

use crate::actions::RebootHandle;
use crate::commands::spawn_reboot;
use crate::error::ActionError;

/// The signal on which systemd's PID 1 reboots the host, as `systemctl reboot` asks it to:
/// SIGRTMIN+5 counted from glibc's SIGRTMIN (34), with which systemd is built, so 39 (kured's
/// default `--reboot-signal`). Not the linked libc's own SIGRTMIN+5: musl's SIGRTMIN is 35,
/// and 40 is systemd's SIGRTMIN+6, a kexec.
pub const SYSTEMD_REBOOT_SIGNAL: i32 = 39;

/// How the reboot starts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reboot {
    /// A shell command (`sh -c`), run as a child process, never exec'd.
    Command(String),
    /// [`SYSTEMD_REBOOT_SIGNAL`] to this process: [`Reboot::HOST_SYSTEMD`] in production;
    /// tests give a process of their own.
    Signal { pid: i32 },
}

impl Reboot {
    /// systemd as PID 1 of the agent's PID namespace: the host's on the host, and in a pod
    /// with `hostPID: true`.
    pub const HOST_SYSTEMD: Reboot = Reboot::Signal { pid: 1 };

    /// Starts the reboot and returns at once with the handle its end resolves. A signal
    /// resolves it as soon as it is sent: systemd reboots on its own time.
    pub fn start(&self, node: Option<&NodeName>) -> Result<RebootHandle, ActionError> {
        match self {
            Reboot::Command(script) => spawn_reboot(script, node),
            Reboot::Signal { pid } => {
                send_reboot_signal(*pid)?;
                let (done, handle) = oneshot::channel();
                let _ = done.send(Ok(()));
                Ok(handle)
            }
        }
    }
}

impl From<&str> for Reboot {
    fn from(script: &str) -> Reboot {
        Reboot::Command(script.to_owned())
    }
}

impl From<String> for Reboot {
    fn from(script: String) -> Reboot {
        Reboot::Command(script)
    }
}

fn send_reboot_signal(pid: i32) -> Result<(), ActionError> {
    let failed = |detail: String| ActionError {
        action: "reboot",
        detail: format!(
            "sending signal {SYSTEMD_REBOOT_SIGNAL} (systemd's SIGRTMIN+5) to PID {pid}: {detail}"
        ),
    };
    let target = Pid::from_raw(pid).ok_or_else(|| failed("not a process id".into()))?;
    let signal = Signal::from_raw(SYSTEMD_REBOOT_SIGNAL)
        .ok_or_else(|| failed("this system's libc has no such real-time signal".into()))?;
    kill_process(target, signal).map_err(|e| failed(e.to_string()))
}
