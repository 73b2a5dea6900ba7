//! The BucketAccess controller: a grant of another Bucket's bucket (or one of the same
//! namespace) to the namespace that asks, with the Bucket owner's consent
//! ([`grant::verdict`]). It runs with the Bucket controller, on its classes and backends.
//!
//! Each pass reads the Bucket from the API server (not from a cache, so that consent
//! withdrawn is never missed by a stale read), judges consent first and the Bucket's state
//! second, and then either makes sure of the grant's user, policy, one key and Secret, holds
//! what it has, or removes it. Crash safety is the Bucket's: the user is created with its tags
//! in one call and its name is recorded in status first; the Secret is the record of the key
//! in use ([`provider::plan_keys`]), so a key created and never written is deleted.
//!
//! Removal: the finalizer [`FINALIZER`] holds a BucketAccess until its user is gone; a
//! Bucket's own cleanup deletes every grant user of its bucket first
//! ([`revoke_bucket_grants`]), found by name prefix and proven by tags, whether or not the
//! BucketAccess objects still exist; and the sweep deletes grant users whose grant or Bucket
//! is gone.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::TryStreamExt;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::api::{ObjectMeta, Patch, PatchParams};
use kube::core::PartialObjectMeta;
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::runtime::finalizer::{self, Event as FinalizerEvent};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{Controller, WatchStreamExt};
use kube::{Api, Resource, ResourceExt};
use serde_json::json;
use tracing::{info, warn};

use super::access_types::{BucketAccess, BucketAccessStatus};
use super::grant::{self, GrantOwner, Verdict};
use super::names::POLICY_NAME;
use super::provider::{self, FailureKind, Provider};
use super::types::Bucket;
use super::{Error, Shared, churn, policy, secret};
use crate::runtime::Context;

/// The controller's name in metrics, logs, `/readyz` and its field manager.
pub const NAME: &str = "bucket-access";
/// Holds a BucketAccess until its IAM user, policy and key are deleted.
pub const FINALIZER: &str = "kopper.dev/bucket-access-cleanup";
/// Label on every Secret a BucketAccess owns, holding its name; kopper watches only these.
pub const ACCESS_LABEL: &str = "kopper.dev/bucket-access";
const READY: &str = "Ready";
/// How often a granted BucketAccess is looked at when nothing wakes it.
const RESYNC: Duration = Duration::from_secs(30 * 60);

/// The BucketAccess objects naming each Bucket (`namespace/name`), fed by the grant watch, so
/// that a change to a Bucket wakes exactly its grants.
#[derive(Debug, Default)]
pub struct GrantIndex {
    inner: Mutex<IndexState>,
}

#[derive(Debug, Default)]
struct IndexState {
    by_bucket: HashMap<String, HashSet<ObjectRef<BucketAccess>>>,
    by_grant: HashMap<ObjectRef<BucketAccess>, String>,
}

impl GrantIndex {
    /// Records that `grant` names its Bucket (`gone`: it no longer exists).
    pub fn note(&self, grant: &BucketAccess, gone: bool) {
        let grant_ref = ObjectRef::from_obj(grant);
        let bucket = format!("{}/{}", grant.bucket_namespace(), grant.spec.bucket_ref.name);
        let Ok(mut state) = self.inner.lock() else { return };
        if let Some(previous) = state.by_grant.remove(&grant_ref)
            && let Some(grants) = state.by_bucket.get_mut(&previous)
        {
            grants.remove(&grant_ref);
            if grants.is_empty() {
                state.by_bucket.remove(&previous);
            }
        }
        if !gone {
            state.by_bucket.entry(bucket.clone()).or_default().insert(grant_ref.clone());
            state.by_grant.insert(grant_ref, bucket);
        }
    }

    /// The grants naming the Bucket `namespace/name`.
    pub fn grants_of(&self, namespace: &str, name: &str) -> Vec<ObjectRef<BucketAccess>> {
        let key = format!("{namespace}/{name}");
        let Ok(state) = self.inner.lock() else { return Vec::new() };
        let mut grants: Vec<_> =
            state.by_bucket.get(&key).map(|grants| grants.iter().cloned().collect()).unwrap_or_default();
        grants.sort_by_key(ToString::to_string);
        grants
    }
}

