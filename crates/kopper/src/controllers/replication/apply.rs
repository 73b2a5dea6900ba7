//! Thin I/O: makes the changes a plan decided. Every write is atomic against a racing
//! writer: a copy is created with a POST (which fails if the name is taken), updated with a
//! full replace conditioned on the resourceVersion of the copy it checked (read, or as its
//! watch saw it), and deleted with a uid precondition. So kopper never merges into, takes over or deletes an object it did
//! not make, even one that appeared a moment after it looked.

use std::collections::{BTreeMap, BTreeSet};

use futures::StreamExt;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::core::{DynamicObject, ObjectMeta, Status};
use kube::{Api, Client, Resource};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::desired::{Change, DesiredCopy};
use super::model::{
    CopyKey, GenericWire, ORPHANED_LABEL, ObjectKind, REPLICATED_BY_LABEL, RULE_ANNOTATION,
    RULE_UID_ANNOTATION, is_copy, is_orphan_for, is_orphan_of,
};

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
    /// Changed by someone else each time kopper tried to mark it an orphan, and still its
    /// rule's copy: the rule's finalizer is kept, and the orphaning tried again.
    #[error("leaving {key} as an orphan: it changed while kopper marked it; trying again")]
    OrphanRaced { key: CopyKey },
    /// Kopper's kind is not served (any more): discovery has not found it.
    #[error("writing {key}: the API server does not serve {kind}")]
    NotServed { key: CopyKey, kind: String },
}

/// The longest part of an API server's message a status quotes: an escalation refusal lists
/// every rule kopper lacks, which may be long.
const QUOTED_REASON_CHARS: usize = 300;

/// A write the API server refused as a privilege escalation: kopper may not create a Role
/// granting what it does not hold itself, nor a RoleBinding to a role it may not `bind`.
/// Permanent until kopper's rights or the source change: reported by name, not retried hot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EscalationRefused {
    pub key: CopyKey,
    /// The API server's reason, cut to a few hundred characters.
    pub reason: String,
}

/// What a plan's execution did.
#[derive(Debug, Default)]
pub struct Applied {
    /// Copies created or updated; with those left as orphans, the resourceVersion the server
    /// gave them.
    pub written: BTreeSet<CopyKey>,
    pub versions: BTreeMap<CopyKey, String>,
    /// Copies removed (including those already gone).
    pub removed: BTreeSet<CopyKey>,
    pub deleted: usize,
    /// Copies left in place as orphans (also in `removed`: they are no longer the rule's).
    pub orphaned: usize,
    /// Places where a copy was to be created but an object kopper did not make was found.
    pub unmanaged: Vec<CopyKey>,
    /// Writes another write got to first (another pass, or someone else): the next pass
    /// judges these copies anew.
    pub raced: Vec<CopyKey>,
    pub failed: Vec<WriteError>,
    /// Copies the API server refused to write as a privilege escalation.
    pub escalations: Vec<EscalationRefused>,
    /// Copies of kinds the server renders on its own terms (see
    /// [`ObjectKind::is_generic`]) found, by a dry-run of their write, to hold what kopper
    /// would write: in sync, nothing written.
    pub verified: BTreeSet<CopyKey>,
    /// For each copy of such a kind written or verified: the digest of the content kopper
    /// wrote, and of the server's rendering of it.
    pub renderings: Vec<(CopyKey, u64, u64)>,
}

impl Applied {
    /// Adds what another execution did.
    pub fn merge(&mut self, other: Applied) {
        self.written.extend(other.written);
        self.versions.extend(other.versions);
        self.removed.extend(other.removed);
        self.deleted += other.deleted;
        self.orphaned += other.orphaned;
        self.unmanaged.extend(other.unmanaged);
        self.raced.extend(other.raced);
        self.failed.extend(other.failed);
        self.escalations.extend(other.escalations);
        self.verified.extend(other.verified);
        self.renderings.extend(other.renderings);
    }
}

