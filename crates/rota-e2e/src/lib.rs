//! End-to-end test support for rota.
//!
//! Tests run against a real Kubernetes control plane (etcd, kube-apiserver,
//! kube-controller-manager, kube-scheduler and kwok) that `testenv/up` builds from Go modules
//! and starts on loopback; see [`testenv`] and `testenv/README.md`. [`fleet`] runs real
//! `rota agent` processes against it, one per kwok node. [`postgres`] gives each test a
//! database of its own on a throwaway PostgreSQL. [`proxy`] stands between a test and one of
//! those servers, to cut it off as an outage would, and [`disrupt`] times such disruptions by
//! a rollout's progress. [`real_node`] is the control plane with a real kubelet node, where
//! rota's image and chart are installed as users install them; [`chart`] renders that chart
//! with `helm template`, and [`tokens`] gives a test the token of a pod, as the kubelet mounts
//! it. [`control_plane`] is a control plane of a test's own, whose etcd and API server the test
//! crashes and restarts. Without Kubernetes, [`host`] is one simulated host on this machine with
//! a SQLite store, for the agent's tests in-process and as a process. On any store, [`turn`]
//! walks a node into its turn as its agent would. [`fleetlock`] makes kwok nodes FleetLock
//! hosts (Fedora CoreOS nodes whose Zincati asks rota's FleetLock server).

pub mod chart;
pub mod control_plane;
pub mod disrupt;
pub mod fleet;
pub mod fleetlock;
pub mod host;
pub mod postgres;
pub mod proxy;
pub mod real_node;
pub mod testenv;
pub mod tokens;
pub mod turn;
