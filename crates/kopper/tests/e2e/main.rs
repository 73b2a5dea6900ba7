//! kopper's end-to-end tests in one binary (one link instead of one per file): each module
//! runs kubesim, and kopper in-process or as a child process or container, against it.

mod common;

mod bucket;
mod chart;
mod cli;
mod controller;
mod crds;
mod demo;
mod image;
mod namespace_access;
mod observability;
mod plan;
mod pod_labeler;
mod rbac;
mod replication;
mod runtime;
mod tenancy;
