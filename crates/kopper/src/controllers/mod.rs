//! One module per controller.
pub mod config_map_sync;
pub mod namespace_access;
pub mod replication;
pub mod replication_rule;
