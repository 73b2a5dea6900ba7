//! The custom resources that are the replication engine's front doors. Their doc
//! comments are user documentation: they become the CRDs' descriptions and what
//! `kubectl explain` prints.

pub mod config_map_sync;
pub mod replication_rule;
pub mod secret_sync;
pub mod shaping;
pub mod sync_status;

pub use self::config_map_sync::{ConfigMapSync, ConfigMapSyncSpec, ConfigMapSyncStatus};
pub use self::replication_rule::{
    CopyConflict, CredentialSecretType, ReplicationRule, ReplicationRuleSpec, ReplicationRuleStatus,
};
pub use self::secret_sync::{SecretSync, SecretSyncSpec, SecretSyncStatus};
pub use self::shaping::{CopiedLabels, CopiedMetadata, CopyShaping, DeletionPolicy, ToolMarks};
pub use self::sync_status::TenantSyncStatus;
