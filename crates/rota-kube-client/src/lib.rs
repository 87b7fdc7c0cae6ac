//! rota's Kubernetes client: the one way every client of rota is built, and the one reading of
//! what a failed API call means (worth trying again, a missing permission, a lost
//! compare-and-swap, a missing object).
//!
//! - `client`: [`client`], a client with kube's own retries off;
//! - `errors`: [`is_unavailable`], [`forbidden`], [`is_conflict`], [`is_not_found`];
//! - `call`: [`CallError`], a failed call named by its verb, resource and object.

mod call;
mod client;
mod errors;

pub use call::CallError;
pub use client::client;
pub use errors::{forbidden, is_conflict, is_not_found, is_unavailable};
