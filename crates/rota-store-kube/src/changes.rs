//! `Store::changes`: a counter that every change an agent may wait for moves on (its own
//! RotaNode written by someone else, the fleet's settings).

use std::sync::Arc;

use tokio::sync::watch;

#[derive(Debug)]
pub(crate) struct Changes {
    counter: watch::Sender<u64>,
}

impl Changes {
    pub(crate) fn new() -> Arc<Changes> {
        Arc::new(Changes {
            counter: watch::Sender::new(0),
        })
    }

    pub(crate) fn subscribe(&self) -> watch::Receiver<u64> {
        self.counter.subscribe()
    }

    #[cfg(test)]
    pub(crate) fn current(&self) -> u64 {
        *self.counter.borrow()
    }

    pub(crate) fn bump(&self, by: u64) {
        self.counter.send_modify(|n| *n = n.saturating_add(by));
    }
}
