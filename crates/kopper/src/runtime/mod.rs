//! The shared runtime every controller stands on.

pub mod context;
pub mod controller;
pub mod metrics;

pub use context::{Context, ErrorCategory, Settings};
pub use controller::{Readiness, run_controller};
pub use metrics::Metrics;
