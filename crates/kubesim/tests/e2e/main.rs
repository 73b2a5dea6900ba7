//! kubesim's own end-to-end tests in one binary (one link instead of one per file): its data
//! directory, the request fuzzer, kubectl against it, and the `kubesim serve` command. The
//! conformance suite (`tests/conformance/`) is its own binary, since it also runs against a
//! real kube-apiserver.

mod data_dir;
mod fuzz;
mod kubectl;
mod serve;
