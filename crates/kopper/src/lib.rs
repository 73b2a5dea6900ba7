//! kopper: one operator binary, several controllers for multi-tenant clusters.

pub mod controllers;
pub mod runtime;
