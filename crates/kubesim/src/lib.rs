//! kubesim: an embedded Kubernetes API server for end-to-end tests and demos.
//!
//! It serves the Kubernetes REST API over plain HTTP on loopback (or HTTPS, with a CA it
//! makes itself), keeps objects in memory, and behaves like kube-apiserver plus the parts of
//! kube-controller-manager an operator depends on (garbage collector, namespace lifecycle).
//! See the crate README for what it serves and where it knowingly differs.

pub mod access_review;
pub mod api;
pub mod authz;
mod controllers;
pub mod convert;
pub mod error;
mod escalation;
mod http;
pub mod identity;
mod kubeconfig;
mod openapi;
pub mod patch;
pub mod persist;
mod protobuf;
mod quota;
pub mod registry;
mod seed;
pub mod selector;
pub mod self_subject_review;
mod server;
pub mod store;
mod table;
mod tls;
mod typed;
pub mod validation;
mod watch;

pub use server::{Authorization, Config, Counters, Fault, Faults, HeldRequest, Server, Sim};
