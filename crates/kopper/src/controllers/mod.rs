//! One module per controller.
pub mod namespace_access;