enum Outcome {
    /// Written; for a generic kind, with the digests of what was written and how the server
    /// rendered it.
    Written(CopyKey, String, Option<(u64, u64)>),
    /// A dry-run showed the copy holds what the write would give it (digests as above).
    Verified(CopyKey, (u64, u64)),
    Escalation(EscalationRefused),
    Deleted(CopyKey),
    Orphaned(CopyKey, String),
    /// An object kopper did not make holds the place; it is left as it is.
    Unmanaged(CopyKey),
    /// Nothing to do after all: the namespace is gone.
    Skipped,
    /// The object is gone, or changed or was made under us: the next pass judges it anew.
    Raced(CopyKey),
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
            Outcome::Written(key, version, rendering) => {
                if let Some((desired, rendered)) = rendering {
                    applied.renderings.push((key.clone(), desired, rendered));
                }
                applied.written.insert(key.clone());
                applied.versions.insert(key, version);
            }
            Outcome::Verified(key, (desired, rendered)) => {
                applied.renderings.push((key.clone(), desired, rendered));
                applied.verified.insert(key);
            }
            Outcome::Escalation(refused) => applied.escalations.push(refused),
            Outcome::Deleted(key) => {
                applied.deleted += 1;
                applied.removed.insert(key);
            }
            Outcome::Orphaned(key, version) => {
                applied.orphaned += 1;
                applied.versions.insert(key.clone(), version);
                applied.removed.insert(key);
            }
            Outcome::Unmanaged(key) => applied.unmanaged.push(key),
            Outcome::Raced(key) => applied.raced.push(key),
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
        Change::Replace { existing_uid, seen_version, copy } => {
            match delete(client, &copy.key, existing_uid, seen_version.as_deref()).await {
                Outcome::Deleted(_) => create(client, field_manager, copy).await,
                other => other,
            }
        }
        Change::Delete { key, uid, seen_version } => delete(client, key, uid, seen_version.as_deref()).await,
        Change::Adopt { existing_uid, seen_version, copy } => {
            let marks = serde_json::json!({
                "labels": { REPLICATED_BY_LABEL: copy.labels.get(REPLICATED_BY_LABEL), ORPHANED_LABEL: null },
                "annotations": {
                    RULE_ANNOTATION: copy.annotations.get(RULE_ANNOTATION),
                    RULE_UID_ANNOTATION: copy.annotations.get(RULE_UID_ANNOTATION),
                },
            });
            let still_orphan = |meta: &ObjectMeta| is_orphan_of(meta, &copy.source.uid);
            let seen = seen_version.as_deref();
            match patch_marks(client, field_manager, &copy.key, existing_uid, seen, still_orphan, marks).await
            {
                Ok(version) => Outcome::Written(copy.key.clone(), version, None),
                Err(outcome) => outcome,
            }
        }
        Change::Orphan { key, uid, seen_version, rule } => {
            let marks =
                serde_json::json!({ "labels": { REPLICATED_BY_LABEL: null, ORPHANED_LABEL: "true" } });
            let still_ours = |meta: &ObjectMeta| {
                is_copy(meta)
                    && meta.labels.as_ref().and_then(|labels| labels.get(REPLICATED_BY_LABEL)) == Some(rule)
            };
            match patch_marks(client, field_manager, key, uid, seen_version.as_deref(), still_ours, marks)
                .await
            {
                Ok(version) => Outcome::Orphaned(key.clone(), version),
                // Lost a race: done only if the copy is no longer the rule's, as read now;
                // otherwise the rule's cleanup fails and keeps its finalizer, so the orphan
                // sweep never finds the copy still labelled for a rule that is gone.
                Err(Outcome::Raced(_)) => match look(client, key).await {
                    Ok(current) => after_lost_orphaning(key, current.as_ref(), rule),
                    Err(source) => Outcome::Failed(WriteError::Write { key: key.clone(), source }),
                },
                Err(outcome) => outcome,
            }
        }
        Change::Conflict { .. } => Outcome::Skipped,
    }
}

/// What came of an orphaning of the copy at `key` (of the rule labelled `rule`) that lost a
/// race, given the object there as read after it (`current`): orphaned after all (by a
/// concurrent attempt), gone or no longer the rule's (nothing left to orphan), or still the
/// rule's copy, which is a failure to retry.
fn after_lost_orphaning(key: &CopyKey, current: Option<&ObjectMeta>, rule: &str) -> Outcome {
    let Some(meta) = current else { return Outcome::Skipped };
    let labels = meta.labels.as_ref();
    let label = |name: &str| labels.and_then(|labels| labels.get(name)).map(String::as_str);
    if is_copy(meta) && label(REPLICATED_BY_LABEL) == Some(rule) {
        return Outcome::Failed(WriteError::OrphanRaced { key: key.clone() });
    }
    match (label(ORPHANED_LABEL), &meta.resource_version) {
        (Some("true"), Some(version)) if label(REPLICATED_BY_LABEL).is_none() => {
            Outcome::Orphaned(key.clone(), version.clone())
        }
        _ => Outcome::Skipped,
    }
}

