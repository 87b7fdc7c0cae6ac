//! The store conformance suite against the Kubernetes store and the scheduler on the real
//! control plane of `testenv/`: each case in a namespace and RotaNode name prefix of its own.

mod common;

rota_store::conformance_tests!(skippable common::make, scheduled);
