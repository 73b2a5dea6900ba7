//! Thin I/O: makes the changes a plan decided. Copies are written with server-side apply,
//! sending only the fields kopper owns; only copies kopper marked are ever deleted, and
//! only the exact object (by uid) the plan saw.

use std::collections::{BTreeMap, BTreeSet};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{DeleteParams, Patch, PatchParams, Preconditions};
use kube::core::{ObjectMeta, Status};
use kube::{Api, Client};
use serde_json::{Map, Value, json};

use super::desired::{Change, CopyKey, DesiredCopy, ObjectInfo, ObjectKind};

/// Writes in flight at once for one rule.
const CONCURRENT_WRITES: usize = 16;

#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    #[error("writing {key}: {source}")]
    Write {
        key: CopyKey,
        #[source]
        source: kube::Error,
    },
    #[error("deleting {key}: {source}")]
    Delete {
        key: CopyKey,
        #[source]
        source: kube::Error,
    },
}

/// What a plan's execution did.
#[derive(Debug, Default)]
pub struct Applied {
    /// Copies created or updated, with the resourceVersion the server gave them.
    pub written: BTreeSet<CopyKey>,
    pub versions: BTreeMap<CopyKey, String>,
    /// Copies removed (including those already gone).
    pub removed: BTreeSet<CopyKey>,
    pub deleted: usize,
    /// Places where a copy was to be created but an object kopper did not make was found.
    pub unmanaged: Vec<CopyKey>,
    pub failed: Vec<WriteError>,
}

enum Outcome {
    Written(CopyKey, String),
    Deleted(CopyKey),
    /// An object kopper did not make holds the place; it is left as it is.
    Unmanaged(CopyKey),
    /// Nothing to do after all: the namespace or the object is gone, or changed under us
    /// and the next event will say how.
    Skipped,
    Failed(WriteError),
}

/// Makes every change in `changes` that writes, a few at a time.
pub async fn execute(client: &Client, field_manager: &str, changes: &[Change]) -> Applied {
    // Owned items: a stream closure over borrowed ones makes the future's lifetimes too
    // specific for a spawned controller.
    let outcomes: Vec<Outcome> = futures::stream::iter(changes.iter().cloned())
        .map(|change| async move { apply_change(client, field_manager, &change).await })
        .buffer_unordered(CONCURRENT_WRITES)
        .collect()
        .await;
    let mut applied = Applied::default();
    for outcome in outcomes {
        match outcome {
            Outcome::Written(key, version) => {
                applied.written.insert(key.clone());
                applied.versions.insert(key, version);
            }
            Outcome::Deleted(key) => {
                applied.deleted += 1;
                applied.removed.insert(key);
            }
            Outcome::Unmanaged(key) => applied.unmanaged.push(key),
            Outcome::Skipped => {}
            Outcome::Failed(error) => applied.failed.push(error),
        }
    }
    applied
}

async fn apply_change(client: &Client, field_manager: &str, change: &Change) -> Outcome {
    match change {
        Change::Create(copy) => write(client, field_manager, copy, false).await,
        Change::CreateIfAbsent(copy) => match look(client, &copy.key).await {
            Ok(None) => write(client, field_manager, copy, false).await,
            Ok(Some(meta)) if ObjectInfo::from_meta(&meta).is_kopper_copy() => Outcome::Skipped,
            Ok(Some(_)) => Outcome::Unmanaged(copy.key.clone()),
            Err(source) => Outcome::Failed(WriteError::Write { key: copy.key.clone(), source }),
        },
        Change::Update(copy) => write(client, field_manager, copy, true).await,
        Change::Replace { existing_uid, copy } => match delete(client, &copy.key, existing_uid).await {
            Outcome::Deleted(_) => write(client, field_manager, copy, false).await,
            other => other,
        },
        Change::Delete { key, uid } => delete(client, key, uid).await,
        Change::Conflict { .. } => Outcome::Skipped,
    }
}

/// The metadata of whatever is at `key`, if anything.
async fn look(client: &Client, key: &CopyKey) -> Result<Option<ObjectMeta>, kube::Error> {
    let (namespace, name) = (&key.namespace, &key.name);
    Ok(match key.kind {
        ObjectKind::ConfigMap => Api::<ConfigMap>::namespaced(client.clone(), namespace)
            .get_metadata_opt(name)
            .await?
            .map(|object| object.metadata),
        ObjectKind::Secret => Api::<Secret>::namespaced(client.clone(), namespace)
            .get_metadata_opt(name)
            .await?
            .map(|object| object.metadata),
    })
}

/// Server-side apply of the copy. A create does not force: should an object of that name
/// appear in the meantime with other values, the API server reports the conflict instead of
/// kopper taking its fields. An update forces, as kopper is the only writer of its copies'
/// fields.
async fn write(client: &Client, field_manager: &str, copy: &DesiredCopy, force: bool) -> Outcome {
    let mut params = PatchParams::apply(field_manager);
    params.force = force;
    let patch = Patch::Apply(manifest(copy));
    let (namespace, name) = (&copy.key.namespace, &copy.key.name);
    let result = match copy.key.kind {
        ObjectKind::ConfigMap => Api::<ConfigMap>::namespaced(client.clone(), namespace)
            .patch(name, &params, &patch)
            .await
            .map(|written| written.metadata.resource_version),
        ObjectKind::Secret => Api::<Secret>::namespaced(client.clone(), namespace)
            .patch(name, &params, &patch)
            .await
            .map(|written| written.metadata.resource_version),
    };
    match result {
        Ok(version) => Outcome::Written(copy.key.clone(), version.unwrap_or_default()),
        Err(error) if namespace_gone(&error) => Outcome::Skipped,
        // Only another field manager's object conflicts with a create: not kopper's.
        Err(kube::Error::Api(status)) if !force && status.is_conflict() => {
            Outcome::Unmanaged(copy.key.clone())
        }
        Err(source) => Outcome::Failed(WriteError::Write { key: copy.key.clone(), source }),
    }
}