/// Merges `marks` (labels and annotations) into the copy at `key`, on the condition that it
/// is still the object of uid `uid` that `still_as_planned` accepts: at `seen_version` as
/// its watch saw it, or else as read now (and read again once if it changed since the
/// watch saw it). Content and everything else on the copy are left as they are. Returns
/// the copy's new resourceVersion, or what came of the attempt.
async fn patch_marks(
    client: &Client,
    field_manager: &str,
    key: &CopyKey,
    uid: &str,
    seen_version: Option<&str>,
    still_as_planned: impl Fn(&ObjectMeta) -> bool,
    marks: serde_json::Value,
) -> Result<String, Outcome> {
    let mut version = seen_version.map(str::to_owned);
    for _ in 0..2 {
        let expected = match version.take() {
            Some(version) => version,
            None => match look(client, key).await {
                Ok(Some(meta)) if meta.uid.as_deref() != Some(uid) => {
                    return Err(Outcome::Raced(key.clone()));
                }
                Ok(Some(meta)) if !still_as_planned(&meta) => return Err(Outcome::Raced(key.clone())),
                Ok(Some(meta)) => meta.resource_version.unwrap_or_default(),
                Ok(None) => return Err(Outcome::Raced(key.clone())),
                Err(source) => return Err(Outcome::Failed(WriteError::Write { key: key.clone(), source })),
            },
        };
        let mut patch = serde_json::json!({ "metadata": marks.clone() });
        patch["metadata"]["resourceVersion"] = expected.into();
        let params = PatchParams { field_manager: Some(field_manager.to_owned()), ..PatchParams::default() };
        let result = match key.kind {
            ObjectKind::ConfigMap => Api::<ConfigMap>::namespaced(client.clone(), &key.namespace)
                .patch_metadata(&key.name, &params, &Patch::Merge(&patch))
                .await
                .map(|object| object.metadata),
            ObjectKind::Secret => Api::<Secret>::namespaced(client.clone(), &key.namespace)
                .patch_metadata(&key.name, &params, &Patch::Merge(&patch))
                .await
                .map(|object| object.metadata),
            ObjectKind::Other(_) => match dynamic_api(client, key) {
                Some(api) => api
                    .patch_metadata(&key.name, &params, &Patch::Merge(&patch))
                    .await
                    .map(|object| object.metadata),
                None => return Err(Outcome::Failed(not_served(key))),
            },
        };
        match result {
            Ok(meta) => return Ok(meta.resource_version.unwrap_or_default()),
            Err(error) if namespace_gone(&error) => return Err(Outcome::Skipped),
            // Changed since it was seen: read it and judge it again, once.
            Err(kube::Error::Api(status)) if status.is_conflict() => {}
            Err(source) => return Err(Outcome::Failed(WriteError::Write { key: key.clone(), source })),
        }
    }
    Err(Outcome::Raced(key.clone()))
}

/// Creates the copy with a POST, which fails if an object of that name exists: one that
/// appeared after kopper looked (a tenant racing it) is never merged into or taken over.
async fn create(client: &Client, field_manager: &str, copy: &DesiredCopy) -> Outcome {
    // An object that held the name and was gone when kopper looked (made and deleted by
    // someone else) shows in no watch of kopper's, so nothing would bring the copy soon:
    // it is tried once more at once.
    match create_once(client, field_manager, copy).await {
        Some(outcome) => outcome,
        None => {
            create_once(client, field_manager, copy).await.unwrap_or_else(|| Outcome::Raced(copy.key.clone()))
        }
    }
}