/// What about a Bucket its grants decide on: a change to any of it wakes them.
pub fn bucket_digest(bucket: &Bucket) -> u64 {
    let status = bucket.status.clone().unwrap_or_default();
    let ready =
        status.conditions.iter().find(|c| c.type_ == READY).map(|c| (c.status.clone(), c.reason.clone()));
    super::digest_of(&(
        serde_json::to_string(&bucket.spec.shared_with).unwrap_or_default(),
        bucket.metadata.deletion_timestamp.is_some(),
        status.bucket_name,
        status.class_name,
        ready,
        bucket.uid(),
    ))
}

/// The BucketAccess controller, fed by `wakes` (the grants of a changed Bucket, and those
/// whose peer was deleted, which it sends through `wake`); it keeps `index`, which maps
/// Buckets to grants, up to date.
pub fn controller(
    ctx: &Context,
    wakes: futures::channel::mpsc::UnboundedReceiver<ObjectRef<BucketAccess>>,
    wake: futures::channel::mpsc::UnboundedSender<ObjectRef<BucketAccess>>,
    index: Arc<GrantIndex>,
) -> Controller<BucketAccess> {
    let api = Api::<BucketAccess>::all(ctx.client.clone());
    let (reader, writer) = kube::runtime::reflector::store();
    let changes = |grant: &BucketAccess| {
        let deleting = grant.meta().deletion_timestamp.is_some();
        Some(super::digest_of(&(grant.meta().generation, deleting, grant.finalizers().to_vec())))
    };
    let stream = crate::runtime::watch::watcher(api, crate::runtime::trim::tenant_objects_watch())
        .default_backoff()
        .modify(|grant| crate::runtime::trim::keep_only_what_decisions_read(grant, &[]))
        .reflect(writer)
        .inspect_ok(move |event| match event {
            kube::runtime::watcher::Event::Apply(grant) | kube::runtime::watcher::Event::InitApply(grant) => {
                index.note(grant, false)
            }
            kube::runtime::watcher::Event::Delete(grant) => {
                index.note(grant, true);
                // One of its namespace's grants of the Bucket may have waited for its place.
                let bucket = (grant.bucket_namespace(), &grant.spec.bucket_ref.name);
                for peer in index.grants_of(&bucket.0, bucket.1) {
                    if peer.namespace == grant.namespace() {
                        let _ = wake.unbounded_send(peer);
                    }
                }
            }
            _ => {}
        })
        .applied_objects()
        .predicate_filter(changes, Default::default());
    // Metadata only: no credentials are cached. Tenants can label any Secret so: small pages.
    let secrets = Api::<PartialObjectMeta<Secret>>::all(ctx.client.clone());
    let secret_events = crate::runtime::watch::watcher(
        secrets,
        crate::runtime::trim::tenant_objects_watch().labels(ACCESS_LABEL),
    )
    .default_backoff()
    .touched_objects();
    Controller::for_stream(stream, reader)
        .owns_stream(secret_events)
        .reconcile_on(wakes)
        .with_config(crate::runtime::controller::config())
}

/// What every pass of the BucketAccess controller shares: the Bucket controller's classes,
/// backends and key ledger, and its own cache and index of grants.
pub(super) struct Grants {
    pub(super) shared: Arc<Shared>,
    pub(super) cache: kube::runtime::reflector::Store<BucketAccess>,
    pub(super) index: Arc<GrantIndex>,
}

impl Grants {
    /// Whether `grant` is within [`grant::MAX_GRANTS_PER_NAMESPACE`] of its namespace's grants
    /// of the same Bucket, by the cache (a grant not yet in it is counted next pass).
    fn within_bound(&self, grant: &BucketAccess) -> bool {
        let namespace = grant.namespace();
        let created = |grant: &BucketAccess| grant.meta().creation_timestamp.as_ref().map(|time| time.0);
        let peers: Vec<_> = self
            .index
            .grants_of(&grant.bucket_namespace(), &grant.spec.bucket_ref.name)
            .into_iter()
            .filter(|peer| peer.namespace == namespace && peer.name != grant.name_any())
            .filter_map(|peer| self.cache.get(&peer))
            .map(|peer| (created(&peer), peer.name_any()))
            .collect();
        grant::ranked_ahead((&created(grant), &grant.name_any()), &peers) < grant::MAX_GRANTS_PER_NAMESPACE
    }
}

