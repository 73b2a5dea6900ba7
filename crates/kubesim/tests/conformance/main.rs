//! kubesim's conformance suite: kube-apiserver behaviour an operator relies on, exercised
//! through kube-rs. Runs on a fresh kubesim per test, or unchanged on a real cluster when
//! `KUBESIM_CONFORMANCE_KUBECONFIG` names a kubeconfig (tests needing kubesim's own hooks
//! then skip themselves).

mod access_review;
mod authz;
mod common;
mod crd;
mod crud;
mod defaults;
mod delete;
mod discovery;
mod errors;
mod escalation;
mod list;
mod patch;
mod replicated_kinds;
mod validation;
mod watch;
