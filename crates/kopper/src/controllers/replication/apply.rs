//! Thin I/O: makes the changes a plan decided. Every write is atomic against a racing
//! writer: a copy is created with a POST (which fails if the name is taken), updated with a
//! full replace conditioned on the resourceVersion of the copy it checked (read, or as its
//! watch saw it), and deleted with a uid precondition. So kopper never merges into, takes over or deletes an object it did
//! not make, even one that appeared a moment after it looked.

use std::collections::{BTreeMap, BTreeSet};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{DeleteParams, PostParams, Preconditions};
use kube::core::{ObjectMeta, Status};
use kube::{Api, Client};
use serde_json::{Map, Value, json};

use super::desired::{Change, CopyKey, DesiredCopy, ObjectInfo, ObjectKind};

/// The kinds kopper copies (ConfigMap, Secret), written through their typed API.
trait CopyObject:
    kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
    + Clone
    + serde::Serialize
    + serde::de::DeserializeOwned
    + std::fmt::Debug
{
}

impl<K> CopyObject for K where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::Serialize
        + serde::de::DeserializeOwned
        + std::fmt::Debug
{
}

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
    /// The copy is no longer at the resourceVersion the write was conditioned on.
    Stale,
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
            Outcome::Skipped | Outcome::Stale => {}
            Outcome::Failed(error) => applied.failed.push(error),
        }
    }
    applied
}

async fn apply_change(client: &Client, field_manager: &str, change: &Change) -> Outcome {
    match change {
        Change::Create(copy) | Change::CreateIfAbsent(copy) => create(client, field_manager, copy).await,
        Change::Update { existing_uid, seen_version: Some(version), copy } => {
            update_seen(client, field_manager, copy, existing_uid, version).await
        }
        Change::Update { existing_uid, seen_version: None, copy } => {
            update(client, field_manager, copy, existing_uid).await
        }
        Change::Replace { existing_uid, copy } => match delete(client, &copy.key, existing_uid).await {
            Outcome::Deleted(_) => create(client, field_manager, copy).await,
            other => other,
        },
        Change::Delete { key, uid } => delete(client, key, uid).await,
        Change::Conflict { .. } => Outcome::Skipped,
    }
}

/// Creates the copy with a POST, which fails if an object of that name exists: one that
/// appeared after kopper looked (a tenant racing it) is never merged into or taken over.
async fn create(client: &Client, field_manager: &str, copy: &DesiredCopy) -> Outcome {
    let params = PostParams { field_manager: Some(field_manager.to_owned()), ..PostParams::default() };
    let namespace = &copy.key.namespace;
    let result = match copy.key.kind {
        ObjectKind::ConfigMap => post::<ConfigMap>(client, namespace, &params, manifest(copy)).await,
        ObjectKind::Secret => post::<Secret>(client, namespace, &params, manifest(copy)).await,
    };
    match result {
        Ok(version) => Outcome::Written(copy.key.clone(), version),
        Err(error) if namespace_gone(&error) => Outcome::Skipped,
        Err(kube::Error::Api(status)) if status.is_already_exists() => match look(client, &copy.key).await {
            // kopper's own copy, made by a pass that raced this one; its event follows.
            Ok(Some(meta)) if ObjectInfo::from_meta(&meta).is_kopper_copy() => Outcome::Skipped,
            Ok(Some(_)) => Outcome::Unmanaged(copy.key.clone()),
            Ok(None) => Outcome::Skipped,
            Err(source) => Outcome::Failed(WriteError::Write { key: copy.key.clone(), source }),
        },
        Err(source) => Outcome::Failed(WriteError::Write { key: copy.key.clone(), source }),
    }
}

async fn post<K: CopyObject>(
    client: &Client,
    namespace: &str,
    params: &PostParams,
    body: Value,
) -> kube::Result<String> {
    let object: K = serde_json::from_value(body).map_err(kube::Error::SerdeError)?;
    let created = Api::<K>::namespaced(client.clone(), namespace).create(params, &object).await?;
    Ok(created.meta().resource_version.clone().unwrap_or_default())
}