/// One pass over a BucketAccess.
pub(super) async fn reconcile(
    grant: Arc<BucketAccess>,
    ctx: Arc<Context>,
    grants: Arc<Grants>,
) -> Result<Action, Error> {
    let shared = &grants.shared;
    let namespace = grant.namespace().unwrap_or_default();
    let api = Api::<BucketAccess>::namespaced(ctx.client.clone(), &namespace);
    let bucket_namespace = grant.bucket_namespace();
    let bucket = Api::<Bucket>::namespaced(ctx.client.clone(), &bucket_namespace)
        .get_opt(&grant.spec.bucket_ref.name)
        .await
        .map_err(Error::kube("reading the Bucket"));
    let pass = GrantPass { ctx: &ctx, shared, grant: &grant, within_bound: grants.within_bound(&grant) };
    let result = match bucket {
        Err(error) => Err(error),
        Ok(bucket) => finalizer::finalizer(&api, FINALIZER, grant.clone(), |event| {
            let (pass, bucket) = (&pass, bucket.as_ref());
            async move {
                match event {
                    FinalizerEvent::Apply(_) => pass.apply(bucket).await,
                    FinalizerEvent::Cleanup(_) => pass.revoke(bucket).await.map(|()| Action::await_change()),
                }
            }
        })
        .await
        .map_err(|error| Error::Finalizer(Box::new(error))),
    };
    if let Err(error) = &result {
        report(&ctx, &grant, error).await;
    }
    match result.as_ref().err().and_then(Error::retry_after) {
        Some(wait) => Ok(Action::requeue(wait)),
        None => result,
    }
}

/// One reconcile's view of a grant.
struct GrantPass<'a> {
    ctx: &'a Context,
    shared: &'a Shared,
    grant: &'a BucketAccess,
    /// Whether the grant is within the bound of grants per namespace and Bucket.
    within_bound: bool,
}

