//! rota's notifications: a generic JSON webhook and a Slack-compatible one,
//! with message templates, for the events drain started, reboot, finished and failed.
//!
//! Maintenance never waits for a notification: [`Notifier::notify`] puts the event on a bounded
//! queue and returns at once, dropping (and counting) it when the queue is full. A background
//! task delivers each event to every webhook with a timeout per request, logs failures and
//! counts them in [`Counters`], which a metrics layer can read.
//!
//! - [`event`]: what happened ([`Event`], [`EventKind`]);
//! - [`template`]: message templates with `{node}`-style placeholders;
//! - [`webhook`]: webhook targets, their URL validation and payloads;
//! - [`notifier`]: the queue, the delivery task and its counters;
//! - [`observer`]: [`NotifyObserver`], the [`rota_observer::AgentObserver`] that turns what the
//!   agent reports into events.

pub mod error;
pub mod event;
pub mod notifier;
pub mod observer;
pub mod template;
pub mod webhook;

pub use error::NotifyError;
pub use event::{Event, EventKind};
pub use notifier::{Counters, Notifier, NotifierConfig};
pub use observer::NotifyObserver;
pub use template::{Template, Templates};
pub use webhook::{Webhook, WebhookKind};
