//! `rota fleetlock`: a server of FleetLock, the reboot lock protocol of Fedora CoreOS's update
//! agent (Zincati), on any of rota's stores (docs/design.md §11). A host that asks to reboot
//! takes its turn like a node with an agent: it queues, takes a slot, is drained, and only
//! then is answered 200; after its reboot it is verified and uncordoned, and every step is in
//! its history.
//!
//! - `protocol`: what a request must carry, and the error kinds;
//! - `machine_id`: Zincati's client id, from a host's machine id;
//! - `ids`: which node a client id is;
//! - `commands`: bare metal's platform: shell commands, no boot id;
//! - `hosts`: the hosts' nodes moved along their lifecycle, as `rota_core::fleetlock` decides;
//! - `waiter`: the task of a queued host, which takes its slot when its turn comes;
//! - `window`: the task of a host's window (drain, reboot, verification);
//! - `metrics`: the hosts' nodes and the answers, for Prometheus;
//! - `server`: the HTTP endpoints;
//! - `tls`: the server's certificate, and its clients' (bare metal).

mod commands;
mod error;
pub mod hosts;
pub mod ids;
pub mod machine_id;
mod metrics;
pub mod protocol;
pub mod server;
mod tls;
mod waiter;
mod window;

pub use commands::CommandPlatform;
pub use error::{Error, Result};
pub use hosts::{Config, Hosts, Platform};
pub use ids::{Client, FileIds, Ids, NameIds};
pub use machine_id::{ZINCATI_APP_ID, zincati_id};
pub use metrics::Metrics;
pub use server::{Endpoint, Server};
pub use tls::Tls;