impl GrantPass<'_> {
    fn bucket_ref(&self) -> (String, String) {
        (self.grant.bucket_namespace(), self.grant.spec.bucket_ref.name.clone())
    }

    async fn apply(&self, bucket: Option<&Bucket>) -> Result<Action, Error> {
        let (namespace, name) = self.bucket_ref();
        let grant_namespace = self.grant.namespace().unwrap_or_default();
        let mut verdict = grant::verdict(&grant_namespace, self.grant.spec.mode, (&namespace, &name), bucket);
        if matches!(verdict, Verdict::Grant { .. }) && !self.within_bound {
            verdict = grant::too_many((&namespace, &name));
        }
        match (verdict, bucket) {
            (Verdict::Grant { bucket: bucket_name, region }, Some(bucket)) => {
                self.grant_access(bucket, &bucket_name, &region).await
            }
            (Verdict::Withdraw { reason, message }, _) => {
                self.revoke(bucket).await?;
                Err(Error::blocked(reason, message))
            }
            (Verdict::Hold { reason, message }, _) => Err(Error::blocked(reason, message)),
            // A grant is only ever judged for a Bucket that exists.
            (Verdict::Grant { .. }, None) => {
                Err(Error::blocked("BucketNotReady", format!("Bucket {namespace}/{name} is not Ready")))
            }
        }
    }

    fn owner(&self, bucket: &Bucket) -> GrantOwner {
        GrantOwner {
            cluster: self.shared.cluster_id.clone(),
            namespace: self.grant.namespace().unwrap_or_default(),
            name: self.grant.name_any(),
            grant_uid: self.grant.uid().unwrap_or_default(),
            bucket_uid: bucket.uid().unwrap_or_default(),
        }
    }

    /// The provider of the Bucket's backend: the class its bucket was made with.
    async fn provider(&self, bucket: &Bucket) -> Result<Option<Arc<dyn Provider>>, Error> {
        self.shared.wait_for_classes().await?;
        match self.shared.class_for_cleanup(bucket)? {
            Some(class) => Ok(Some(self.shared.provider(self.ctx, &class).await?)),
            None => Ok(None),
        }
    }

    async fn grant_access(&self, bucket: &Bucket, bucket_name: &str, region: &str) -> Result<Action, Error> {
        self.shared.wait_for_classes().await?;
        let (namespace, name) = self.bucket_ref();
        let Some(class) = self.shared.class_for_cleanup(bucket)? else {
            return Err(Error::blocked("BucketNotReady", format!("Bucket {namespace}/{name} is not Ready")));
        };
        if let Err(Verdict::Hold { reason, message } | Verdict::Withdraw { reason, message }) =
            grant::class_allows(&class.spec, (&namespace, &name))
        {
            return Err(Error::blocked(reason, message));
        }
        let provider = self.shared.provider(self.ctx, &class).await?;
        let provider = provider.as_ref();
        let owner = self.owner(bucket);
        let user = owner.user_name();
        // Recorded before the user is made: wherever a pass stops, a revoke knows to look.
        write_status(self.ctx, self.grant, |status| {
            status.user_name = Some(user.clone());
            status.bucket_name = Some(bucket_name.to_owned());
        })
        .await?;
        self.ensure_user(provider, &owner, bucket_name).await?;
        let key_id = self.ensure_key(provider, &user, bucket_name, region).await?;
        let became_ready = ready_reason(self.grant).is_none_or(|reason| reason != "Granted");
        let mode = self.grant.spec.mode.as_str();
        let message = format!(
            "{mode} access to bucket {bucket_name} of Bucket {namespace}/{name}: user {user}, credentials in Secret {}",
            self.grant.secret_name()
        );
        write_status(self.ctx, self.grant, |status| {
            status.user_name = Some(user.clone());
            status.bucket_name = Some(bucket_name.to_owned());
            status.access_key_id = Some(key_id.clone());
            set_ready(status, self.grant, "True", "Granted", &message);
        })
        .await?;
        if became_ready {
            publish(self.ctx, self.grant, EventType::Normal, "Granted", message).await;
        }
        Ok(Action::requeue(RESYNC))
    }

    /// The grant's user with exactly its policy. A user under the name that is not this
    /// grant's is left alone.
    async fn ensure_user(
        &self,
        provider: &dyn Provider,
        owner: &GrantOwner,
        bucket_name: &str,
    ) -> Result<(), Error> {
        let user = owner.user_name();
        match provider.user_tags(&user).await? {
            None => provider.create_user(&user, &owner.tags()).await?,
            Some(tags) if owner.owns(&tags) => {}
            Some(_) => {
                return Err(Error::blocked(
                    "UserNameTaken",
                    format!(
                        "the IAM user {user} exists and is not this BucketAccess's; kopper leaves it alone"
                    ),
                ));
            }
        }
        let wanted = grant::policy_document(bucket_name, self.grant.spec.mode);
        let found = provider.user_policy(&user, POLICY_NAME).await?;
        if !found.is_some_and(|found| policy::equivalent(&wanted, &found)) {
            provider.put_user_policy(&user, POLICY_NAME, &wanted).await?;
        }
        Ok(())
    }

    /// Exactly one access key, the one the Secret holds ([`provider::plan_keys`]); its id.
    async fn ensure_key(
        &self,
        provider: &dyn Provider,
        user: &str,
        bucket_name: &str,
        region: &str,
    ) -> Result<String, Error> {
        let secrets =
            Api::<Secret>::namespaced(self.ctx.client.clone(), &self.grant.namespace().unwrap_or_default());
        let secret_name = self.grant.secret_name();
        let current = secrets
            .get_opt(&secret_name)
            .await
            .map_err(Error::kube(format!("reading Secret {secret_name}")))?;
        if let Some(current) = &current {
            secret_taken(self.keeper(current), &secret_name)?;
        }
        let held = current.as_ref().and_then(secret::held_key_id);
        let listed = provider.access_keys(user).await?;
        let plan =
            provider::plan_keys(&listed, held.as_deref(), false, None, k8s_openapi::jiff::Timestamp::now());
        for key in &plan.delete_first {
            provider.delete_access_key(user, key).await?;
            info!(user, key, "deleted an access key the grant's Secret does not hold");
        }
        let contents = secret::Contents { bucket: bucket_name, region, endpoint: provider.endpoint() };
        let manager = self.ctx.settings.field_manager_for(NAME);
        let Some(_) = plan.create else {
            let held = held.unwrap_or_default();
            if let Some(current) = &current
                && let Some(desired) = self.refreshed(current, &contents)
            {
                secret::write(&secrets, Some(current), desired, &manager).await?;
            }
            return Ok(held);
        };
        let uid = self.grant.uid().unwrap_or_default();
        if let churn::KeyIssue::Churn(wait) | churn::KeyIssue::RotationWaits(wait) =
            self.shared.keys.check(&uid, false)
        {
            return Err(Error::Wait {
                reason: "CredentialsChurn",
                message: format!(
                    "this BucketAccess needs another access key soon after the last one, so something keeps undoing \
                     kopper's work (rewriting Secret {secret_name}, or deleting its key): kopper tries again in {}s",
                    wait.as_secs().max(1)
                ),
                retry_after: wait,
            });
        }
        let created = provider.create_access_key(user).await;
        if created.is_ok() || created.as_ref().is_err_and(|e| e.kind == FailureKind::Unavailable) {
            self.shared.keys.record(&uid);
        }
        let key = created?;
        let desired = self.desired_secret(&contents, &key.id, &key.secret);
        secret::write(&secrets, current.as_ref(), desired, &manager).await?;
        info!(user, key = %key.id, "wrote the grant's access key into its Secret");
        self.delete_former_secrets(&secrets, &secret_name).await?;
        Ok(key.id)
    }

    /// Deletes the Secrets this grant keeps under another name than `current` (its
    /// `spec.secretName` changed): their key was deleted with the plan that made the new one.
    /// Looked for only when a new key is written, so an idle pass lists nothing.
    async fn delete_former_secrets(&self, secrets: &Api<Secret>, current: &str) -> Result<(), Error> {
        let label = format!("{ACCESS_LABEL}={}", super::names::label_value(&self.grant.name_any()));
        let params = kube::api::ListParams::default().labels(&label);
        let listed =
            secrets.list_metadata(&params).await.map_err(Error::kube("listing the grant's Secrets"))?;
        for former in listed.items.iter().filter(|former| former.name_any() != current) {
            if self.keeper(former) == secret::Keeper::ThisBucket {
                super::delete_exactly(secrets, &former.name_any(), former.uid()).await?;
                info!(secret = former.name_any(), "deleted the grant's Secret of a former spec.secretName");
            }
        }
        Ok(())
    }

    fn keeper(&self, current: &impl Resource) -> secret::Keeper {
        secret::keeper_of(current, self.grant.uid().as_deref(), ACCESS_LABEL)
    }

    /// The grant's Secret with a key pair: the Bucket Secret's keys, labelled and owned by the
    /// BucketAccess (so it goes with it).
    fn desired_secret(&self, contents: &secret::Contents, key_id: &str, secret_key: &str) -> Secret {
        let mut data: BTreeMap<String, ByteString> =
            contents.entries().into_iter().map(|(k, v)| (k, ByteString(v.into_bytes()))).collect();
        data.insert(secret::ACCESS_KEY_ID.to_owned(), ByteString(key_id.as_bytes().to_vec()));
        data.insert(secret::SECRET_ACCESS_KEY.to_owned(), ByteString(secret_key.as_bytes().to_vec()));
        let owner = self.grant.controller_owner_ref(&()).map(|mut owner| {
            owner.block_owner_deletion = None;
            vec![owner]
        });
        Secret {
            metadata: ObjectMeta {
                name: Some(self.grant.secret_name()),
                namespace: self.grant.namespace(),
                labels: Some(BTreeMap::from([(
                    ACCESS_LABEL.to_owned(),
                    super::names::label_value(&self.grant.name_any()),
                )])),
                owner_references: owner,
                ..ObjectMeta::default()
            },
            type_: Some("Opaque".to_owned()),
            data: Some(data),
            ..Secret::default()
        }
    }

    /// The Secret with its key pair kept and the rest as it should be; `None` when nothing
    /// differs.
    fn refreshed(&self, current: &Secret, contents: &secret::Contents) -> Option<Secret> {
        let data = current.data.clone().unwrap_or_default();
        let key_id = String::from_utf8_lossy(&data.get(secret::ACCESS_KEY_ID)?.0).into_owned();
        let secret_key = String::from_utf8_lossy(&data.get(secret::SECRET_ACCESS_KEY)?.0).into_owned();
        let desired = self.desired_secret(contents, &key_id, &secret_key);
        let same = desired.data == current.data && secret::holds_labels(current, &desired);
        (!same).then_some(desired)
    }

    /// Removes what the grant has: its user's keys, policy and user (first: the key stops
    /// working), then its own Secret, then the record in status. IAM is looked at only when
    /// status records a user (recorded before one is made), so a grant never consented to
    /// costs no provider call. Without its Bucket there is no backend to look on: the Bucket's
    /// cleanup deleted every grant user of its bucket, or the sweep does.
    async fn revoke(&self, bucket: Option<&Bucket>) -> Result<(), Error> {
        let status = self.grant.status.clone().unwrap_or_default();
        let mut revoked = false;
        if status.user_name.is_some()
            && let Some(bucket) = bucket
            && let Some(provider) = self.provider(bucket).await?
        {
            let owner = self.owner(bucket);
            revoked =
                delete_grant_user(provider.as_ref(), &owner.user_name(), |tags| owner.owns(tags)).await?;
        }
        self.delete_own_secret().await?;
        if status.user_name.is_some() || status.access_key_id.is_some() || status.bucket_name.is_some() {
            write_status(self.ctx, self.grant, |status| {
                status.user_name = None;
                status.access_key_id = None;
                status.bucket_name = None;
            })
            .await?;
        }
        if revoked {
            let note = format!(
                "the IAM user and access key of this grant were deleted; Secret {} is gone",
                self.grant.secret_name()
            );
            publish(self.ctx, self.grant, EventType::Normal, "Revoked", note).await;
        }
        Ok(())
    }

    async fn delete_own_secret(&self) -> Result<(), Error> {
        let api =
            Api::<Secret>::namespaced(self.ctx.client.clone(), &self.grant.namespace().unwrap_or_default());
        let name = self.grant.secret_name();
        let current = api.get_opt(&name).await.map_err(Error::kube(format!("reading Secret {name}")))?;
        if let Some(current) = current.filter(|secret| self.keeper(secret) == secret::Keeper::ThisBucket) {
            super::delete_exactly(&api, &name, current.uid()).await?;
        }
        Ok(())
    }
}

