//! The queue between maintenance and the webhooks, and the task that empties it.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures::future::join_all;
use tokio::sync::mpsc;
use tokio::sync::mpsc::error::TrySendError;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::{Event, NotifyError, Templates, Webhook};

/// What the notifier sends where, and how patiently.
#[derive(Debug, Clone)]
pub struct NotifierConfig {
    pub webhooks: Vec<Webhook>,
    pub templates: Templates,
    /// Events that may wait for delivery; more are dropped.
    pub queue: usize,
    /// The longest one webhook request may take, connecting included.
    pub timeout: Duration,
}

impl NotifierConfig {
    /// The default queue size.
    pub const QUEUE: usize = 64;
    /// The default request timeout.
    pub const TIMEOUT: Duration = Duration::from_secs(10);

    /// `webhooks` with the default templates, queue size and timeout.
    pub fn new(webhooks: Vec<Webhook>) -> NotifierConfig {
        NotifierConfig {
            webhooks,
            templates: Templates::default(),
            queue: NotifierConfig::QUEUE,
            timeout: NotifierConfig::TIMEOUT,
        }
    }
}

/// What became of the notifications so far. Plain atomics, for a metrics layer to read.
#[derive(Debug, Default)]
pub struct Counters {
    /// Deliveries a webhook accepted with a 2xx status (one per event and webhook).
    pub sent: AtomicU64,
    /// Deliveries that failed: no connection, a timeout, a non-2xx status (one per event and
    /// webhook).
    pub failed: AtomicU64,
    /// Events never delivered: the queue was full, the notifier had stopped, or it was
    /// canceled before or while delivering them (one per event).
    pub dropped: AtomicU64,
}

/// The maintenance side's handle: cheap to clone, and [`notify`](Notifier::notify) never waits.
///
/// The delivery task ends when it is canceled (events still queued are dropped), or when every
/// handle is gone and it has delivered what was queued.
#[derive(Debug, Clone)]
pub struct Notifier {
    queue: mpsc::Sender<Event>,
    counters: Arc<Counters>,
}

impl Notifier {
    /// Starts the delivery task on the current tokio runtime.
    pub fn start(
        config: NotifierConfig,
        cancel: CancellationToken,
    ) -> Result<(Notifier, JoinHandle<()>), NotifyError> {
        if config.queue == 0 {
            return Err(NotifyError::QueueSize);
        }
        let client = reqwest::Client::builder()
            .timeout(config.timeout)
            .build()
            .map_err(NotifyError::Client)?;
        let (queue, events) = mpsc::channel(config.queue);
        let counters = Arc::new(Counters::default());
        let delivery = Delivery {
            client,
            webhooks: config.webhooks,
            templates: config.templates,
            counters: Arc::clone(&counters),
        };
        let task = tokio::spawn(delivery.run(events, cancel));
        Ok((Notifier { queue, counters }, task))
    }

    /// Queues `event` for every webhook and returns at once. When the queue is full or the
    /// task has ended, the event is dropped, counted and logged: maintenance goes on.
    pub fn notify(&self, event: Event) {
        if let Err(e) = self.queue.try_send(event) {
            let (reason, event) = match e {
                TrySendError::Full(event) => ("queue full", event),
                TrySendError::Closed(event) => ("notifier stopped", event),
            };
            self.counters.dropped.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(
                event = %event.kind,
                node = %event.node,
                reason,
                "notification dropped"
            );
        }
    }

    /// The counters, shared with the delivery task.
    pub fn counters(&self) -> Arc<Counters> {
        Arc::clone(&self.counters)
    }
}

struct Delivery {
    client: reqwest::Client,
    webhooks: Vec<Webhook>,
    templates: Templates,
    counters: Arc<Counters>,
}

impl Delivery {
    async fn run(self, mut events: mpsc::Receiver<Event>, cancel: CancellationToken) {
        loop {
            let event = tokio::select! {
                biased;
                () = cancel.cancelled() => break,
                event = events.recv() => match event {
                    Some(event) => event,
                    None => return,
                },
            };
            tokio::select! {
                biased;
                () = cancel.cancelled() => {
                    self.counters.dropped.fetch_add(1, Ordering::Relaxed);
                    break;
                }
                () = self.deliver(&event) => {}
            }
        }
        events.close();
        let mut left = 0;
        while events.try_recv().is_ok() {
            left += 1;
        }
        self.counters.dropped.fetch_add(left, Ordering::Relaxed);
    }

    /// Sends `event` to every webhook at once, so that a slow one does not delay the others.
    async fn deliver(&self, event: &Event) {
        let message = self.templates.render(event);
        let sends = self.webhooks.iter().map(|hook| async {
            match self.send(hook, event, &message).await {
                Ok(()) => {
                    self.counters.sent.fetch_add(1, Ordering::Relaxed);
                }
                Err(error) => {
                    self.counters.failed.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(
                        event = %event.kind,
                        node = %event.node,
                        %error,
                        "notification failed"
                    );
                }
            }
        });
        join_all(sends).await;
    }

    async fn send(&self, hook: &Webhook, event: &Event, message: &str) -> Result<(), NotifyError> {
        let response = self
            .client
            .post(hook.url().clone())
            .json(&hook.payload(event, message))
            .send()
            .await
            .map_err(|source| NotifyError::Request {
                target: hook.target(),
                source: source.without_url(),
            })?;
        let status = response.status();
        if status.is_success() {
            Ok(())
        } else {
            Err(NotifyError::Status {
                target: hook.target(),
                status,
            })
        }
    }
}