/// Deletes the copy the plan saw, and no other object that may have taken its name since.
async fn delete(client: &Client, key: &CopyKey, uid: &str) -> Outcome {
    let params = DeleteParams::default()
        .preconditions(Preconditions { uid: Some(uid.to_owned()), resource_version: None });
    let result = match key.kind {
        ObjectKind::ConfigMap => Api::<ConfigMap>::namespaced(client.clone(), &key.namespace)
            .delete(&key.name, &params)
            .await
            .map(drop),
        ObjectKind::Secret => Api::<Secret>::namespaced(client.clone(), &key.namespace)
            .delete(&key.name, &params)
            .await
            .map(drop),
    };
    match result {
        Ok(()) => Outcome::Deleted(key.clone()),
        Err(kube::Error::Api(status)) if status.is_not_found() => Outcome::Deleted(key.clone()),
        // The uid precondition failed: the name now holds another object, which the next
        // pass judges on its own.
        Err(kube::Error::Api(status)) if status.is_conflict() => Outcome::Skipped,
        Err(source) => Outcome::Failed(WriteError::Delete { key: key.clone(), source }),
    }
}

/// Writing into a namespace that is gone or being deleted is not an error: the copy is no
/// longer wanted there.
fn namespace_gone(error: &kube::Error) -> bool {
    match error {
        kube::Error::Api(status) => is_namespace_gone(status),
        _ => false,
    }
}

fn is_namespace_gone(status: &Status) -> bool {
    status.is_not_found() || (status.is_forbidden() && status.message.contains("being terminated"))
}

/// The apply configuration of a copy: exactly the fields kopper owns.
pub fn manifest(copy: &DesiredCopy) -> Value {
    let mut object = Map::new();
    object.insert("apiVersion".into(), json!("v1"));
    object.insert("kind".into(), json!(copy.key.kind.to_string()));
    object.insert(
        "metadata".into(),
        json!({
            "name": copy.key.name,
            "namespace": copy.key.namespace,
            "labels": *copy.labels,
            "annotations": *copy.annotations,
        }),
    );
    let payload = &copy.payload;
    match copy.key.kind {
        ObjectKind::ConfigMap => {
            if !payload.data.is_empty() {
                object.insert("data".into(), json!(payload.data));
            }
            if !payload.binary_data.is_empty() {
                object.insert("binaryData".into(), json!(payload.binary_data));
            }
        }
        ObjectKind::Secret => {
            if !payload.binary_data.is_empty() {
                object.insert("data".into(), json!(payload.binary_data));
            }
            if let Some(secret_type) = &payload.secret_type {
                object.insert("type".into(), json!(secret_type));
            }
        }
    }
    if payload.immutable {
        object.insert("immutable".into(), json!(true));
    }
    Value::Object(object)
}

#[cfg(test)]
mod tests {
    use k8s_openapi::ByteString;

    use super::*;
    use crate::controllers::replication::desired::{ObjectInfo, Payload, RuleId, Source, desired_copy};

    fn copy(kind: ObjectKind, payload: Payload) -> DesiredCopy {
        let info = ObjectInfo { namespace: "src".into(), name: "x".into(), ..ObjectInfo::default() };
        let mut copy =
            desired_copy(&RuleId::replication_rule("r"), kind, &Source::new(info, payload), "dest");
        copy.key.kind = kind;
        copy
    }

    #[test]
    fn secret_manifest_keeps_type_and_base64_data_and_nothing_server_set() {
        let payload = Payload {
            binary_data: [("tls.crt".to_owned(), ByteString(b"cert".to_vec()))].into(),
            secret_type: Some("kubernetes.io/tls".into()),
            immutable: true,
            ..Payload::default()
        };
        let manifest = manifest(&copy(ObjectKind::Secret, payload));
        assert_eq!(manifest["kind"], "Secret");
        assert_eq!(manifest["type"], "kubernetes.io/tls");
        assert_eq!(manifest["data"]["tls.crt"], "Y2VydA==");
        assert_eq!(manifest["immutable"], true);
        let metadata = manifest["metadata"].as_object().unwrap();
        let keys: Vec<&str> = metadata.keys().map(String::as_str).collect();
        assert_eq!(keys, ["annotations", "labels", "name", "namespace"]);
    }

    #[test]
    fn config_map_manifest_sends_only_owned_fields() {
        let payload = Payload { data: [("a".to_owned(), "1".to_owned())].into(), ..Payload::default() };
        let manifest = manifest(&copy(ObjectKind::ConfigMap, payload));
        let keys: Vec<&str> = manifest.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(keys, ["apiVersion", "data", "kind", "metadata"]);
    }
}