/// Deletes the user `user` (its keys, then its policy, then it) when `proves` says its tags
/// make it kopper's to delete; whether it did.
async fn delete_grant_user(
    provider: &dyn Provider,
    user: &str,
    proves: impl Fn(&BTreeMap<String, String>) -> bool,
) -> Result<bool, Error> {
    let Some(tags) = provider.user_tags(user).await? else { return Ok(false) };
    if !proves(&tags) {
        return Ok(false);
    }
    for key in provider.access_keys(user).await? {
        provider.delete_access_key(user, &key.id).await?;
    }
    provider.delete_user_policy(user, POLICY_NAME).await?;
    provider.delete_user(user).await?;
    info!(user, "deleted a grant's IAM user, its policy and keys");
    Ok(true)
}

/// Deletes the IAM user of every grant of the Bucket `bucket_uid`, found by its name prefix
/// ([`grant::bucket_grants_prefix`]) and proven by its tags, whether its BucketAccess still
/// exists or not: a Bucket's cleanup calls it before anything else, so that no consumer keeps
/// a key to a bucket about to go (or to be handed to someone else). How many it deleted.
pub async fn revoke_bucket_grants(
    provider: &dyn Provider,
    cluster: &str,
    bucket_uid: &str,
) -> Result<usize, Error> {
    let mut deleted = 0;
    for user in provider.users(&grant::bucket_grants_prefix(cluster, bucket_uid)).await? {
        if delete_grant_user(provider, &user, |tags| grant::is_grant_of_bucket(tags, cluster, bucket_uid))
            .await?
        {
            deleted += 1;
        }
    }
    Ok(deleted)
}

