//! [`NotifyObserver`]: the agent's moments (drain started, reboot, finished, failed,
//! postponed) as notifications on the [`Notifier`]'s queue, so that a slow or failing webhook
//! never holds maintenance up.

use std::sync::Mutex;

use rota_core::{Event, NodeName, NodeState, Process};
use rota_observer::{AgentObserver, WorkOutcome};
use rota_store::NodeRecord;

use crate::event::EventKind;
use crate::notifier::Notifier;

/// Turns what the agent reports into the four notification events.
pub struct NotifyObserver {
    node: NodeName,
    notifier: Notifier,
    /// The slot the node held when last seen: work results come without the record.
    slot: Mutex<Option<u32>>,
}

impl NotifyObserver {
    pub fn new(node: NodeName, notifier: Notifier) -> NotifyObserver {
        NotifyObserver {
            node,
            notifier,
            slot: Mutex::new(None),
        }
    }

    fn slot(&self) -> std::sync::MutexGuard<'_, Option<u32>> {
        self.slot.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn send(&self, kind: EventKind, process: Process, cause: Option<&str>, slot: Option<u32>) {
        self.notifier.notify(crate::event::Event {
            kind,
            node: self.node.clone(),
            process,
            cause: cause.map(str::to_owned),
            slot,
            at: jiff::Timestamp::now(),
        });
    }

    /// A record outside idle and queued always names its process; the reboot is the one
    /// process every window may end with.
    fn process(record: &NodeRecord) -> Process {
        record.process.clone().unwrap_or(Process::Reboot)
    }
}

impl AgentObserver for NotifyObserver {
    fn record(&self, record: &NodeRecord) {
        *self.slot() = record.slot;
    }

    fn drain_started(&self, record: &NodeRecord) {
        self.send(
            EventKind::DrainStarted,
            Self::process(record),
            None,
            record.slot,
        );
    }

    fn reboot_started(&self, record: &NodeRecord) {
        self.send(EventKind::Reboot, Process::Reboot, None, record.slot);
    }

    fn transition(&self, before: &NodeRecord, after: &NodeRecord, event: &Event) {
        if *event == Event::Healthy && after.state == NodeState::Idle {
            self.send(
                EventKind::Finished,
                Self::process(before),
                None,
                before.slot,
            );
        }
    }

    fn work_ended(&self, process: &Process, outcome: WorkOutcome, cause: Option<&str>) {
        let kind = match outcome {
            WorkOutcome::Failed => EventKind::Failed,
            WorkOutcome::Postponed => EventKind::Postponed,
            WorkOutcome::Finished | WorkOutcome::Canceled => return,
        };
        let slot = *self.slot();
        self.send(kind, process.clone(), cause, slot);
    }
}