/// Rewrites kopper's copy `existing_uid` to exactly the desired content. The copy is read
/// fresh and its marks checked (the cache may be behind), and the write is conditioned on
/// the resourceVersion read: if anyone replaced or changed the object meanwhile, the API
/// server refuses it and the next pass judges the object anew. A full update, not a patch,
/// so keys the source no longer has are removed whoever added them.
async fn update(client: &Client, field_manager: &str, copy: &DesiredCopy, existing_uid: &str) -> Outcome {
    let key = &copy.key;
    let current = match look(client, key).await {
        Ok(Some(meta)) => meta,
        Ok(None) => return Outcome::Skipped,
        Err(source) => return Outcome::Failed(WriteError::Write { key: key.clone(), source }),
    };
    if current.uid.as_deref() != Some(existing_uid) {
        return Outcome::Skipped;
    }
    if !ObjectInfo::from_meta(&current).is_kopper_copy() {
        return Outcome::Unmanaged(key.clone());
    }
    match rewrite(client, field_manager, copy, &current).await {
        // Changed since it was read: its watch event brings the next pass.
        Outcome::Stale => Outcome::Skipped,
        outcome => outcome,
    }
}

/// Rewrites kopper's copy `existing_uid` at `version`, as its watch saw it, to exactly the
/// desired content, without reading it first: the write names that uid and resourceVersion,
/// so the API server refuses it if anyone changed or replaced the copy since, and the next
/// pass judges it anew. Half the requests of [`update`] for a fan-out.
async fn update_seen(
    client: &Client,
    field_manager: &str,
    copy: &DesiredCopy,
    existing_uid: &str,
    version: &str,
) -> Outcome {
    let seen = ObjectMeta {
        uid: Some(existing_uid.to_owned()),
        resource_version: Some(version.to_owned()),
        ..ObjectMeta::default()
    };
    match rewrite(client, field_manager, copy, &seen).await {
        // Changed since the watch saw it, or the watch is behind kopper's own last write (a
        // relist in progress, say): read it and try once more, so progress never waits on
        // the watch.
        Outcome::Stale => update(client, field_manager, copy, existing_uid).await,
        outcome => outcome,
    }
}

/// Replaces the copy with the desired content on the condition that it is still the object
/// `current` describes (uid and resourceVersion), keeping its finalizers and owners.
async fn rewrite(client: &Client, field_manager: &str, copy: &DesiredCopy, current: &ObjectMeta) -> Outcome {
    let key = &copy.key;
    let params = PostParams { field_manager: Some(field_manager.to_owned()), ..PostParams::default() };
    let body = replacement(copy, current);
    let result = match key.kind {
        ObjectKind::ConfigMap => put::<ConfigMap>(client, key, &params, body).await,
        ObjectKind::Secret => put::<Secret>(client, key, &params, body).await,
    };
    match result {
        Ok(version) => Outcome::Written(key.clone(), version),
        Err(error) if namespace_gone(&error) => Outcome::Skipped,
        Err(kube::Error::Api(status)) if status.is_conflict() => Outcome::Stale,
        Err(source) => Outcome::Failed(WriteError::Write { key: key.clone(), source }),
    }
}

async fn put<K: CopyObject>(
    client: &Client,
    key: &CopyKey,
    params: &PostParams,
    body: Value,
) -> kube::Result<String> {
    let object: K = serde_json::from_value(body).map_err(kube::Error::SerdeError)?;
    let api = Api::<K>::namespaced(client.clone(), &key.namespace);
    let replaced = api.replace(&key.name, params, &object).await?;
    Ok(replaced.meta().resource_version.clone().unwrap_or_default())
}

/// The desired copy as a full object replacing `current`: kopper's content, labels and
/// annotations, with the metadata others may rely on (finalizers, owner references) and
/// the resourceVersion that makes the write conditional kept from `current`: what was read,
/// or what the watch saw of a copy that has neither finalizers nor owners.
fn replacement(copy: &DesiredCopy, current: &ObjectMeta) -> Value {
    let mut body = manifest(copy);
    let metadata = &mut body["metadata"];
    metadata["resourceVersion"] = json!(current.resource_version);
    metadata["uid"] = json!(current.uid);
    if let Some(finalizers) = &current.finalizers {
        metadata["finalizers"] = json!(finalizers);
    }
    if let Some(owners) = &current.owner_references {
        metadata["ownerReferences"] = json!(owners);
    }
    body
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
            desired_copy(&RuleId::replication_rule("r"), "uid", kind, &Source::new(info, payload), "dest");
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