/// The refusal of a Secret under the grant's secret name that kopper did not make for it.
fn secret_taken(keeper: secret::Keeper, name: &str) -> Result<(), Error> {
    if keeper == secret::Keeper::ThisBucket {
        return Ok(());
    }
    Err(Error::blocked(
        "SecretNameTaken",
        format!(
            "Secret {name} was not made by kopper for this BucketAccess; kopper never takes or overwrites it and \
             issues no credentials into it: set spec.secretName to a name no other Secret in the namespace has"
        ),
    ))
}

fn ready_reason(grant: &BucketAccess) -> Option<String> {
    let conditions = &grant.status.as_ref()?.conditions;
    conditions.iter().find(|c| c.type_ == READY).map(|c| c.reason.clone())
}

/// Puts a failed pass into the Ready condition and, when the reason is new, a Warning Event.
async fn report(ctx: &Context, grant: &BucketAccess, error: &Error) {
    let (reason, message) = error.reason();
    let previous = ready_reason(grant);
    if let Err(write_error) =
        write_status(ctx, grant, |status| set_ready(status, grant, "False", reason, &message)).await
    {
        warn!("could not write the BucketAccess's status: {write_error}");
    }
    if previous.as_deref() != Some(reason) {
        publish(ctx, grant, EventType::Warning, reason, message).await;
    }
}