/// One POST of the copy; `None` if the name was held by an object that is gone now.
async fn create_once(client: &Client, field_manager: &str, copy: &DesiredCopy) -> Option<Outcome> {
    let outcome = match write(client, field_manager, Write::Create, &copy.key, &Manifest::of(copy)).await {
        Ok(answer) => answer.outcome(copy),
        Err(WriteFailure::NotServed(error)) => Outcome::Failed(error),
        Err(WriteFailure::Api(error)) if escalation(&copy.key, &error).is_some() => {
            escalation(&copy.key, &error).map_or(Outcome::Skipped, Outcome::Escalation)
        }
        Err(WriteFailure::Api(error)) if namespace_gone(&error) => Outcome::Skipped,
        Err(WriteFailure::Api(kube::Error::Api(status))) if status.is_already_exists() => {
            match look(client, &copy.key).await {
                // kopper's own copy, made by a pass that raced this one.
                Ok(Some(meta)) if is_copy(&meta) => Outcome::Raced(copy.key.clone()),
                Ok(Some(_)) => Outcome::Unmanaged(copy.key.clone()),
                Ok(None) => return None,
                Err(source) => Outcome::Failed(WriteError::Write { key: copy.key.clone(), source }),
            }
        }
        Err(WriteFailure::Api(source)) => {
            Outcome::Failed(WriteError::Write { key: copy.key.clone(), source })
        }
    };
    Some(outcome)
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
        Ok(None) => return Outcome::Raced(key.clone()),
        Err(source) => return Outcome::Failed(WriteError::Write { key: key.clone(), source }),
    };
    if current.uid.as_deref() != Some(existing_uid) {
        return Outcome::Raced(key.clone());
    }
    // A copy orphaned from this very source, or by a rule this one outranks, is taken over
    // by this write.
    if !is_copy(&current) && !is_orphan_for(&current, &copy.source.uid, copy.rule.kind) {
        return Outcome::Unmanaged(key.clone());
    }
    match rewrite(client, field_manager, copy, &current).await {
        // Changed since it was read.
        Outcome::Stale => Outcome::Raced(key.clone()),
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
/// `current` describes (uid and resourceVersion), keeping its finalizers and owners. A copy
/// whose rendering is all kopper does not know ([`DesiredCopy::rendering_check`]) is
/// replaced in a dry-run first, and left as it is when the server would render the write
/// as the copy stands. A RoleBinding whose `roleRef` changed, which the API server never
/// updates, is deleted (on the same conditions) and created again.
async fn rewrite(client: &Client, field_manager: &str, copy: &DesiredCopy, current: &ObjectMeta) -> Outcome {
    let key = &copy.key;
    let manifest = Manifest::replacing(copy, current);
    if let Some(in_place) = copy.rendering_check {
        match write(client, field_manager, Write::DryRunReplace, key, &manifest).await {
            Ok(WriteAnswer { rendered: Some(rendered), .. }) if rendered == in_place => {
                return Outcome::Verified(key.clone(), (copy.content, rendered));
            }
            Ok(_) => {}
            // A dry-run refused for what the real replace would meet too: that replace is
            // not sent.
            Err(WriteFailure::Api(error)) if dry_run_refusal_holds(key, &error) => {
                return failed_rewrite(client, field_manager, copy, current, WriteFailure::Api(error)).await;
            }
            Err(WriteFailure::NotServed(error)) => return Outcome::Failed(error),
            // Refused for the dry-run itself (a webhook with side effects answers any dryRun
            // with 400 "does not support dry run"), or for a reason the real replace meets
            // again and reports as such: judged by the real replace.
            Err(WriteFailure::Api(_)) => {}
        }
    }
    match write(client, field_manager, Write::Replace, key, &manifest).await {
        Ok(answer) => answer.outcome(copy),
        Err(failure) => failed_rewrite(client, field_manager, copy, current, failure).await,
    }
}

/// What a refused replace of `copy` (the object `current` describes) comes to.
async fn failed_rewrite(
    client: &Client,
    field_manager: &str,
    copy: &DesiredCopy,
    current: &ObjectMeta,
    failure: WriteFailure,
) -> Outcome {
    let key = &copy.key;
    let error = match failure {
        WriteFailure::NotServed(error) => return Outcome::Failed(error),
        WriteFailure::Api(error) => error,
    };
    if let Some(refused) = escalation(key, &error) {
        return Outcome::Escalation(refused);
    }
    match error {
        error if namespace_gone(&error) => Outcome::Skipped,
        kube::Error::Api(status) if status.is_conflict() => Outcome::Stale,
        kube::Error::Api(status) if refuses_role_ref_change(key, &status) => {
            let uid = current.uid.as_deref().unwrap_or_default();
            match delete(client, key, uid, current.resource_version.as_deref()).await {
                Outcome::Deleted(_) => create(client, field_manager, copy).await,
                other => other,
            }
        }
        source => Outcome::Failed(WriteError::Write { key: key.clone(), source }),
    }
}

/// Whether a dry-run replace of the copy at `key` refused with `error` tells what the real
/// replace would meet: the copy changed (409), is gone with its namespace (404), the write
/// is an escalation, or it changes a RoleBinding's `roleRef`. Anything else (a webhook that
/// refuses every dry-run, say, as kube-apiserver does for `sideEffects: Unknown` or `Some`)
/// is the dry-run's own failure, and the real replace is sent: otherwise no copy of a
/// generic kind would ever be judged after a restart.
fn dry_run_refusal_holds(key: &CopyKey, error: &kube::Error) -> bool {
    if escalation(key, error).is_some() || namespace_gone(error) {
        return true;
    }
    match error {
        kube::Error::Api(status) => status.is_conflict() || refuses_role_ref_change(key, status),
        _ => false,
    }
}

/// Whether the API server refused a replace of the copy at `key` because it changes a
/// RoleBinding's `roleRef`, which cannot change once set.
fn refuses_role_ref_change(key: &CopyKey, status: &Status) -> bool {
    key.kind.is(crate::kinds::RBAC_GROUP, "RoleBinding")
        && status.code == 422
        && status
            .details
            .as_ref()
            .is_some_and(|details| details.causes.iter().any(|cause| cause.field == "roleRef"))
}

/// The API server's words for a Role granting what the writer does not hold, or a binding
/// to a role it may not bind. Matched alone: the message also holds the object's name,
/// which a source's author chooses ("escalation-test", say).
const ESCALATION_MESSAGE: &str = "attempting to grant RBAC permissions not currently held";

/// The escalation refusal `error` is, for a copy of a kind of the RBAC group: the API
/// server's 403 on a Role granting what kopper does not hold, or a binding to a role
/// kopper may not bind.
fn escalation(key: &CopyKey, error: &kube::Error) -> Option<EscalationRefused> {
    let ObjectKind::Other(kind) = key.kind else { return None };
    let kube::Error::Api(status) = error else { return None };
    let escalating = kind.entry.group == crate::kinds::RBAC_GROUP
        && status.code == 403
        && status.message.contains(ESCALATION_MESSAGE);
    escalating
        .then(|| EscalationRefused { key: key.clone(), reason: cut(&status.message, QUOTED_REASON_CHARS) })
}

/// `text` cut to `chars` characters, marked when cut.
fn cut(text: &str, chars: usize) -> String {
    match text.char_indices().nth(chars) {
        None => text.to_owned(),
        Some((end, _)) => format!("{}...", &text[..end]),
    }
}

/// How a write reaches the API server.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Write {
    /// POST: fails if the name is taken.
    Create,
    /// PUT: fails unless the object is still at the uid and resourceVersion sent.
    Replace,
    /// The same PUT with `dryRun=All`: the object as it would be, nothing written.
    DryRunReplace,
}

