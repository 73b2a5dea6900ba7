//! The shared runtime every controller stands on.

pub mod admin;
pub mod admission;
pub mod api_requests;
pub mod cache;
pub mod client;
pub mod context;
pub mod controller;
pub mod duration;
pub mod events;
pub mod fair_gate;
pub mod fence;
pub mod field_manager;
pub mod leader;
pub mod metrics;
pub mod namespaces;
pub mod process;
pub mod readiness;
pub mod shutdown;
pub mod telemetry;
pub mod trim;
pub mod watch;

pub use context::{Context, ErrorCategory, Settings};
pub use controller::run_controller;
pub use metrics::Metrics;
pub use readiness::Readiness;
pub use shutdown::Shutdown;