/// Sets the Ready condition, keeping its transition time while its status stays the same.
fn set_ready(
    status: &mut BucketAccessStatus,
    grant: &BucketAccess,
    value: &str,
    reason: &str,
    message: &str,
) {
    let generation = grant.meta().generation;
    let previous = status.conditions.iter().find(|c| c.type_ == READY);
    let last_transition_time = previous
        .filter(|c| c.status == value)
        .map(|c| c.last_transition_time.clone())
        .unwrap_or_else(|| Time(k8s_openapi::jiff::Timestamp::now()));
    let condition = Condition {
        type_: READY.to_owned(),
        status: value.to_owned(),
        reason: reason.to_owned(),
        message: message.to_owned(),
        observed_generation: generation,
        last_transition_time,
    };
    status.conditions.retain(|c| c.type_ != READY);
    status.conditions.push(condition);
    status.observed_generation = generation;
}

/// Writes the status fields `change` changes, only if it changes any. The status this pass
/// wrote before is the base, so that a second write in one pass sends only its own change.
async fn write_status(
    ctx: &Context,
    grant: &BucketAccess,
    change: impl FnOnce(&mut BucketAccessStatus),
) -> Result<(), Error> {
    let old = grant.status.clone().unwrap_or_default();
    let mut new = old.clone();
    change(&mut new);
    if new == old {
        return Ok(());
    }
    let patch = json!({ "status": super::status_patch(&old, &new) });
    let api = Api::<BucketAccess>::namespaced(ctx.client.clone(), &grant.namespace().unwrap_or_default());
    let params =
        PatchParams { field_manager: Some(ctx.settings.field_manager_for(NAME)), ..Default::default() };
    api.patch_status(&grant.name_any(), &params, &Patch::Merge(patch))
        .await
        .map_err(Error::kube("writing the BucketAccess's status"))?;
    Ok(())
}

async fn publish(ctx: &Context, grant: &BucketAccess, type_: EventType, reason: &str, note: String) {
    ctx.recorder.record(&grant.object_ref(&()), type_, "Reconcile", reason, note).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grant(namespace: &str, name: &str, bucket_ref: serde_json::Value) -> BucketAccess {
        serde_json::from_value(json!({
            "apiVersion": "kopper.dev/v1alpha1",
            "kind": "BucketAccess",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"bucketRef": bucket_ref, "mode": "ReadOnly"},
        }))
        .unwrap()
    }

    #[test]
    fn the_index_maps_a_bucket_to_the_grants_naming_it_in_any_namespace() {
        let index = GrantIndex::default();
        let reader = grant("team-b", "reader", json!({"namespace": "team-a", "name": "data"}));
        let own = grant("team-a", "own", json!({"name": "data"}));
        let other = grant("team-b", "other", json!({"namespace": "team-a", "name": "logs"}));
        for grant in [&reader, &own, &other] {
            index.note(grant, false);
        }
        let names = |refs: Vec<ObjectRef<BucketAccess>>| refs.into_iter().map(|r| r.name).collect::<Vec<_>>();
        assert_eq!(names(index.grants_of("team-a", "data")), ["own", "reader"]);
        index.note(&reader, true);
        assert_eq!(names(index.grants_of("team-a", "data")), ["own"]);
        assert!(index.grants_of("team-b", "data").is_empty());
    }
}