/// Why a write was not made.
enum WriteFailure {
    Api(kube::Error),
    /// The copy's kind is not (yet) known to be served.
    NotServed(WriteError),
}

/// What a write's answer tells: the copy's new resourceVersion, and for a generic kind the
/// digest of the server's rendering of it (see [`super::model::Payload::generic`]).
struct WriteAnswer {
    version: String,
    rendered: Option<u64>,
}

impl WriteAnswer {
    fn outcome(self, copy: &DesiredCopy) -> Outcome {
        let rendering = self.rendered.map(|rendered| (copy.content, rendered));
        Outcome::Written(copy.key.clone(), self.version, rendering)
    }
}

/// What kopper reads from the API server's answer to a write: the copy's new
/// resourceVersion. The rest (the whole object, managedFields included) is skipped while
/// parsing instead of built and dropped, which counts when one update fans out to
/// thousands of copies.
#[derive(Deserialize)]
struct Written {
    #[serde(default)]
    metadata: WrittenMeta,
}

#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct WrittenMeta {
    resource_version: Option<String>,
}

/// Sends `manifest` as a create or a full replace of the copy at `key`, through kube's
/// request builder and client like a typed call, and returns the resourceVersion the API
/// server gave the copy (and, for a generic kind, the digest of its rendering). The body
/// is serialised once, straight from the desired copy.
async fn write(
    client: &Client,
    field_manager: &str,
    how: Write,
    key: &CopyKey,
    manifest: &Manifest<'_>,
) -> Result<WriteAnswer, WriteFailure> {
    let params =
        PostParams { field_manager: Some(field_manager.to_owned()), dry_run: how == Write::DryRunReplace };
    let url_path = match key.kind {
        ObjectKind::ConfigMap => ConfigMap::url_path(&(), Some(&key.namespace)),
        ObjectKind::Secret => Secret::url_path(&(), Some(&key.namespace)),
        ObjectKind::Other(kind) => match kind.resource() {
            Some(resource) => DynamicObject::url_path(resource, Some(&key.namespace)),
            None => return Err(WriteFailure::NotServed(not_served(key))),
        },
    };
    let requests = kube::core::Request::new(url_path);
    let body =
        serde_json::to_vec(manifest).map_err(|error| WriteFailure::Api(kube::Error::SerdeError(error)))?;
    let (request, verb) = match how {
        Write::Create => (requests.create(&params, body), "create"),
        Write::Replace | Write::DryRunReplace => (requests.replace(&key.name, &params, body), "replace"),
    };
    let mut request = request.map_err(|error| WriteFailure::Api(kube::Error::BuildRequest(error)))?;
    request.extensions_mut().insert(verb);
    if key.kind.is_generic() {
        let answer: GenericWire<WrittenMeta> = client.request(request).await.map_err(WriteFailure::Api)?;
        let version = answer.metadata.resource_version.unwrap_or_default();
        return Ok(WriteAnswer { version, rendered: Some(answer.content.digest()) });
    }
    let written: Written = client.request(request).await.map_err(WriteFailure::Api)?;
    Ok(WriteAnswer { version: written.metadata.resource_version.unwrap_or_default(), rendered: None })
}

fn not_served(key: &CopyKey) -> WriteError {
    WriteError::NotServed { key: key.clone(), kind: key.kind.to_string() }
}

/// The API of the copies of `key`'s kind in its namespace, for a kind other than ConfigMap
/// and Secret, once discovery found it.
fn dynamic_api(client: &Client, key: &CopyKey) -> Option<Api<DynamicObject>> {
    let resource = key.kind.api_resource()?;
    Some(Api::namespaced_with(client.clone(), &key.namespace, &resource))
}

/// The metadata of whatever is at `key`, if anything.
async fn look(client: &Client, key: &CopyKey) -> Result<Option<ObjectMeta>, kube::Error> {
    let (namespace, name) = (&key.namespace, &key.name);
    Ok(match key.kind {
        ObjectKind::Other(_) => {
            let Some(resource) = key.kind.api_resource() else { return Ok(None) };
            Api::<DynamicObject>::namespaced_with(client.clone(), namespace, &resource)
                .get_metadata_opt(name)
                .await?
                .map(|object| object.metadata)
        }
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

/// Deletes the copy the plan saw, and no other object that may have taken its name since;
/// with `seen_version`, not that copy either if it changed since (a tenant may have taken
/// it over by removing kopper's label).
async fn delete(client: &Client, key: &CopyKey, uid: &str, seen_version: Option<&str>) -> Outcome {
    let params = DeleteParams::default().preconditions(Preconditions {
        uid: Some(uid.to_owned()),
        resource_version: seen_version.map(str::to_owned),
    });
    let result = match key.kind {
        ObjectKind::ConfigMap => Api::<ConfigMap>::namespaced(client.clone(), &key.namespace)
            .delete(&key.name, &params)
            .await
            .map(drop),
        ObjectKind::Secret => Api::<Secret>::namespaced(client.clone(), &key.namespace)
            .delete(&key.name, &params)
            .await
            .map(drop),
        ObjectKind::Other(_) => match dynamic_api(client, key) {
            Some(api) => api.delete(&key.name, &params).await.map(drop),
            None => return Outcome::Failed(not_served(key)),
        },
    };
    match result {
        Ok(()) => Outcome::Deleted(key.clone()),
        Err(kube::Error::Api(status)) if status.is_not_found() => Outcome::Deleted(key.clone()),
        // A precondition failed: the name now holds another object, or the copy changed
        // since kopper saw it; the next pass judges what is there on its own.
        Err(kube::Error::Api(status)) if status.is_conflict() => Outcome::Raced(key.clone()),
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

/// A copy as kopper sends it: exactly the fields kopper owns, borrowed from the desired
/// copy and serialised once. Not `Debug`: it holds a Secret's data.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Manifest<'a> {
    api_version: String,
    kind: &'a str,
    metadata: ManifestMeta<'a>,
    /// A generic kind's content (empty for ConfigMaps and Secrets).
    #[serde(flatten)]
    fields: &'a BTreeMap<String, Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    data: Option<Data<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    binary_data: Option<&'a BTreeMap<String, ByteString>>,
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    secret_type: Option<&'a str>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    immutable: bool,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ManifestMeta<'a> {
    name: &'a str,
    namespace: &'a str,
    labels: &'a BTreeMap<String, String>,
    annotations: &'a BTreeMap<String, String>,
    /// With `uid`, what makes a replace conditional: the copy as it was read, or as its
    /// watch saw it.
    #[serde(skip_serializing_if = "Option::is_none")]
    resource_version: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    uid: Option<&'a str>,
    /// Kept from the copy replaced: others may rely on them.
    #[serde(skip_serializing_if = "Option::is_none")]
    finalizers: Option<&'a [String]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    owner_references: Option<&'a [OwnerReference]>,
}

/// A ConfigMap's `data` is text; a Secret's is base64 of bytes.
#[derive(Serialize)]
#[serde(untagged)]
enum Data<'a> {
    Text(&'a BTreeMap<String, String>),
    Bytes(&'a BTreeMap<String, ByteString>),
}

impl<'a> Manifest<'a> {
    /// The copy to create.
    pub fn of(copy: &'a DesiredCopy) -> Self {
        let payload = &*copy.payload;
        let (kind, data, binary_data, secret_type) = match copy.key.kind {
            ObjectKind::Other(kind) => (kind.entry.kind.as_str(), None, None, None),
            ObjectKind::ConfigMap => (
                "ConfigMap",
                (!payload.data.is_empty()).then_some(Data::Text(&payload.data)),
                (!payload.binary_data.is_empty()).then_some(&payload.binary_data),
                None,
            ),
            ObjectKind::Secret => (
                "Secret",
                (!payload.binary_data.is_empty()).then_some(Data::Bytes(&payload.binary_data)),
                None,
                payload.secret_type.as_deref(),
            ),
        };
        let metadata = ManifestMeta {
            name: &copy.key.name,
            namespace: &copy.key.namespace,
            labels: &copy.labels,
            annotations: &copy.annotations,
            resource_version: None,
            uid: None,
            finalizers: None,
            owner_references: None,
        };
        let api_version = match copy.key.kind {
            ObjectKind::Other(kind) => kind.entry.api_version(),
            ObjectKind::ConfigMap | ObjectKind::Secret => "v1".to_owned(),
        };
        Self {
            api_version,
            kind,
            metadata,
            fields: &payload.fields,
            data,
            binary_data,
            secret_type,
            immutable: payload.immutable,
        }
    }

    /// The copy as a full object replacing `current`: kopper's content, labels and
    /// annotations, with the metadata others may rely on (finalizers, owner references) and
    /// the uid and resourceVersion that make the write conditional kept from `current`: what
    /// was read, or what the watch saw of a copy that has neither finalizers nor owners.
    pub fn replacing(copy: &'a DesiredCopy, current: &'a ObjectMeta) -> Self {
        let mut manifest = Self::of(copy);
        let metadata = &mut manifest.metadata;
        metadata.resource_version = current.resource_version.as_deref();
        metadata.uid = current.uid.as_deref();
        metadata.finalizers = current.finalizers.as_deref();
        metadata.owner_references = current.owner_references.as_deref();
        manifest
    }
}

#[cfg(test)]
mod races;

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::controllers::replication::desired::desired_copy;
    use crate::controllers::replication::model::{ObjectInfo, Payload, RuleId, Source};

    fn copy(kind: ObjectKind, payload: Payload) -> DesiredCopy {
        let info = ObjectInfo { namespace: "src".into(), name: "x".into(), ..ObjectInfo::default() };
        let mut copy =
            desired_copy(&RuleId::replication_rule("r"), "uid", kind, &Source::new(info, payload), "dest");
        copy.key.kind = kind;
        copy
    }

    /// Keys of copies of allowed kinds, made once per test binary.
    fn key_of(entry: &str, name: &str) -> CopyKey {
        static KINDS: std::sync::LazyLock<crate::kinds::AllowedKinds> = std::sync::LazyLock::new(|| {
            crate::kinds::AllowedKinds::new(
                [
                    "rbac.authorization.k8s.io/v1/Role",
                    "rbac.authorization.k8s.io/v1/RoleBinding",
                    "networking.k8s.io/v1/NetworkPolicy",
                ]
                .map(|entry| crate::kinds::parse_entry(entry).unwrap()),
            )
        });
        let (api_version, kind) = entry.rsplit_once('/').unwrap();
        let allowed = KINDS.find(api_version, kind).unwrap();
        CopyKey { kind: ObjectKind::Other(allowed), namespace: "team-a".into(), name: name.into() }
    }

    /// An API error as the server answers it: `code`, `message`, and the fields it names.
    fn api_error(code: u16, message: &str, fields: &[&str]) -> kube::Error {
        let causes: Vec<Value> =
            fields.iter().map(|field| json!({"field": field, "reason": "FieldValueInvalid"})).collect();
        let reason = match code {
            400 => "BadRequest",
            403 => "Forbidden",
            404 => "NotFound",
            409 => "Conflict",
            422 => "Invalid",
            _ => "InternalError",
        };
        let status: Status = serde_json::from_value(
            json!({"code": code, "reason": reason, "message": message, "details": {"causes": causes}}),
        )
        .unwrap();
        kube::Error::Api(Box::new(status))
    }

    fn status_of(error: &kube::Error) -> &Status {
        let kube::Error::Api(status) = error else { panic!("an API error") };
        status
    }

    const ESCALATION: &str = "roles.rbac.authorization.k8s.io \"exec\" is forbidden: user \"kopper\" (groups=[]) is \
        attempting to grant RBAC permissions not currently held:\n{APIGroups:[\"\"], Resources:[\"pods/exec\"], \
        Verbs:[\"create\"]}";

    #[test]
    fn an_escalation_is_the_api_server_s_403_on_an_rbac_kind_matched_by_its_words_not_the_name() {
        let role = key_of("rbac.authorization.k8s.io/v1/Role", "exec");
        let refused = escalation(&role, &api_error(403, ESCALATION, &[])).expect("an escalation");
        assert_eq!(refused.key, role);
        assert!(refused.reason.contains(ESCALATION_MESSAGE));
        // Any other refusal of the same write, whatever the object's name says.
        let named = key_of("rbac.authorization.k8s.io/v1/Role", "escalation-test");
        let forbidden =
            "roles.rbac.authorization.k8s.io \"escalation-test\" is forbidden: user cannot create";
        assert_eq!(escalation(&named, &api_error(403, forbidden, &[])), None, "the name is not the reason");
        assert_eq!(escalation(&role, &api_error(422, ESCALATION, &[])), None, "only a 403");
        let policy = key_of("networking.k8s.io/v1/NetworkPolicy", "exec");
        assert_eq!(escalation(&policy, &api_error(403, ESCALATION, &[])), None, "only the RBAC group");
        let long = format!("{ESCALATION}{}", "x".repeat(1000));
        let cut_reason = escalation(&role, &api_error(403, &long, &[])).unwrap().reason;
        assert!(cut_reason.chars().count() <= QUOTED_REASON_CHARS + 3, "bounded: {}", cut_reason.len());
    }

    #[test]
    fn only_a_role_binding_s_role_ref_refused_as_invalid_is_replaced_by_delete_then_create() {
        let binding = key_of("rbac.authorization.k8s.io/v1/RoleBinding", "b");
        let role_ref = api_error(422, "RoleBinding.rbac.authorization.k8s.io \"b\" is invalid", &["roleRef"]);
        assert!(refuses_role_ref_change(&binding, status_of(&role_ref)));
        let subjects = api_error(422, "invalid", &["subjects[0].kind"]);
        assert!(!refuses_role_ref_change(&binding, status_of(&subjects)), "another field");
        let forbidden = api_error(403, "forbidden", &["roleRef"]);
        assert!(!refuses_role_ref_change(&binding, status_of(&forbidden)), "not a 422");
        for other in ["rbac.authorization.k8s.io/v1/Role", "networking.k8s.io/v1/NetworkPolicy"] {
            let key = key_of(other, "b");
            assert!(!refuses_role_ref_change(&key, status_of(&role_ref)), "{other}: never deleted on a 422");
        }
    }

    #[test]
    fn a_dry_run_refused_for_itself_falls_through_to_the_real_replace() {
        let binding = key_of("rbac.authorization.k8s.io/v1/RoleBinding", "b");
        let webhook =
            api_error(400, "admission webhook \"policy.example.com\" does not support dry run", &[]);
        assert!(!dry_run_refusal_holds(&binding, &webhook), "sideEffects: Unknown or Some");
        assert!(!dry_run_refusal_holds(&binding, &api_error(500, "etcd timeout", &[])));
        assert!(!dry_run_refusal_holds(&binding, &api_error(422, "invalid", &["subjects"])));
        for holds in [
            api_error(409, "the object has been modified", &[]),
            api_error(404, "namespaces \"team-a\" not found", &[]),
            api_error(403, ESCALATION, &[]),
            api_error(422, "invalid", &["roleRef"]),
        ] {
            assert!(dry_run_refusal_holds(&binding, &holds), "{holds}");
        }
    }

    #[test]
    fn secret_manifest_keeps_type_and_base64_data_and_nothing_server_set() {
        let payload = Payload {
            binary_data: [("tls.crt".to_owned(), ByteString(b"cert".to_vec()))].into(),
            secret_type: Some("kubernetes.io/tls".into()),
            immutable: true,
            ..Payload::default()
        };
        let copy = copy(ObjectKind::Secret, payload);
        let manifest = serde_json::to_value(Manifest::of(&copy)).unwrap();
        assert_eq!(manifest["kind"], "Secret");
        assert_eq!(manifest["type"], "kubernetes.io/tls");
        assert_eq!(manifest["data"]["tls.crt"], "Y2VydA==");
        assert_eq!(manifest["immutable"], true);
        let metadata = manifest["metadata"].as_object().unwrap();
        let keys: Vec<&str> = metadata.keys().map(String::as_str).collect();
        assert_eq!(keys, ["annotations", "labels", "name", "namespace"]);
    }

    #[test]
    fn a_replacement_is_conditional_on_what_was_seen_and_keeps_what_others_set() {
        let payload = Payload { data: [("a".to_owned(), "1".to_owned())].into(), ..Payload::default() };
        let copy = copy(ObjectKind::ConfigMap, payload);
        let owner =
            OwnerReference { name: "app".into(), uid: "owner-uid".into(), ..OwnerReference::default() };
        let current = ObjectMeta {
            uid: Some("copy-uid".into()),
            resource_version: Some("42".into()),
            finalizers: Some(vec!["example.com/keep".into()]),
            owner_references: Some(vec![owner]),
            labels: Some([("added".to_owned(), "by hand".to_owned())].into()),
            ..ObjectMeta::default()
        };
        let manifest = serde_json::to_value(Manifest::replacing(&copy, &current)).unwrap();
        let metadata = &manifest["metadata"];
        assert_eq!((&metadata["uid"], &metadata["resourceVersion"]), (&json!("copy-uid"), &json!("42")));
        assert_eq!(metadata["finalizers"], json!(["example.com/keep"]));
        assert_eq!(metadata["ownerReferences"][0]["uid"], "owner-uid");
        assert!(metadata["labels"].get("added").is_none(), "labels are kopper's alone");
        assert_eq!(manifest["data"], json!({"a": "1"}));
    }

    /// A write's answer for a generic kind gives the new resourceVersion and the digest of
    /// the rendering, the same as the object's content read any other way, whatever
    /// `managedFields` and `status` it carries.
    #[test]
    fn a_generic_write_s_answer_gives_its_version_and_the_digest_of_its_content() {
        let answer = serde_json::json!({
            "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": {"name": "deny", "resourceVersion": "42",
                         "managedFields": [{"manager": "kopper", "fieldsV1": {"f:spec": {}}}]},
            "spec": {"podSelector": {}, "policyTypes": ["Ingress"]},
            "status": {"conditions": [{"type": "Ready"}]},
        });
        let read: GenericWire<WrittenMeta> = serde_json::from_value(answer.clone()).unwrap();
        assert_eq!(read.metadata.resource_version.as_deref(), Some("42"));
        let whole: serde_json::Map<String, Value> = serde_json::from_value(answer).unwrap();
        assert_eq!(read.content.digest(), Payload::generic(whole).digest());
        assert_eq!(read.content.fields.keys().collect::<Vec<_>>(), ["spec"]);
    }

    #[test]
    fn config_map_manifest_sends_only_owned_fields() {
        let payload = Payload { data: [("a".to_owned(), "1".to_owned())].into(), ..Payload::default() };
        let copy = copy(ObjectKind::ConfigMap, payload);
        let manifest = serde_json::to_value(Manifest::of(&copy)).unwrap();
        let keys: Vec<&str> = manifest.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(keys, ["apiVersion", "data", "kind", "metadata"]);
    }
}
