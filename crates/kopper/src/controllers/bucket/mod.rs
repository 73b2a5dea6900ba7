//! Bucket: an S3 bucket, an IAM user with an inline policy for exactly that
//! bucket, one access key, and a Secret with the credentials, owned by the Bucket.
//!
//! Crash safety comes from deciding everything from what exists, each pass:
//! - the bucket and the user carry the Bucket's tags (cluster id and uid); what carries them
//!   is adopted, anything else under the same name is someone else's and never touched;
//! - the user is created with its tags in one call; the bucket cannot be, so kopper records
//!   in status that it is about to create it, and an untagged bucket it finds afterwards under
//!   that name is its own (if empty), left by a crash between CreateBucket and PutBucketTagging;
//! - the Secret is the record of which access key is live: a listed key the Secret does not
//!   hold is deleted, so a crash between CreateAccessKey and writing the Secret leaves no
//!   second key ([`provider::plan_keys`]); with `spec.keyRotation`, IAM's creation dates tell
//!   the retiring key (older than the one held) from one never handed out (newer), so a
//!   scheduled rotation cut short anywhere is finished by the next pass.
//!
//! The finalizer [`FINALIZER`] holds a Bucket until its IAM user, policy and keys are gone
//! and, with `deletionPolicy: Delete`, its bucket; the Secret goes with the Bucket through its
//! owner reference.
//!
//! Each Bucket is made with a BucketClass ([`class`]): the backend, from [`backends`], and
//! what every bucket of the class gets ([`enforced`]), what its Buckets may ask for and how
//! many of them one namespace may have. The class is recorded in status before the bucket is
//! made, and the class keeps a finalizer while Buckets use it ([`class_status`]), so cleanup
//! always happens on the backend the bucket is on. Without classes, kopper's flags are the
//! class, enforcing nothing: Buckets behave as they did before classes.

pub mod access_types;
pub mod admission;
pub mod aws;
pub mod backends;
pub mod churn;
pub mod class;
pub mod class_status;
pub mod config_map;
pub mod decide;
pub mod enforced;
pub mod fenced;
pub mod grant;
pub mod grant_controller;
pub mod metrics;
pub mod name_locks;
pub mod names;
pub mod policy;
pub mod provider;
pub mod rotation;
pub mod secret;
pub mod service_account;
pub mod sweep;
pub mod types;

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::runtime::trim::keep_only_what_decisions_read;
use futures::TryStreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Secret, ServiceAccount};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::api::{DeleteParams, Patch, PatchParams, Preconditions};
use kube::core::PartialObjectMeta;
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::runtime::finalizer::{self, Event as FinalizerEvent};
use kube::runtime::{Controller, WatchStreamExt};
use kube::{Api, Resource, ResourceExt};
use serde_json::json;
use tracing::{info, warn};

use crate::runtime::cache::FirstList;
use backends::Backends;
use class::{Binding, Fallback};
use decide::{BucketStep, Recorded, UserStep};
use k8s_openapi::jiff::Timestamp;
pub use metrics::register_metrics;
use name_locks::NameLocks;
use names::{OidcProvider, Owner};
use provider::{BucketLookup, FailureKind, NewKey, Provider, ProviderError};
use types::{AccessMode, Bucket, BucketClass, BucketClassSpec, BucketStatus, DeletionPolicy};

use crate::runtime::metrics::RuleGauges;
use crate::runtime::{Context, ErrorCategory, run_controller};

/// Name in metrics, logs, `/readyz` and `--controllers`.
pub const NAME: &str = "bucket";
/// Held on every Bucket until what it owns outside the cluster is cleaned up.
pub const FINALIZER: &str = "kopper.dev/bucket-cleanup";
/// Set to a new value to rotate the access key.
pub const ROTATE_ANNOTATION: &str = "kopper.dev/rotate-credentials";
/// The `--cluster-id` of an install that did not choose one.
pub const DEFAULT_CLUSTER_ID: &str = "kopper";
/// How often a Ready Bucket is checked again, so that drift (a key deleted by hand, a policy
/// edited) is repaired without an event to trigger it.
const RESYNC: Duration = Duration::from_secs(30 * 60);
/// How long one pass goes on emptying a bucket (`emptyOnDelete`) before it gives its
/// reconcile slot back and requeues: a bucket of millions of objects is emptied over many
/// short passes, and other Buckets are served in between.
const EMPTYING_SLICE: Duration = Duration::from_secs(2);
/// The requeue after a pass that left a bucket partly emptied: at once, in the Bucket's
/// turn.
const EMPTYING_REQUEUE: Duration = Duration::from_millis(10);
const READY: &str = "Ready";

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Provider(#[from] ProviderError),
    #[error("{what}: {source}")]
    Kube {
        what: String,
        #[source]
        source: kube::Error,
    },
    /// Something the user or a cluster admin must change; reported in status.
    #[error("{message}")]
    Blocked { reason: &'static str, message: String },
    #[error("finalizer: {0}")]
    Finalizer(#[source] Box<finalizer::Error<Error>>),
    /// Nothing is wrong, but the pass may not go on before `retry_after`: reported in status,
    /// and the Bucket is looked at again then.
    #[error("{message}")]
    Wait { reason: &'static str, message: String, retry_after: Duration },
}

impl ErrorCategory for Error {
    fn category(&self) -> &'static str {
        match self {
            Error::Provider(error) => match error.kind {
                FailureKind::AccessDenied => "access_denied",
                FailureKind::Throttled => "throttled",
                FailureKind::Unavailable => "provider_unavailable",
                _ => "provider",
            },
            Error::Kube { .. } => "kube_api",
            Error::Blocked { .. } => "blocked",
            Error::Wait { .. } => "waiting",
            Error::Finalizer(inner) => match inner.as_ref() {
                finalizer::Error::ApplyFailed(error) | finalizer::Error::CleanupFailed(error) => {
                    error.category()
                }
                _ => "kube_api",
            },
        }
    }

    fn is_permanent(&self) -> bool {
        match self {
            Error::Provider(error) => error.kind == FailureKind::AccessDenied,
            Error::Blocked { .. } => true,
            Error::Finalizer(inner) => match inner.as_ref() {
                finalizer::Error::ApplyFailed(error) | finalizer::Error::CleanupFailed(error) => {
                    error.is_permanent()
                }
                _ => false,
            },
            Error::Kube { .. } | Error::Wait { .. } => false,
        }
    }
}

impl Error {
    fn kube(what: impl Into<String>) -> impl FnOnce(kube::Error) -> Error {
        let what = what.into();
        move |source| Error::Kube { what, source }
    }

    fn blocked(reason: &'static str, message: impl Into<String>) -> Error {
        Error::Blocked { reason, message: message.into() }
    }

    /// How long to wait before the next pass, for an error that only says to wait.
    fn retry_after(&self) -> Option<Duration> {
        match self {
            Error::Wait { retry_after, .. } => Some(*retry_after),
            Error::Finalizer(inner) => match inner.as_ref() {
                finalizer::Error::ApplyFailed(error) | finalizer::Error::CleanupFailed(error) => {
                    error.retry_after()
                }
                _ => None,
            },
            _ => None,
        }
    }

    /// The Ready condition's reason and message for this error.
    fn reason(&self) -> (&'static str, String) {
        match self {
            // The provider's message for a denial names kopper's own principal (account id,
            // role, session): it goes to kopper's log, never to a tenant's status or Events.
            Error::Provider(error) if error.kind == FailureKind::AccessDenied => (
                "AccessDenied",
                format!(
                    "{} {} was denied to kopper's credentials: a cluster admin must grant it (kopper's \
                     log has the provider's message)",
                    error.service, error.operation
                ),
            ),
            Error::Provider(error) => {
                let reason = match error.kind {
                    FailureKind::Throttled | FailureKind::Unavailable => "ProviderUnavailable",
                    FailureKind::BucketNameTaken => "BucketNameTaken",
                    _ => "ProviderError",
                };
                (reason, error.to_string())
            }
            Error::Blocked { reason, message } | Error::Wait { reason, message, .. } => {
                (reason, message.clone())
            }
            Error::Kube { .. } => ("KubernetesError", self.to_string()),
            Error::Finalizer(inner) => match inner.as_ref() {
                finalizer::Error::ApplyFailed(error) | finalizer::Error::CleanupFailed(error) => {
                    error.reason()
                }
                _ => ("KubernetesError", self.to_string()),
            },
        }
    }
}

/// Settings of the Bucket controller, from `kopper run` flags.
#[derive(Clone, Debug, Default)]
pub struct BucketSettings {
    /// Names this cluster in derived names and tags, so that clusters sharing an account
    /// never take each other's buckets.
    pub cluster_id: String,
    /// S3 and IAM; `None` when kopper runs without a provider (`--s3-region` not set).
    pub provider: Option<aws::AwsSettings>,
    /// A Secret (`namespace/name`) holding kopper's own credentials for the provider.
    pub credentials_secret: Option<(String, String)>,
    /// The shortest time between two access keys for one Bucket ([`churn`]).
    pub key_interval: Duration,
    /// The shortest `spec.keyRotation.maxKeyAge` a Bucket may ask for ([`rotation`]).
    pub min_key_age: Duration,
    /// How often the leader looks for credentials of Buckets that no longer exist ([`sweep`]).
    pub orphan_sweep_interval: Duration,
    /// The cluster's OIDC provider, which roles for ServiceAccounts trust; `None` when kopper
    /// runs without it (`--oidc-provider-arn` not set): Buckets in mode `ServiceAccount` then
    /// report KeylessNotConfigured, and kopper watches no ServiceAccount.
    pub oidc: Option<OidcProvider>,
    /// kopper's own namespace, the only one BucketClass credentials Secrets are read from.
    pub own_namespace: Option<String>,
}

/// Runs the Bucket controller until `shutdown` resolves.
pub async fn run(
    ctx: Arc<Context>,
    settings: BucketSettings,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) -> anyhow::Result<()> {
    let provider: Option<Arc<dyn Provider>> = match &settings.provider {
        None => None,
        Some(aws_settings) => {
            let mut aws_settings = aws_settings.clone();
            if let Some((namespace, name)) = &settings.credentials_secret {
                aws_settings.credentials =
                    Some(secret::read_credentials(&ctx.client, namespace, name).await?);
            }
            let inner = aws::AwsProvider::new(aws_settings).await;
            Some(Arc::new(fenced::Fenced { inner, fence: ctx.fence.clone() }))
        }
    };
    if provider.is_none() {
        warn!(
            "no S3 provider configured (--s3-region); Buckets of the built-in class will report \
             ProviderNotConfigured"
        );
    }
    let flags_backend =
        settings.provider.as_ref().map(|aws| (aws.endpoint.clone(), aws.region.clone())).unwrap_or_default();
    let backends = Arc::new(Backends::new(
        provider.clone(),
        flags_backend,
        settings.own_namespace.clone(),
        ctx.fence.clone(),
        settings.provider.as_ref().and_then(|aws| aws.delete_batch),
    ));
    let (grant_wake, grant_wakes) = futures::channel::mpsc::unbounded();
    let grant_index = Arc::new(grant_controller::GrantIndex::default());
    let grants_listed = FirstList::default();
    let grant_controller = grant_controller::controller(
        &ctx,
        grant_wakes,
        grant_wake.clone(),
        grant_index.clone(),
        &grants_listed,
    );
    let grant_wake_for_passes = grant_wake.clone();
    let grant_index_for_bound = grant_index.clone();
    let (class_wake, class_wakes) = futures::channel::mpsc::unbounded();
    let (bucket_wake, bucket_wakes) = futures::channel::mpsc::unbounded();
    let classes_listed = FirstList::default();
    let buckets_listed = FirstList::default();
    let admissions = Arc::new(admission::Admissions::default());
    let class_controller = class_controller(&ctx, class_wakes, &classes_listed);
    let classes = class_controller.store();
    let buckets = Api::<Bucket>::all(ctx.client.clone());
    // Status writes change neither of these, so they do not wake the controller again.
    let changes = |bucket: &Bucket| {
        let rotate = bucket.annotations().get(ROTATE_ANNOTATION).cloned();
        let deleting = bucket.meta().deletion_timestamp.is_some();
        Some(digest_of(&(bucket.meta().generation, rotate, deleting, bucket.finalizers().to_vec())))
    };
    let key_ages = ctx.metrics.kept::<metrics::KeyAges>().unwrap_or_default();
    let (reader, writer) = kube::runtime::reflector::store();
    let stream = crate::runtime::watch::watcher(buckets, crate::runtime::trim::tenant_objects_watch())
        .default_backoff()
        .modify(|bucket| {
            keep_only_what_decisions_read(bucket, &[ROTATE_ANNOTATION]);
            shorten_rotation_request(bucket);
        })
        .reflect(writer);
    let stream = buckets_listed
        .track(stream)
        .inspect_ok({
            let key_ages = key_ages.clone();
            let mut wakes = class_status::ClassWakes::default();
            let (buckets, classes) = (reader.clone(), classes.clone());
            let admissions = admissions.clone();
            let mut grant_wakes = grant_controller::GrantWakes::new(grant_index, grant_wake);
            move |event| {
                grant_wakes.after(event);
                // Also when the Bucket leaves without its finalizer: its key stops counting.
                if let kube::runtime::watcher::Event::Delete(bucket) = event {
                    key_ages.forget(&bucket.uid().unwrap_or_default());
                    admissions.forget(&bucket.uid().unwrap_or_default());
                    for waiting in over_quota_peers(&buckets, bucket) {
                        let _ = bucket_wake.unbounded_send(waiting);
                    }
                }
                let gone = matches!(event, kube::runtime::watcher::Event::Delete(_));
                if let kube::runtime::watcher::Event::Apply(bucket)
                | kube::runtime::watcher::Event::Delete(bucket) = event
                {
                    let fallback = fallback_of(&classes);
                    for class in wakes.after(bucket, gone, &fallback) {
                        let _ = class_wake.unbounded_send(class);
                    }
                }
            }
        })
        .applied_objects()
        .predicate_filter(changes, Default::default());
    // Metadata is enough to map a Secret to its Bucket; no credentials are cached. Tenants
    // can label any Secret so, and fill its annotations: small pages.
    let secrets = Api::<PartialObjectMeta<Secret>>::all(ctx.client.clone());
    let secret_events = crate::runtime::watch::watcher(
        secrets,
        crate::runtime::trim::tenant_objects_watch().labels(secret::BUCKET_LABEL),
    )
    .default_backoff()
    .touched_objects();
    let mut controller = Controller::for_stream(stream, reader.clone())
        .owns_stream(secret_events)
        .reconcile_on(bucket_wakes)
        .with_config(crate::runtime::controller::config());
    controller = watch_classes(controller, &ctx, reader.clone());
    if settings.oidc.is_some() {
        controller = watch_keyless_children(controller, &ctx, reader.clone());
    }
    // Creating or adopting a bucket is serialised per bucket name, across every Bucket this
    // replica reconciles.
    let shared = Arc::new(Shared {
        backends: backends.clone(),
        classes: classes.clone(),
        classes_listed: classes_listed.clone(),
        admissions,
        creating: NameLocks::default(),
        keys: churn::KeyLedger::new(settings.key_interval),
        cluster_id: settings.cluster_id.clone(),
        key_interval: settings.key_interval,
        min_key_age: settings.min_key_age,
        key_ages,
        cached: reader.clone(),
        oidc: settings.oidc.clone(),
        grants: grant_index_for_bound.clone(),
        grants_listed,
    });
    let class_shared = Arc::new(class_status::ClassShared {
        buckets: reader.clone(),
        buckets_listed,
        classes: classes.clone(),
        backends: backends.clone(),
    });
    // Every backend is swept, kopper's flags' and each class's ([`sweep::Targets`]).
    let scope = if settings.cluster_id == DEFAULT_CLUSTER_ID {
        if provider.is_some() {
            tracing::warn!(
                "the sweep for credentials of deleted Buckets deletes only the users of grants gone from \
                 Buckets that exist: set --cluster-id (KOPPER_CLUSTER_ID, chart value bucket.clusterId) to a \
                 name no other cluster in this account uses"
            );
        }
        sweep::Scope::GrantsOfLiveBuckets
    } else {
        sweep::Scope::Everything
    };
    let sweeper = {
        let interval = settings.orphan_sweep_interval.max(Duration::from_secs(1));
        let keyless = settings.oidc.is_some();
        let targets = sweep::Targets { backends: backends.clone(), classes: classes.clone(), classes_listed };
        tokio::spawn(sweep::run(
            ctx.client.clone(),
            targets,
            settings.cluster_id.clone(),
            scope,
            interval,
            keyless,
        ))
    };
    let shutdown = futures::FutureExt::shared(shutdown);
    // Users of grants deleted without their finalizer are deleted as the grant watch sees them go.
    let tombstones = tokio::spawn(grant_controller::drain_tombstones(
        ctx.clone(),
        shared.clone(),
        grant_index_for_bound.clone(),
    ));
    let grants = Arc::new(grant_controller::Grants {
        shared: shared.clone(),
        index: grant_index_for_bound,
        wake: grant_wake_for_passes,
    });
    let buckets_run = run_controller(NAME, controller, ctx.clone(), shutdown.clone(), move |bucket, ctx| {
        reconcile(bucket, ctx, shared.clone())
    });
    let grants_run = run_controller(
        grant_controller::NAME,
        grant_controller,
        ctx.clone(),
        shutdown.clone(),
        move |grant, ctx| grant_controller::reconcile(grant, ctx, grants.clone()),
    );
    let classes_run =
        run_controller(class_status::CLASS_CONTROLLER, class_controller, ctx, shutdown, move |class, ctx| {
            class_status::reconcile(class, ctx, class_shared.clone())
        });
    tokio::join!(buckets_run, classes_run, grants_run);
    tombstones.abort();
    sweeper.abort();
    Ok(())
}

/// The controller of BucketClasses ([`class_status`]): woken by changes to a class and, through
/// `wakes`, when a Bucket starts or stops using one.
/// `listed` is marked once the class cache has had its first list.
fn class_controller(
    ctx: &Context,
    wakes: futures::channel::mpsc::UnboundedReceiver<kube::runtime::reflector::ObjectRef<BucketClass>>,
    listed: &FirstList,
) -> Controller<BucketClass> {
    let api = Api::<BucketClass>::all(ctx.client.clone());
    let (reader, writer) = kube::runtime::reflector::store();
    let stream = crate::runtime::watch::watcher(api, kube::runtime::watcher::Config::default())
        .default_backoff()
        .modify(|class| keep_only_what_decisions_read(class, &[class::DEFAULT_CLASS_ANNOTATION]))
        .reflect(writer);
    let stream = listed.track(stream).applied_objects();
    Controller::for_stream(stream, reader)
        .reconcile_on(wakes)
        .with_config(crate::runtime::controller::config())
}

/// A change to a class's spec, its default annotation or its deletion wakes the Buckets that
/// use it or name it, and those not yet made that name no class (a new default is theirs):
/// changing a class converges every bucket of it. Status and finalizer writes wake none.
fn watch_classes(
    controller: Controller<Bucket>,
    ctx: &Context,
    buckets: kube::runtime::reflector::Store<Bucket>,
) -> Controller<Bucket> {
    let api = Api::<BucketClass>::all(ctx.client.clone());
    let changes = |class: &BucketClass| {
        let default = class::is_default(class);
        Some(digest_of(&(class.meta().generation, default, class.meta().deletion_timestamp.is_some())))
    };
    let events = crate::runtime::watch::watcher(api, kube::runtime::watcher::Config::default())
        .default_backoff()
        .applied_objects()
        .predicate_filter(changes, Default::default());
    controller.watches_stream(events, move |class| {
        let name = class.name_any();
        buckets
            .state()
            .into_iter()
            .filter(|bucket| {
                let recorded = class::recorded_binding(bucket);
                bucket.spec.class_name.as_deref() == Some(name.as_str())
                    || recorded.as_ref().and_then(Binding::name) == Some(name.as_str())
                    || (recorded.is_none() && bucket.spec.class_name.is_none())
            })
            .map(|bucket| kube::runtime::reflector::ObjectRef::from_obj(bucket.as_ref()))
            .collect::<Vec<_>>()
    })
}

/// What unbound Buckets that name no class are made with, from the class cache.
fn fallback_of(classes: &kube::runtime::reflector::Store<BucketClass>) -> Fallback {
    let classes = classes.state();
    Fallback::of(classes.iter().map(|class| class.as_ref()))
}

/// How long a Bucket pass waits for the class cache's first list before it reports waiting:
/// long enough for any start-up, short enough not to hold a reconcile slot when the BucketClass
/// CRD is missing.
const CLASSES_LISTED_WAIT: Duration = Duration::from_secs(5);
/// When a Bucket that found the class cache not yet listed is looked at again.
const CLASSES_LISTED_RETRY: Duration = Duration::from_secs(10);

/// The Buckets of `gone`'s namespace refused for their class's quota: one of them may now
/// fit.
fn over_quota_peers(
    buckets: &kube::runtime::reflector::Store<Bucket>,
    gone: &Bucket,
) -> Vec<kube::runtime::reflector::ObjectRef<Bucket>> {
    buckets
        .state()
        .into_iter()
        .filter(|bucket| bucket.namespace() == gone.namespace())
        .filter(|bucket| ready_reason(bucket).as_deref() == Some("QuotaExceeded"))
        .map(|bucket| kube::runtime::reflector::ObjectRef::from_obj(bucket.as_ref()))
        .collect()
}

/// With keyless access on: the ConfigMaps Buckets own wake their Bucket, and a ServiceAccount
/// wakes the Buckets that name it (or named it last), so a ServiceAccount created late, an
/// annotation removed by hand, or a holder's release is seen at once. Only changes a pass
/// depends on wake them ([`service_account::WakingChanges`]): relabelling a ServiceAccount
/// costs no pass. Neither watch holds up
/// Buckets in mode Key: they read no ServiceAccount, and a watch refused by RBAC only logs
/// (readiness follows the Bucket watch alone).
fn watch_keyless_children(
    controller: Controller<Bucket>,
    ctx: &Context,
    buckets: kube::runtime::reflector::Store<Bucket>,
) -> Controller<Bucket> {
    let config_maps = Api::<PartialObjectMeta<ConfigMap>>::all(ctx.client.clone());
    let config_map_events = crate::runtime::watch::watcher(
        config_maps,
        crate::runtime::trim::tenant_objects_watch().labels(secret::BUCKET_LABEL),
    )
    .default_backoff()
    .touched_objects();
    let service_accounts = Api::<PartialObjectMeta<ServiceAccount>>::all(ctx.client.clone());
    let mut changes = service_account::WakingChanges::default();
    let service_account_events =
        crate::runtime::watch::watcher(service_accounts, crate::runtime::trim::tenant_objects_watch())
            .default_backoff()
            .try_filter_map(move |event| futures::future::ready(Ok(changes.filter(event))));
    controller.owns_stream(config_map_events).watches_stream(service_account_events, move |account| {
        let namespace = account.namespace();
        let name = account.name_any();
        buckets
            .state()
            .into_iter()
            .filter(|bucket| bucket.namespace() == namespace)
            .filter(|bucket| {
                bucket.service_account() == Some(name.as_str())
                    || bucket.status.as_ref().and_then(|s| s.service_account_name.as_deref())
                        == Some(name.as_str())
            })
            .map(|bucket| kube::runtime::reflector::ObjectRef::from_obj(bucket.as_ref()))
            .collect::<Vec<_>>()
    })
}

/// The longest rotation request kept as written; a longer one is kept as its digest.
const ROTATION_REQUEST_KEPT: usize = 64;

/// Replaces a long [`ROTATE_ANNOTATION`] value with a SHA-256 digest of it, in kopper's cache
/// (and so in `status.rotatedFor`): a change still reads as a new request, but a tenant's
/// 256 KiB annotation costs kopper 71 bytes, not twice its size per Bucket.
fn shorten_rotation_request(bucket: &mut Bucket) {
    let Some(value) = bucket.meta_mut().annotations.as_mut().and_then(|a| a.get_mut(ROTATE_ANNOTATION))
    else {
        return;
    };
    if value.len() > ROTATION_REQUEST_KEPT {
        *value = format!("sha256:{}", names::digest_hex(value));
    }
}

fn digest_of(value: &impl std::hash::Hash) -> u64 {
    use std::hash::{DefaultHasher, Hasher};
    let mut hasher = DefaultHasher::new();
    value.hash(&mut hasher);
    hasher.finish()
}

/// What every pass of the controller shares.
struct Shared {
    /// The providers of the classes' backends (and of kopper's flags).
    backends: Arc<Backends>,
    /// The cache of BucketClasses.
    classes: kube::runtime::reflector::Store<BucketClass>,
    /// Marked once the class cache has had its first list: no Bucket is bound to a class (or
    /// to the built-in one) on an empty cache.
    classes_listed: FirstList,
    /// Admission to classes with a quota ([`admission`]).
    admissions: Arc<admission::Admissions>,
    /// Held per bucket name from looking at it to tagging the bucket, when creating or
    /// adopting, across every Bucket this replica reconciles.
    creating: NameLocks,
    /// When each Bucket last got an access key: no Bucket gets keys in a loop.
    keys: churn::KeyLedger,
    /// Names this cluster in derived names and tags ([`BucketSettings::cluster_id`]).
    cluster_id: String,
    /// The shortest time between two access keys for one Bucket.
    key_interval: Duration,
    /// The shortest `spec.keyRotation.maxKeyAge` a Bucket may ask for.
    min_key_age: Duration,
    /// The key in use of each Bucket on a schedule, for the key aggregates.
    key_ages: Arc<metrics::KeyAges>,
    /// The controller's cache of Buckets: a key is recorded only for a Bucket still in it.
    cached: kube::runtime::reflector::Store<Bucket>,
    /// The BucketAccesses naming each Bucket, and their recorded users: a Bucket's cleanup
    /// deletes them.
    grants: Arc<grant_controller::GrantIndex>,
    /// Marked once the BucketAccess index has had its first list: a Bucket's cleanup, which
    /// deletes the users of the grants the index knows of, never runs on a partial index.
    grants_listed: FirstList,
    /// The cluster's OIDC provider, for roles of ServiceAccounts.
    oidc: Option<OidcProvider>,
}

/// The class a pass works with, and its backend's identity.
struct ClassInUse {
    binding: Binding,
    spec: BucketClassSpec,
    /// The BucketClass object; `None` for the built-in class.
    object: Option<Arc<BucketClass>>,
    /// The identity of its backend ([`class::backend_identity`]).
    identity: String,
}

impl Shared {
    /// Waits (a while) for the class cache's first list: which class an unbound Bucket takes,
    /// and whether its class allows it, are never decided on a cache that has not seen every
    /// class. Without the BucketClass CRD the list never comes: the Bucket says so, and kopper's
    /// log names the CRD to apply.
    async fn wait_for_classes(&self) -> Result<(), Error> {
        wait_for_first_list(
            &self.classes_listed,
            "WaitingForClasses",
            "kopper has not listed the BucketClasses yet, and decides nothing for this Bucket until it has",
        )
        .await
    }

    /// Waits (a while) for the BucketAccess index's first list: a Bucket's cleanup deletes its
    /// grants' users from it, and after a restart would otherwise delete the bucket and its own
    /// user while grant keys still work.
    async fn wait_for_grants(&self) -> Result<(), Error> {
        wait_for_first_list(
            &self.grants_listed,
            "WaitingForGrants",
            "kopper has not listed the BucketAccesses yet, and deletes nothing of this Bucket until it has \
             (their users go first)",
        )
        .await
    }

    /// The class the Bucket uses ([`class::wanted_binding`]), from the cache.
    fn class_for(&self, bucket: &Bucket) -> Result<ClassInUse, Error> {
        let fallback = fallback_of(&self.classes);
        let binding = class::wanted_binding(bucket, &fallback)
            .map_err(|refusal| Error::blocked(refusal.reason, refusal.message))?;
        self.class_of(binding)
    }

    /// The class to clean up with: the one status binds the Bucket to; else, when nothing
    /// was made, the one it would use, if that exists (`None`: nothing to clean up with, and
    /// nothing made).
    fn class_for_cleanup(&self, bucket: &Bucket) -> Result<Option<ClassInUse>, Error> {
        if let Some(bound) = class::recorded_binding(bucket) {
            return self.class_of(bound).map(Some).map_err(|error| match error {
                Error::Blocked { reason: "ClassNotFound", message } => Error::blocked(
                    "ClassNotFound",
                    format!(
                        "{message}; this Bucket's bucket was made with it, so kopper cannot clean up until a cluster \
                         admin creates it again with the same backend (or removes the finalizer {FINALIZER} by hand, \
                         and then deletes the bucket and its IAM user or role)"
                    ),
                ),
                error => error,
            });
        }
        Ok(self.class_for(bucket).ok())
    }

    fn class_of(&self, binding: Binding) -> Result<ClassInUse, Error> {
        let Binding::Named(name) = &binding else {
            let identity = self.backends.identity(None);
            return Ok(ClassInUse { binding, spec: BucketClassSpec::built_in(), object: None, identity });
        };
        let Some(object) = self.classes.get(&kube::runtime::reflector::ObjectRef::new(name)) else {
            return Err(Error::blocked(
                "ClassNotFound",
                format!(
                    "BucketClass {name} does not exist: set spec.className to a class that does (kubectl get \
                     bucketclasses), or ask a cluster admin to create it; nothing was created"
                ),
            ));
        };
        let identity = self.backends.identity(object.spec.backend.as_ref());
        Ok(ClassInUse { spec: object.spec.clone(), object: Some(object), identity, binding })
    }

    /// The provider of the class's backend.
    async fn provider(&self, ctx: &Context, class: &ClassInUse) -> Result<Arc<dyn Provider>, Error> {
        match &class.binding {
            Binding::BuiltIn => {
                self.backends.default_provider().ok_or_else(backends::built_in_not_configured)
            }
            Binding::Named(name) => self
                .backends
                .provider(&ctx.client, name, class.spec.backend.as_ref())
                .await
                .map_err(|error| for_tenant(error, name)),
        }
    }
}

/// The error a Bucket pass reports for its class's provider: a class whose backend cannot be
/// used is named, and the details (its credentials Secret, kopper's namespace) stay in the
/// class's status, for cluster admins.
fn for_tenant(error: Error, class: &str) -> Error {
    match error {
        Error::Wait { reason: "ClassNotReady", message, retry_after } => {
            tracing::debug!(class, "the class's backend cannot be used: {message}");
            Error::Wait { reason: "ClassNotReady", message: class::class_not_ready(class), retry_after }
        }
        error => error,
    }
}

/// Whether status records nothing made for the Bucket: no bucket (recorded before one is
/// created), no user, no role.
fn made_nothing(bucket: &Bucket) -> bool {
    bucket.status.as_ref().is_none_or(|status| {
        status.bucket_name.is_none()
            && status.user_name.is_none()
            && status.role_arn.is_none()
            && status.service_account_name.is_none()
    })
}

async fn reconcile(bucket: Arc<Bucket>, ctx: Arc<Context>, shared: Arc<Shared>) -> Result<Action, Error> {
    let prepared = async {
        shared.wait_for_classes().await?;
        if is_cleaning_up(&bucket) && !made_nothing(&bucket) {
            shared.wait_for_grants().await?;
        }
        let class = if is_cleaning_up(&bucket) {
            shared.class_for_cleanup(&bucket)?
        } else {
            Some(shared.class_for(&bucket)?)
        };
        match class {
            Some(class) => {
                let provider = shared.provider(&ctx, &class).await?;
                Ok(Some((class, provider)))
            }
            None => Ok(None),
        }
    }
    .await;
    let namespace = bucket.namespace().unwrap_or_default();
    let api = Api::<Bucket>::namespaced(ctx.client.clone(), &namespace);
    let (class, provider) = match prepared {
        Ok(Some(prepared)) => prepared,
        // Deleted before anything was made, with no class to make it with: let it go.
        Ok(None) => return release(&api, &bucket).await,
        // Deleted before anything was made, and its class cannot be used (not ready, no
        // provider, gone): nothing to clean up that status knows of, so the Bucket (and its
        // namespace) is not held. Leftovers of a pass cut short are the sweep's.
        Err(error) if is_cleaning_up(&bucket) && made_nothing(&bucket) => {
            info!("the Bucket made nothing and its class cannot be used ({error}); letting it go");
            return release(&api, &bucket).await;
        }
        Err(error) => {
            count_not_ready(&ctx, &bucket, Some(true));
            report(&ctx, &bucket, &error, false).await;
            return Err(error);
        }
    };
    let pass = Pass {
        ctx: &ctx,
        provider: provider.as_ref(),
        class: &class,
        backends: &shared.backends,
        class_store: shared.classes.clone(),
        admissions: &shared.admissions,
        owner: owner_of(&shared.cluster_id, &bucket),
        creating: &shared.creating,
        keys: &shared.keys,
        grants: &shared.grants,
        key_interval: shared.key_interval,
        min_key_age: shared.min_key_age,
        key_ages: &shared.key_ages,
        cached: &shared.cached,
        oidc: shared.oidc.as_ref(),
        wrote_condition: std::sync::atomic::AtomicBool::new(false),
    };
    if bucket.meta().deletion_timestamp.is_some() {
        // Deleted: kopper rotates nothing more, and its key no longer counts.
        shared.key_ages.forget(&pass.owner.uid);
    }
    // Cleanup runs before the finalizer helper, which would take the finalizer off after
    // any pass that did not fail: a pass that only emptied part of the bucket is not done.
    let cleanup = if is_cleaning_up(&bucket) { pass.cleanup(&bucket).await } else { Ok(Cleanup::Done) };
    let emptying = matches!(cleanup, Ok(Cleanup::Emptying));
    let result = match cleanup {
        Ok(Cleanup::Emptying) => Ok(Action::requeue(EMPTYING_REQUEUE)),
        Ok(Cleanup::Done) => finalizer::finalizer(&api, FINALIZER, bucket.clone(), |event| async {
            match event {
                FinalizerEvent::Apply(bucket) => pass.apply(&bucket).await,
                // Done above, in this pass: the helper only takes the finalizer off.
                FinalizerEvent::Cleanup(_) => Ok(Action::await_change()),
            }
        })
        .await
        .or_else(gone_with_its_finalizer),
        Err(error) => Err(error),
    };
    if let Err(error) = &result {
        report(&ctx, &bucket, error, pass.wrote_condition()).await;
    }
    let cleaned_up = bucket.meta().deletion_timestamp.is_some() && result.is_ok() && !emptying;
    count_not_ready(&ctx, &bucket, (!cleaned_up).then_some(result.is_err()));
    match result.as_ref().err().and_then(Error::retry_after) {
        Some(wait) => Ok(Action::requeue(wait)),
        None => result,
    }
}

/// Waits up to [`CLASSES_LISTED_WAIT`] for `list`; past that, `reason` with `waiting` and who
/// must act, retried after [`CLASSES_LISTED_RETRY`].
async fn wait_for_first_list(list: &FirstList, reason: &'static str, waiting: &str) -> Result<(), Error> {
    if list.is_ready() {
        return Ok(());
    }
    if let Ok(true) = tokio::time::timeout(CLASSES_LISTED_WAIT, list.wait()).await {
        return Ok(());
    }
    Err(Error::Wait {
        reason,
        message: format!(
            "{waiting}: if this lasts, a cluster admin must apply kopper's CRDs (kopper's log names the one missing)"
        ),
        retry_after: CLASSES_LISTED_RETRY,
    })
}

/// The finalizer helper's error as kopper's, except a finalizer that could not be taken off
/// because the object is already gone: a pass queued before the object left, and run on the
/// cached copy, finds its work done (the finalizer left with the object), not failed.
fn gone_with_its_finalizer(error: finalizer::Error<Error>) -> Result<Action, Error> {
    match error {
        finalizer::Error::RemoveFinalizer(kube::Error::Api(response)) if response.code == 404 => {
            Ok(Action::await_change())
        }
        error => Err(Error::Finalizer(Box::new(error))),
    }
}

/// Takes the finalizer off a Bucket deleted before anything was made for it.
async fn release(api: &Api<Bucket>, bucket: &Arc<Bucket>) -> Result<Action, Error> {
    finalizer::finalizer(api, FINALIZER, bucket.clone(), |_| async { Ok::<_, Error>(Action::await_change()) })
        .await
        .or_else(gone_with_its_finalizer)
}

/// Whether the Bucket is deleted and still holds kopper's finalizer: what it owns outside
/// the cluster is to be cleaned up.
fn is_cleaning_up(bucket: &Bucket) -> bool {
    bucket.meta().deletion_timestamp.is_some() && bucket.finalizers().iter().any(|f| f == FINALIZER)
}

/// How far a cleanup pass got.
#[derive(Debug, PartialEq, Eq)]
enum Cleanup {
    /// Everything is gone: the finalizer may come off.
    Done,
    /// The bucket is being emptied; the next pass goes on.
    Emptying,
}

/// Counts the Bucket in `kopper_rules_not_ready{controller="bucket"}` while it is not Ready;
/// `None` forgets it (it is gone).
fn count_not_ready(ctx: &Context, bucket: &Bucket, not_ready: Option<bool>) {
    let key = format!("{}/{}", bucket.namespace().unwrap_or_default(), bucket.name_any());
    let gauges = not_ready.map(|not_ready| RuleGauges { not_ready, ..RuleGauges::default() });
    ctx.metrics.set_rule_gauges(NAME, &key, gauges);
}

fn owner_of(cluster_id: &str, bucket: &Bucket) -> Owner {
    Owner {
        cluster: cluster_id.to_owned(),
        namespace: bucket.namespace().unwrap_or_default(),
        name: bucket.name_any(),
        uid: bucket.uid().unwrap_or_default(),
    }
}

/// Puts a failed pass into the Ready condition and, when the reason is new, a Warning Event.
/// `rewrite`: the pass wrote another condition meanwhile, so this one is written even if
/// `bucket`, its starting snapshot, already holds it.
async fn report(ctx: &Context, bucket: &Bucket, error: &Error, rewrite: bool) {
    let (reason, message) = error.reason();
    let previous = ready_reason(bucket);
    let written =
        write_status(ctx, bucket, rewrite, |status| set_ready(status, bucket, "False", reason, &message))
            .await;
    if let Err(write_error) = written {
        warn!("could not write the Bucket's status: {write_error}");
    }
    if previous.as_deref() != Some(reason) {
        publish(ctx, bucket, EventType::Warning, reason, message).await;
    }
}

fn ready_reason(bucket: &Bucket) -> Option<String> {
    let conditions = &bucket.status.as_ref()?.conditions;
    conditions.iter().find(|c| c.type_ == READY).map(|c| c.reason.clone())
}

/// One reconcile's view: the provider and who owns what it makes.
struct Pass<'a> {
    ctx: &'a Context,
    provider: &'a dyn Provider,
    /// The class the Bucket is made with.
    class: &'a ClassInUse,
    backends: &'a Backends,
    /// The cache of BucketClasses, for the default class.
    class_store: kube::runtime::reflector::Store<BucketClass>,
    /// Admission to classes with a quota.
    admissions: &'a admission::Admissions,
    owner: Owner,
    /// Held per bucket name from looking at it to tagging the bucket, when creating or
    /// adopting.
    creating: &'a NameLocks,
    /// When each Bucket last got an access key: no Bucket gets keys in a loop.
    keys: &'a churn::KeyLedger,
    /// The BucketAccesses naming each Bucket: its cleanup deletes their users.
    grants: &'a grant_controller::GrantIndex,
    /// The shortest time between two access keys for one Bucket.
    key_interval: Duration,
    /// The shortest `spec.keyRotation.maxKeyAge` a Bucket may ask for.
    min_key_age: Duration,
    /// The key in use of each Bucket on a schedule, for the key aggregates.
    key_ages: &'a metrics::KeyAges,
    /// The controller's cache of Buckets.
    cached: &'a kube::runtime::reflector::Store<Bucket>,
    /// The cluster's OIDC provider, for roles of ServiceAccounts.
    oidc: Option<&'a OidcProvider>,
    /// Whether this pass wrote a Ready condition before its last (Provisioning, before
    /// creating a bucket; Emptying, before emptying one): the pass's snapshot then no longer shows what the API server
    /// holds, and its last condition is written even if the snapshot already had it.
    wrote_condition: std::sync::atomic::AtomicBool,
}

impl Pass<'_> {
    fn wrote_condition(&self) -> bool {
        self.wrote_condition.load(std::sync::atomic::Ordering::Relaxed)
    }

    async fn apply(&self, bucket: &Bucket) -> Result<Action, Error> {
        let status = bucket.status.clone().unwrap_or_default();
        let schedule =
            bucket.spec.key_rotation.as_ref().map(|spec| rotation::schedule(spec, self.min_key_age));
        // Recorded from status before any call that can fail: a key whose replacement this
        // pass cannot make stays counted as overdue, also in a kopper just started.
        let status_key_created = status.key_created.as_ref().map(|created| created.0);
        let valid_schedule = schedule.as_ref().and_then(|schedule| schedule.as_ref().ok());
        self.record_key(bucket, metrics::KeyAge::of(status_key_created, valid_schedule));
        if let Some(problem) = names::tags_problem(&bucket.spec.tags) {
            return Err(Error::blocked("InvalidTags", format!("spec.tags: {problem}")));
        }
        self.admit(bucket, &status).await?;
        if bucket.access_mode() == AccessMode::ServiceAccount {
            return self.apply_keyless(bucket, &status).await;
        }
        let schedule =
            schedule.transpose().map_err(|message| Error::blocked("InvalidKeyRotation", message))?;
        let name = self.bucket_name(bucket, &status)?;
        let region = self.region(bucket, &status)?;
        self.ensure_bucket(bucket, &status, &name, &region).await?;
        if self.oidc.is_some() || status.role_arn.is_some() || status.service_account_name.is_some() {
            // A Bucket switched from mode ServiceAccount, or a role left by a pass cut short:
            // looked up by the derived name, whatever status says. A denied look holds the
            // Bucket up only when status names a role or a ServiceAccount ([`role_lookup`]).
            self.revoke_role(bucket, &status).await?;
        }
        let user = self.ensure_user(&name).await?;
        let key = self.ensure_credentials(bucket, &name, &region, &user, schedule.as_ref()).await?;
        let key_id = key.id.clone();
        // Whole seconds, as status holds them, so that an unchanged key is never written again.
        let key_created = key.created.and_then(|created| Timestamp::from_second(created.as_second()).ok());

        let became_ready = ready_reason(bucket).is_none_or(|reason| reason != "Ready");
        let rotated_for = bucket.annotations().get(ROTATE_ANNOTATION).cloned();
        write_status(self.ctx, bucket, self.wrote_condition(), |status| {
            status.bucket_name = Some(name.clone());
            status.bucket_arn = Some(names::bucket_arn(&name));
            status.region = Some(region.clone());
            status.user_name = Some(user.clone());
            status.access_key_id = Some(key_id.clone());
            status.key_created = key_created.map(Time);
            status.rotated_for = rotated_for.clone();
            status.role_arn = None;
            status.service_account_name = None;
            self.record_class(status);
            let message =
                format!("bucket {name}, user {user} and Secret {} are in place", bucket.secret_name());
            set_ready(status, bucket, "True", "Ready", &message);
        })
        .await?;
        if became_ready {
            self.record_ready(bucket);
            let note = format!("bucket {name} is ready; credentials are in Secret {}", bucket.secret_name());
            publish(self.ctx, bucket, EventType::Normal, "Ready", note).await;
        }
        self.record_key(bucket, metrics::KeyAge::of(key_created, schedule.as_ref()));
        Ok(Action::requeue(until_due(key.next_due, Timestamp::now())))
    }

    /// Whether the Bucket's class lets it have a bucket: what it asks for is allowed, it is
    /// within the class's quota, and its bucket is on the class's backend. Then the class is
    /// held (its finalizer) before anything is made on its backend. A refused Bucket keeps what
    /// it has and gets nothing new.
    async fn admit(&self, bucket: &Bucket, status: &BucketStatus) -> Result<(), Error> {
        let class = self.class;
        if let Some(message) = class::too_many_tags(bucket, &class.binding, &class.spec) {
            return Err(Error::blocked("InvalidTags", message));
        }
        if let Binding::Named(name) = &class.binding
            && let Some(message) = class::forbidden(bucket, name, &class.spec)
        {
            return Err(Error::blocked("ForbiddenByClass", format!("{message}; nothing new was created")));
        }
        self.on_recorded_backend(status, bucket.name_any().as_str())?;
        let Some(object) = &class.object else { return Ok(()) };
        let name = object.name_any();
        if class::recorded_binding(bucket).is_none() {
            // Not bound yet: the class is read afresh, so that a cache that has not seen its
            // deletion cannot bind a new Bucket to a class about to go.
            let fresh = Api::<BucketClass>::all(self.ctx.client.clone())
                .get_opt(&name)
                .await
                .map_err(Error::kube(format!("reading BucketClass {name}")))?;
            let Some(fresh) = fresh else {
                return Err(Error::blocked(
                    "ClassNotFound",
                    format!(
                        "BucketClass {name} does not exist: set spec.className to a class that does (kubectl \
                         get bucketclasses), or ask a cluster admin to create it; nothing was created"
                    ),
                ));
            };
            if fresh.meta().deletion_timestamp.is_some() {
                return Err(Error::blocked("ClassNotFound", class::class_being_deleted(&name)));
            }
            class_status::hold_for_bucket(self.ctx, &self.class_store, &fresh, false).await?;
        } else if object.meta().deletion_timestamp.is_none() {
            // Bound: it keeps working with its class, also while the class is being deleted.
            class_status::hold_for_bucket(self.ctx, &self.class_store, object, true).await?;
        }
        match class.spec.max_buckets_per_namespace {
            Some(max) => self.within_quota(bucket, &name, max).await,
            None => Ok(()),
        }
    }

    /// Refuses a Bucket beyond its class's `maxBucketsPerNamespace` ([`class::ranked_ahead`]).
    /// A Bucket not yet bound to the class is admitted under the lock of its namespace and
    /// class, and bound (`status.className`) before the lock is released ([`admission`]).
    async fn within_quota(&self, bucket: &Bucket, name: &str, max: u32) -> Result<(), Error> {
        let bound = class::recorded_binding(bucket).as_ref().and_then(Binding::name) == Some(name);
        let key = admission::key(&self.owner.namespace, name);
        let _admitting = if bound { None } else { Some(self.admissions.lock(&key).await) };
        let fallback = fallback_of(&self.class_store);
        let peers: Vec<Arc<Bucket>> =
            self.cached.state().into_iter().filter(|peer| peer.namespace() == bucket.namespace()).collect();
        let live = peers.iter().filter_map(|peer| peer.uid()).collect();
        self.admissions.keep_only(&key, &live);
        let contenders: Vec<class::Contender> = peers
            .iter()
            .map(|peer| peer.as_ref())
            .filter(|peer| class::counted_binding(peer, &fallback).name() == Some(name))
            .map(|peer| class::Contender {
                bucket: peer,
                bound: class::recorded_binding(peer).as_ref().and_then(Binding::name) == Some(name)
                    || self.admissions.admitted(&key, &peer.uid().unwrap_or_default()),
            })
            // A Bucket not bound that cannot have a bucket of the class anyway (refused by it,
            // or deleted) takes no place.
            .filter(|peer| {
                peer.bound
                    || (peer.bucket.meta().deletion_timestamp.is_none()
                        && class::forbidden(peer.bucket, name, &self.class.spec).is_none())
            })
            .collect();
        let me = class::Contender { bucket, bound: bound || self.admissions.admitted(&key, &self.owner.uid) };
        let ahead = class::ranked_ahead(me, contenders.iter().copied());
        if ahead >= max as usize {
            return Err(Error::blocked(
                "QuotaExceeded",
                class::quota_exceeded(name, max, ahead, &self.owner.namespace),
            ));
        }
        if !me.bound {
            write_status(self.ctx, bucket, false, |status| self.record_class(status)).await?;
            self.admissions.admit(&key, &self.owner.uid);
        }
        Ok(())
    }

    /// Refuses to go on when the class's backend is not the one the bucket was made on: kopper
    /// does not move buckets, and what it would make or delete on another backend is not this
    /// Bucket's bucket.
    fn on_recorded_backend(&self, status: &BucketStatus, bucket: &str) -> Result<(), Error> {
        let recorded = match (&status.backend, &status.bucket_name) {
            (Some(backend), _) => backend.clone(),
            // Made before classes: on kopper's flags' backend.
            (None, Some(_)) => self.backends.identity(None),
            (None, None) => return Ok(()),
        };
        if recorded == self.class.identity {
            return Ok(());
        }
        Err(Error::blocked(
            "BackendChanged",
            class::backend_changed(bucket, &recorded, &self.class.binding, &self.class.identity),
        ))
    }

    /// Records in status the class and backend the bucket is made with.
    fn record_class(&self, status: &mut BucketStatus) {
        status.class_name = self.class.binding.name().map(str::to_owned);
        status.backend = Some(self.class.identity.clone());
    }

    /// Brings the bucket's encryption, public-access block and lifecycle rules to what its
    /// class enforces, writing only what differs ([`enforced`]).
    async fn enforce(&self, name: &str) -> Result<(), Error> {
        let wanted = enforced::Enforced::of(&self.class.spec);
        if let Some(encryption) = &wanted.encryption {
            let found = self.provider.encryption(name).await?;
            if !enforced::encryption_holds(encryption, found.as_ref()) {
                self.provider.set_encryption(name, encryption).await?;
                info!(bucket = name, algorithm = encryption.algorithm, "set the class's encryption");
            }
        }
        if let Some(block) = &wanted.public_access_block
            && self.provider.public_access_block(name).await? != *block
        {
            self.provider.set_public_access_block(name, block).await?;
            info!(bucket = name, "blocked public access, as the class says");
        }
        if let Some(rules) = &wanted.lifecycle {
            let found = self.provider.lifecycle(name).await?;
            if !enforced::lifecycle_holds(rules, &found) {
                self.provider.set_lifecycle(name, rules).await?;
                info!(bucket = name, rules = rules.len(), "set the class's lifecycle rules");
            }
        }
        Ok(())
    }

    /// Records the key in use of `bucket` for the key aggregates, while the Bucket is in the
    /// cache: its deletion, seen by the watch, forgets it ([`metrics::KeyAges::set`]).
    fn record_key(&self, bucket: &Bucket, key: Option<metrics::KeyAge>) {
        let cached = || {
            let found = self.cached.get(&kube::runtime::reflector::ObjectRef::from_obj(bucket));
            found.is_some_and(|found| found.uid() == bucket.uid())
        };
        self.key_ages.set(&self.owner.uid, key, cached);
    }

    fn record_ready(&self, bucket: &Bucket) {
        if let Some(created) = &bucket.meta().creation_timestamp {
            let elapsed = jiff_seconds_since(created);
            metrics::READY_SECONDS.observe(elapsed);
        }
    }

    /// The bucket's name: the spec's or the derived one, unchanged once a bucket exists.
    fn bucket_name(&self, bucket: &Bucket, status: &BucketStatus) -> Result<String, Error> {
        let wanted = bucket.spec.bucket_name.clone().unwrap_or_else(|| self.owner.default_bucket_name());
        if let Some(problem) = names::bucket_name_problem(&wanted) {
            return Err(Error::blocked("InvalidBucketName", format!("spec.bucketName {wanted:?} {problem}")));
        }
        if bucket.spec.bucket_name.is_some() && wanted.starts_with(&self.owner.reserved_prefix()) {
            // Derived names start with it; an explicit one could squat another Bucket's.
            return Err(Error::blocked(
                "InvalidBucketName",
                format!(
                    "spec.bucketName {wanted:?} starts with {:?}, which is reserved for the names kopper \
                     derives: choose another name, or leave spec.bucketName out",
                    self.owner.reserved_prefix()
                ),
            ));
        }
        match &status.bucket_name {
            Some(existing) if *existing != wanted => Err(Error::blocked(
                "BucketNameImmutable",
                format!(
                    "spec.bucketName changed from {existing:?} to {wanted:?}, but a bucket cannot be renamed: \
                     set it back, or create a new Bucket for the new name (nothing was deleted)"
                ),
            )),
            _ => Ok(wanted),
        }
    }

    fn region(&self, bucket: &Bucket, status: &BucketStatus) -> Result<String, Error> {
        let wanted = bucket.spec.region.clone().unwrap_or_else(|| self.provider.default_region().to_owned());
        match &status.region {
            Some(existing) if status.bucket_name.is_some() && *existing != wanted => Err(Error::blocked(
                "BucketNameImmutable",
                format!(
                    "spec.region changed from {existing:?} to {wanted:?}, but a bucket cannot move: set it \
                     back, or create a new Bucket in the new region (nothing was deleted)"
                ),
            )),
            _ => Ok(wanted),
        }
    }

    async fn ensure_bucket(
        &self,
        bucket: &Bucket,
        status: &BucketStatus,
        name: &str,
        region: &str,
    ) -> Result<(), Error> {
        let mut tags = bucket.spec.tags.clone();
        tags.extend(self.class.spec.tags.clone());
        tags.extend(self.owner.tags());
        let recorded = recorded(status, name);
        let found = self.provider.lookup_bucket(name).await?;
        let mut step = decide::bucket_step(&found, &self.owner, &tags, recorded);
        // Creating and adopting look again under one lock, so that two Buckets naming the same
        // bucket cannot both find it missing (or untagged) and both take it.
        let _creating = match step {
            BucketStep::Create | BucketStep::AdoptIfEmpty => {
                let guard = self.creating.lock(name).await;
                let found = self.provider.lookup_bucket(name).await?;
                step = decide::bucket_step(&found, &self.owner, &tags, recorded);
                Some(guard)
            }
            _ => None,
        };
        match step {
            BucketStep::Create => {
                // Recorded first: after a crash between CreateBucket and PutBucketTagging,
                // the untagged bucket found under this name is known to be ours.
                write_status(self.ctx, bucket, false, |status| {
                    status.bucket_name = Some(name.to_owned());
                    status.region = Some(region.to_owned());
                    self.record_class(status);
                    set_ready(status, bucket, "False", "Provisioning", &format!("creating bucket {name}"));
                })
                .await?;
                self.wrote_condition.store(true, std::sync::atomic::Ordering::Relaxed);
                if let Err(error) = self.provider.create_bucket(name, region).await {
                    self.forget_intent_unless_created(bucket, name).await?;
                    return Err(match error.kind {
                        FailureKind::BucketNameTaken => taken(name),
                        _ => error.into(),
                    });
                }
                self.provider.tag_bucket(name, &tags).await?;
                info!(bucket = name, "created bucket");
            }
            BucketStep::Keep => {}
            BucketStep::Retag => self.provider.tag_bucket(name, &tags).await?,
            BucketStep::AdoptIfEmpty => {
                if !self.provider.bucket_is_empty(name).await? {
                    return Err(refusal(&BucketStep::Taken, name, &self.owner, false));
                }
                self.provider.tag_bucket(name, &tags).await?;
                info!(bucket = name, "adopted the bucket created before a restart");
            }
            BucketStep::OtherBucket | BucketStep::TagsLost | BucketStep::Taken => {
                return Err(self.refuse(bucket, status, &step, name, false).await?);
            }
        }
        let versioning = match self.class.spec.versioning {
            Some(enforced) => Some(enforced == types::ClassVersioning::Enabled),
            None => bucket.spec.versioning,
        };
        if let Some(enabled) = versioning {
            // A state that cannot be read (some S3-compatible services answer a bucket that
            // never had versioning with a document the SDK cannot parse) is simply written.
            let current = match self.provider.versioning(name).await {
                Ok(current) => Some(current),
                Err(error) if error.kind == FailureKind::Other => None,
                Err(error) => return Err(error.into()),
            };
            if current != Some(enabled) {
                self.provider.set_versioning(name, enabled).await?;
            }
        }
        self.enforce(name).await
    }

    /// After a failed CreateBucket: unless the bucket exists untagged (the call took effect
    /// and only its answer was lost), the recorded name is not this Bucket's, so it is
    /// forgotten. Otherwise a later bucket of that name, made by anyone, would be adopted,
    /// and spec.bucketName could never be corrected.
    async fn forget_intent_unless_created(&self, bucket: &Bucket, name: &str) -> Result<(), Error> {
        match self.provider.lookup_bucket(name).await {
            Ok(BucketLookup::Ours { tags }) if tags.is_empty() => return Ok(()),
            // Unknown: keep the record; the next pass decides with what it finds.
            Err(_) => return Ok(()),
            Ok(_) => {}
        }
        let api = Api::<Bucket>::namespaced(self.ctx.client.clone(), &bucket.namespace().unwrap_or_default());
        let params = PatchParams {
            field_manager: Some(self.ctx.settings.field_manager_for(NAME)),
            ..Default::default()
        };
        let forget = json!({"status": {"bucketName": null, "region": null}});
        api.patch_status(&bucket.name_any(), &params, &Patch::Merge(forget))
            .await
            .map_err(Error::kube("writing the Bucket's status"))?;
        Ok(())
    }

    /// Deletes this Bucket's IAM user with its keys and policy, if it has one.
    /// The refusal of the bucket under `name` for `step` (`deleting`: in cleanup). A bucket
    /// that is another Bucket's, or another account's once this Bucket was Ready with it,
    /// first costs this Bucket its credentials.
    async fn refuse(
        &self,
        bucket: &Bucket,
        status: &BucketStatus,
        step: &BucketStep,
        name: &str,
        deleting: bool,
    ) -> Result<Error, Error> {
        if *step == BucketStep::OtherBucket {
            self.revoke_everything(bucket, status).await?;
        }
        Ok(refusal(step, name, &self.owner, deleting))
    }

    async fn delete_user(&self) -> Result<(), Error> {
        // The derived name, never status: status is not proof of anything.
        let user = self.owner.user_name();
        if let Some(tags) = self.provider.user_tags(&user).await?
            && self.owner.owns(&tags)
        {
            for key in self.provider.access_keys(&user).await? {
                self.provider.delete_access_key(&user, &key.id).await?;
            }
            self.provider.delete_user_policy(&user, names::POLICY_NAME).await?;
            self.provider.delete_user(&user).await?;
            info!(user, "deleted the IAM user, its policy and keys");
        }
        Ok(())
    }

    /// Every credential this Bucket may have: its user (keys, policy) and its role (policy,
    /// the ServiceAccount's annotation), each looked up by its derived name and deleted only
    /// when its tags say it is this Bucket's.
    async fn revoke_everything(&self, bucket: &Bucket, status: &BucketStatus) -> Result<(), Error> {
        self.delete_user().await?;
        self.revoke_role(bucket, status).await
    }

    /// Removes what mode ServiceAccount made for this Bucket: kopper's annotation on the
    /// ServiceAccounts it named (first, so no new pod gets a role about to go), then the role
    /// with its policy, then the ConfigMap. A role is looked up by its derived name whatever
    /// status says: a pass may have made it and stopped before status named it.
    async fn revoke_role(&self, bucket: &Bucket, status: &BucketStatus) -> Result<(), Error> {
        let role = self.owner.role_name();
        let mut accounts: Vec<&str> = status.service_account_name.iter().map(String::as_str).collect();
        accounts.extend(bucket.service_account().filter(|name| !accounts.contains(name)));
        if !accounts.is_empty() {
            let api = Api::<ServiceAccount>::namespaced(self.ctx.client.clone(), &self.owner.namespace);
            let manager = self.ctx.settings.field_manager_for(NAME);
            for account in accounts {
                if service_account::release(&api, account, &role, &manager).await? {
                    info!(service_account = account, "removed kopper's role annotation");
                }
            }
        }
        let tags = role_lookup(self.provider.role_tags(&role).await, status, &role)?;
        let deleted = match tags {
            Some(tags) if self.owner.owns(&tags) => {
                self.provider.delete_role_policy(&role, names::POLICY_NAME).await?;
                self.provider.delete_role(&role).await?;
                info!(role, "deleted the IAM role and its policy");
                true
            }
            _ => false,
        };
        if deleted || status.role_arn.is_some() {
            self.delete_own_config_map(bucket).await?;
        }
        Ok(())
    }

    /// Deletes the ConfigMap of mode ServiceAccount if it is this Bucket's.
    async fn delete_own_config_map(&self, bucket: &Bucket) -> Result<(), Error> {
        let api = Api::<ConfigMap>::namespaced(self.ctx.client.clone(), &self.owner.namespace);
        let name = bucket.config_map_name();
        let current = api.get_opt(&name).await.map_err(Error::kube(format!("reading ConfigMap {name}")))?;
        if let Some(current) = current.filter(|map| secret::keeper(map, bucket) == secret::Keeper::ThisBucket)
        {
            delete_exactly(&api, &name, current.uid()).await?;
        }
        Ok(())
    }

    /// Deletes the Secret of mode Key if it is this Bucket's: its key is gone.
    async fn delete_own_secret(&self, bucket: &Bucket) -> Result<(), Error> {
        let api = Api::<Secret>::namespaced(self.ctx.client.clone(), &self.owner.namespace);
        let name = bucket.secret_name();
        let current = api.get_opt(&name).await.map_err(Error::kube(format!("reading Secret {name}")))?;
        if let Some(current) =
            current.filter(|secret| secret::keeper(secret, bucket) == secret::Keeper::ThisBucket)
        {
            delete_exactly(&api, &name, current.uid()).await?;
        }
        Ok(())
    }

    /// A pass of a Bucket in mode ServiceAccount: the bucket, no user and no key, a role only
    /// the ServiceAccount can assume with the bucket's policy, the ConfigMap, and the
    /// ServiceAccount's annotation.
    async fn apply_keyless(&self, bucket: &Bucket, status: &BucketStatus) -> Result<Action, Error> {
        self.record_key(bucket, None);
        let Some(oidc) = self.oidc else {
            return Err(Error::blocked(
                "KeylessNotConfigured",
                "spec.access.mode ServiceAccount needs the cluster's OIDC provider, which kopper is not \
                 given: a cluster admin must set --oidc-provider-arn (KOPPER_OIDC_PROVIDER_ARN; chart value \
                 bucket.oidcProviderArn), or use mode Key; nothing was created",
            ));
        };
        let Some(account) = bucket.service_account() else {
            return Err(Error::blocked(
                "InvalidAccess",
                "spec.access.serviceAccountName is required with mode ServiceAccount: name a ServiceAccount \
                 of this namespace",
            ));
        };
        let name = self.bucket_name(bucket, status)?;
        let region = self.region(bucket, status)?;
        self.ensure_bucket(bucket, status, &name, &region).await?;
        // Mode Key's credentials go: a Bucket switched from it keeps no user and no key.
        self.delete_user().await?;
        self.delete_own_secret(bucket).await?;
        // Who holds the ServiceAccount is decided before any role is made: a Bucket refused it
        // gets no role trusting it, and loses one it has.
        let current = match self.held_service_account(bucket, status, account).await? {
            Ok(current) => current,
            Err(refusal) => {
                self.revoke_role(bucket, status).await?;
                self.forget_role(bucket, status).await?;
                return Err(refusal);
            }
        };
        let role_arn = self.ensure_role(&name, oidc, account, status).await?;
        self.ensure_config_map(bucket, &name, &region, &role_arn).await?;
        self.annotate_service_account(bucket, status, &current, &role_arn).await?;

        let became_ready = ready_reason(bucket).is_none_or(|reason| reason != "Ready");
        let config_map = bucket.config_map_name();
        write_status(self.ctx, bucket, self.wrote_condition(), |status| {
            status.bucket_name = Some(name.clone());
            status.bucket_arn = Some(names::bucket_arn(&name));
            status.region = Some(region.clone());
            status.user_name = None;
            status.access_key_id = None;
            status.key_created = None;
            status.rotated_for = None;
            status.role_arn = Some(role_arn.clone());
            status.service_account_name = Some(account.to_owned());
            self.record_class(status);
            let message = format!(
                "bucket {name}, its role for ServiceAccount {account} and ConfigMap {config_map} are in place"
            );
            set_ready(status, bucket, "True", "Ready", &message);
        })
        .await?;
        if became_ready {
            self.record_ready(bucket);
            let note = format!(
                "bucket {name} is ready for ServiceAccount {account}; the role's ARN is in ConfigMap {config_map}"
            );
            publish(self.ctx, bucket, EventType::Normal, "Ready", note).await;
        }
        Ok(Action::requeue(RESYNC))
    }

    /// The role for `account` with the bucket's policy; its ARN. Created with its tags and
    /// trust policy in one call, so a crash leaves either no role or one kopper adopts; the
    /// trust policy and the policy are written only when they differ after normalisation.
    async fn ensure_role(
        &self,
        bucket_name: &str,
        oidc: &OidcProvider,
        account: &str,
        status: &BucketStatus,
    ) -> Result<String, Error> {
        let role = self.owner.role_name();
        let trust = names::trust_policy(oidc, &self.owner.namespace, account);
        let found = role_lookup(self.provider.role_tags(&role).await, status, &role)?;
        let arn = match decide::user_step(found.as_ref(), &self.owner) {
            UserStep::Create => {
                let path = names::role_path(&self.owner.cluster);
                let arn = self.provider.create_role(&role, &path, &trust, &self.owner.tags()).await?;
                info!(role, "created the IAM role");
                arn
            }
            UserStep::Keep => {
                let Some(found) = self.provider.role(&role).await? else {
                    return Err(Error::Wait {
                        reason: "Provisioning",
                        message: format!("the IAM role {role} went away while it was looked at"),
                        retry_after: Duration::from_secs(1),
                    });
                };
                if !policy::equivalent(&trust, &found.trust) {
                    self.provider.update_trust_policy(&role, &trust).await?;
                }
                found.arn
            }
            UserStep::Taken => {
                return Err(Error::blocked(
                    "RoleNameTaken",
                    format!("the IAM role {role} exists and is not this Bucket's; kopper leaves it alone"),
                ));
            }
        };
        let wanted = names::policy_document(bucket_name);
        let found = self.provider.role_policy(&role, names::POLICY_NAME).await?;
        if !found.is_some_and(|found| policy::equivalent(&wanted, &found)) {
            self.provider.put_role_policy(&role, names::POLICY_NAME, &wanted).await?;
        }
        Ok(arn)
    }

    /// The ConfigMap with the role's ARN, unless its name is someone else's.
    async fn ensure_config_map(
        &self,
        bucket: &Bucket,
        bucket_name: &str,
        region: &str,
        role_arn: &str,
    ) -> Result<(), Error> {
        let api = Api::<ConfigMap>::namespaced(self.ctx.client.clone(), &self.owner.namespace);
        let name = bucket.config_map_name();
        let current = api.get_opt(&name).await.map_err(Error::kube(format!("reading ConfigMap {name}")))?;
        if let Some(current) = &current
            && secret::keeper(current, bucket) != secret::Keeper::ThisBucket
        {
            return Err(Error::blocked(
                "ConfigMapNameTaken",
                format!(
                    "ConfigMap {name} was not made by kopper for this Bucket; kopper never takes or overwrites \
                     it and writes the role's ARN nowhere else: rename or remove that ConfigMap, or give this \
                     Bucket another name"
                ),
            ));
        }
        let contents = secret::Contents { bucket: bucket_name, region, endpoint: self.provider.endpoint() };
        let desired = config_map::desired(bucket, &contents, role_arn);
        if current.as_ref().is_some_and(|current| config_map::up_to_date(current, &desired)) {
            return Ok(());
        }
        secret::write(&api, current.as_ref(), desired, &self.ctx.settings.field_manager_for(NAME)).await
    }

    /// The ServiceAccount `account` when this Bucket holds it ([`service_account::holder`]) and
    /// it exists; the inner error is the refusal otherwise (ServiceAccountTaken,
    /// ServiceAccountNotFound), the outer one a failure to find out. The ServiceAccount this
    /// Bucket named before loses kopper's annotation first.
    async fn held_service_account(
        &self,
        bucket: &Bucket,
        status: &BucketStatus,
        account: &str,
    ) -> Result<Result<ServiceAccount, Error>, Error> {
        let api = Api::<ServiceAccount>::namespaced(self.ctx.client.clone(), &self.owner.namespace);
        let manager = self.ctx.settings.field_manager_for(NAME);
        let role = self.owner.role_name();
        if let Some(previous) = status.service_account_name.as_deref().filter(|previous| *previous != account)
        {
            service_account::release(&api, previous, &role, &manager).await?;
        }
        let current =
            api.get_opt(account).await.map_err(Error::kube(format!("reading ServiceAccount {account}")))?;
        let annotation = current
            .as_ref()
            .and_then(|sa| sa.annotations().get(service_account::ROLE_ARN_ANNOTATION).cloned());
        let claimants = self.claimants(bucket, account);
        let holder = service_account::holder(annotation.as_deref(), &claimants);
        if let Some(other) = holder.filter(|holder| holder.name != bucket.name_any()) {
            let why = if annotation.as_deref().and_then(names::role_name_in_arn)
                == Some(other.role_name.as_str())
            {
                format!("its role is in the ServiceAccount's {}", service_account::ROLE_ARN_ANNOTATION)
            } else {
                "it is the older Bucket naming it".to_owned()
            };
            return Ok(Err(Error::blocked(
                "ServiceAccountTaken",
                format!(
                    "ServiceAccount {account} is given to Bucket {} ({why}); a ServiceAccount gets one Bucket's \
                     role, and this Bucket has none: name another ServiceAccount in \
                     spec.access.serviceAccountName, or delete Bucket {}",
                    other.name, other.name
                ),
            )));
        }
        // No role until the ServiceAccount exists: a role trusts a name, and until the
        // ServiceAccount is there nothing tells which Bucket it will be given to.
        let Some(current) = current else {
            return Ok(Err(Error::blocked(
                "ServiceAccountNotFound",
                format!(
                    "ServiceAccount {account} does not exist in namespace {}: create it, and kopper makes \
                     the role, writes its ARN into ConfigMap {} and annotates the ServiceAccount",
                    self.owner.namespace,
                    bucket.config_map_name()
                ),
            )));
        };
        Ok(Ok(current))
    }

    /// The role's ARN on `current`, the ServiceAccount this Bucket holds. Its name is recorded
    /// in status before the annotation is written, so that whatever happens next, the
    /// annotation is found and removed again.
    async fn annotate_service_account(
        &self,
        bucket: &Bucket,
        status: &BucketStatus,
        current: &ServiceAccount,
        role_arn: &str,
    ) -> Result<(), Error> {
        let api = Api::<ServiceAccount>::namespaced(self.ctx.client.clone(), &self.owner.namespace);
        let account = current.name_any();
        if status.service_account_name.as_deref() != Some(account.as_str()) {
            write_status(self.ctx, bucket, false, |status| {
                status.service_account_name = Some(account.clone());
            })
            .await?;
        }
        service_account::annotate(&api, current, role_arn, &self.ctx.settings.field_manager_for(NAME)).await
    }

    /// After [`Pass::revoke_role`]: status names no role and no ServiceAccount any more.
    async fn forget_role(&self, bucket: &Bucket, status: &BucketStatus) -> Result<(), Error> {
        if status.role_arn.is_none() && status.service_account_name.is_none() {
            return Ok(());
        }
        write_status(self.ctx, bucket, false, |status| {
            status.role_arn = None;
            status.service_account_name = None;
        })
        .await
    }

    /// The Buckets of this namespace that name `account`, this one among them, as the cache
    /// holds them.
    fn claimants(&self, bucket: &Bucket, account: &str) -> Vec<service_account::Claimant> {
        let claimant = |other: &Bucket| service_account::Claimant {
            name: other.name_any(),
            created: other.meta().creation_timestamp.clone(),
            role_name: owner_of(&self.owner.cluster, other).role_name(),
            deleting: other.meta().deletion_timestamp.is_some(),
        };
        let mut claimants: Vec<_> = self
            .cached
            .state()
            .iter()
            .filter(|other| other.namespace().as_deref() == Some(self.owner.namespace.as_str()))
            .filter(|other| other.service_account() == Some(account) && other.name_any() != bucket.name_any())
            .map(|other| claimant(other))
            .collect();
        claimants.push(claimant(bucket));
        claimants
    }

    /// The IAM user and its policy; the user's name.
    async fn ensure_user(&self, bucket_name: &str) -> Result<String, Error> {
        let user = self.owner.user_name();
        match decide::user_step(self.provider.user_tags(&user).await?.as_ref(), &self.owner) {
            UserStep::Create => {
                self.provider.create_user(&user, names::BUCKET_USER_PATH, &self.owner.tags()).await?
            }
            UserStep::Keep => {}
            UserStep::Taken => {
                return Err(Error::blocked(
                    "UserNameTaken",
                    format!("the IAM user {user} exists and is not this Bucket's; kopper leaves it alone"),
                ));
            }
        }
        let wanted = names::policy_document(bucket_name);
        let found = self.provider.user_policy(&user, names::POLICY_NAME).await?;
        if !found.is_some_and(|found| policy::equivalent(&wanted, &found)) {
            self.provider.put_user_policy(&user, names::POLICY_NAME, &wanted).await?;
        }
        Ok(user)
    }

    /// The access key held by the Secret, and at most one older key in its grace period
    /// ([`provider::plan_keys`]).
    async fn ensure_credentials(
        &self,
        bucket: &Bucket,
        bucket_name: &str,
        region: &str,
        user: &str,
        schedule: Option<&rotation::Schedule>,
    ) -> Result<KeyInUse, Error> {
        let secrets =
            Api::<Secret>::namespaced(self.ctx.client.clone(), &bucket.namespace().unwrap_or_default());
        let secret_name = bucket.secret_name();
        let current = secrets
            .get_opt(&secret_name)
            .await
            .map_err(Error::kube(format!("reading Secret {secret_name}")))?;
        if let Some(current) = &current {
            secret_taken(secret::keeper(current, bucket), &secret_name)?;
        }
        let held = current.as_ref().and_then(secret::held_key_id);
        let wanted_rotation = bucket.annotations().get(ROTATE_ANNOTATION);
        let status = bucket.status.clone().unwrap_or_default();
        let rotate = wanted_rotation.is_some() && wanted_rotation != status.rotated_for.as_ref();
        let listed = self.provider.access_keys(user).await?;
        let plan = provider::plan_keys(&listed, held.as_deref(), rotate, schedule, Timestamp::now());
        for key in &plan.delete_first {
            self.provider.delete_access_key(user, key).await?;
            info!(user, key, "deleted an access key the Secret does not hold");
        }
        let settings = secret::Contents { bucket: bucket_name, region, endpoint: self.provider.endpoint() };
        let (key_id, created) = if let Some(why) = plan.create {
            self.may_issue_key(bucket, why)?;
            let created = self.provider.create_access_key(user).await;
            // An answer lost on the way (unreachable, timed out) may hide a key made.
            if created.as_ref().is_ok() || created.as_ref().is_err_and(|e| e.kind == FailureKind::Unavailable)
            {
                self.keys.record(&self.owner.uid);
            }
            let key = created?;
            let desired = secret::desired(bucket, &settings, &key.id, &key.secret);
            secret::write(&secrets, current.as_ref(), desired, &self.ctx.settings.field_manager_for(NAME))
                .await?;
            info!(user, key = %key.id, "wrote a new access key into the Secret");
            if why == NewKey::Scheduled {
                let old = held.unwrap_or_default();
                let note = match schedule {
                    Some(schedule) if !schedule.grace.is_zero() => format!(
                        "access key {old} reached its replacement age (spec.keyRotation): Secret {} now holds \
                         {}; {old} is deleted in {}s",
                        bucket.secret_name(),
                        key.id,
                        schedule.grace.as_secs()
                    ),
                    _ => format!("access key {old} replaced by {} (spec.keyRotation)", key.id),
                };
                publish(self.ctx, bucket, EventType::Normal, "CredentialsRotated", note).await;
            }
            (key.id, key.created)
        } else {
            let held = held.unwrap_or_default();
            if let Some(current) = &current
                && let Some(desired) = secret::refreshed(bucket, current, &settings)
            {
                secret::write(&secrets, Some(current), desired, &self.ctx.settings.field_manager_for(NAME))
                    .await?;
            }
            let created = listed.iter().find(|key| key.id == held).and_then(|key| key.created);
            (held, created)
        };
        if let Some(old) = &plan.delete_after {
            self.provider.delete_access_key(user, old).await?;
            publish(
                self.ctx,
                bucket,
                EventType::Normal,
                "CredentialsRotated",
                format!("access key {old} replaced by {key_id}"),
            )
            .await;
        }
        Ok(KeyInUse { id: key_id, created, next_due: plan.next_due })
    }

    /// Refuses a second access key for this Bucket within the key interval.
    fn may_issue_key(&self, bucket: &Bucket, why: NewKey) -> Result<(), Error> {
        let interval = self.key_interval;
        let asked_by = match why {
            NewKey::Scheduled => "spec.keyRotation",
            NewKey::Asked | NewKey::Missing => ROTATE_ANNOTATION,
        };
        match self.keys.check(&self.owner.uid, why != NewKey::Missing) {
            churn::KeyIssue::Allowed => Ok(()),
            churn::KeyIssue::RotationWaits(wait) => Err(Error::Wait {
                reason: "RotationRateLimited",
                message: format!(
                    "the rotation asked for by {asked_by} waits {}s: a Bucket gets at most one new \
                     access key every {}s; the current key stays valid meanwhile",
                    wait.as_secs().max(1),
                    interval.as_secs()
                ),
                retry_after: wait,
            }),
            churn::KeyIssue::Churn(wait) => Err(Error::Wait {
                reason: "CredentialsChurn",
                message: format!(
                    "this Bucket needs another access key {}s after the last one, so something keeps undoing \
                     kopper's work (a controller or person rewriting Secret {}, or deleting its key): \
                     kopper issues at most one key every {}s and tries again in {}s",
                    interval.saturating_sub(wait).as_secs(),
                    bucket.secret_name(),
                    interval.as_secs(),
                    wait.as_secs().max(1)
                ),
                retry_after: wait,
            }),
        }
    }

    /// Every grant's IAM user first, then the bucket (with `Delete`), then the Bucket's own IAM
    /// user: while the bucket cannot be deleted (not empty, denied, not this Bucket's), the
    /// finalizer stays and so do the credentials the owner needs to empty it.
    async fn cleanup(&self, bucket: &Bucket) -> Result<Cleanup, Error> {
        let status = bucket.status.clone().unwrap_or_default();
        self.on_recorded_backend(&status, bucket.name_any().as_str())?;
        // Every grant's key goes first: no consumer keeps access to a bucket about to go.
        let grants = self.grants.recorded_users(&bucket.namespace().unwrap_or_default(), &bucket.name_any());
        let revoked = grant_controller::revoke_bucket_grants(
            self.provider,
            &self.owner.cluster,
            &self.owner.uid,
            &grants,
        )
        .await?;
        if revoked > 0 {
            info!(revoked, "deleted the IAM users of the Bucket's grants");
        }
        if bucket.spec.deletion_policy == DeletionPolicy::Delete
            && let Some(name) = &status.bucket_name
            && self.delete_bucket(bucket, &status, name).await? == Cleanup::Emptying
        {
            return Ok(Cleanup::Emptying);
        }
        self.revoke_everything(bucket, &status).await?;
        Ok(Cleanup::Done)
    }

    /// Deletes the bucket, emptying it first with `emptyOnDelete`: for [`EMPTYING_SLICE`] at
    /// most per pass ([`Cleanup::Emptying`] until it is empty).
    async fn delete_bucket(
        &self,
        bucket: &Bucket,
        status: &BucketStatus,
        name: &str,
    ) -> Result<Cleanup, Error> {
        let found = self.provider.lookup_bucket(name).await?;
        let step = decide::bucket_step(&found, &self.owner, &bucket.spec.tags, recorded(status, name));
        match step {
            BucketStep::Keep | BucketStep::Retag => {}
            // Created and never tagged (a crash): deleted only while it is empty.
            BucketStep::AdoptIfEmpty if self.provider.bucket_is_empty(name).await? => {}
            // S3 said NoSuchBucket: gone already.
            BucketStep::Create => return Ok(Cleanup::Done),
            // Not provably this Bucket's: kopper deletes nothing and keeps the finalizer.
            BucketStep::AdoptIfEmpty => return Err(refusal(&BucketStep::Taken, name, &self.owner, true)),
            BucketStep::OtherBucket | BucketStep::TagsLost | BucketStep::Taken => {
                return Err(self.refuse(bucket, status, &step, name, true).await?);
            }
        }
        if !self.provider.bucket_is_empty(name).await? {
            if bucket.spec.empty_on_delete {
                // Nobody may write while kopper empties it, or a workload still running
                // would keep it from ever being empty.
                self.revoke_everything(bucket, status).await?;
            } else {
                return Err(Error::blocked(
                    "BucketNotEmpty",
                    format!(
                        "bucket {name} still holds objects, so it was not deleted: empty it (the \
                         {} still work until it is deleted), set \
                         spec.emptyOnDelete to true to have kopper delete every object, or set \
                         spec.deletionPolicy to Retain to keep it",
                        credentials_held(bucket)
                    ),
                ));
            }
            self.report_emptying(bucket, name).await?;
            let (deleted, empty) = self.empty_for_a_slice(name).await?;
            info!(bucket = name, deleted, empty, "deleted objects from the bucket");
            if !empty {
                return Ok(Cleanup::Emptying);
            }
        }
        self.provider.delete_bucket(name).await?;
        info!(bucket = name, "deleted the bucket");
        Ok(Cleanup::Done)
    }

    /// Says in the Ready condition that the bucket is being emptied: written once, when
    /// emptying starts (or goes on after a failure), not after every batch.
    async fn report_emptying(&self, bucket: &Bucket, name: &str) -> Result<(), Error> {
        let message = format!(
            "emptying bucket {name} before deleting it (spec.emptyOnDelete); its credentials are revoked"
        );
        write_status(self.ctx, bucket, false, |status| {
            set_ready(status, bucket, "False", "Emptying", &message)
        })
        .await?;
        self.wrote_condition.store(true, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    }

    /// Deletes batches of objects from `name` until it is empty or [`EMPTYING_SLICE`] has
    /// passed: how many were deleted, and whether it is empty.
    async fn empty_for_a_slice(&self, name: &str) -> Result<(u64, bool), Error> {
        let started = Instant::now();
        let mut total = 0;
        loop {
            let deleted = self.provider.empty_batch(name).await?;
            if deleted == 0 {
                return Ok((total, true));
            }
            total += deleted;
            if started.elapsed() >= EMPTYING_SLICE {
                return Ok((total, false));
            }
        }
    }
}

/// What gives a workload the Bucket's bucket, in the Bucket's mode, for messages.
fn credentials_held(bucket: &Bucket) -> String {
    match bucket.service_account() {
        Some(account) => format!("role of ServiceAccount {account}"),
        None => format!("credentials in Secret {}", bucket.secret_name()),
    }
}

/// The tags of the Bucket's role as a look for it by name (ListRoleTags) found them: `None`
/// for no role. A denied look counts as "no role" while `status` names no role and no
/// ServiceAccount, and stops the pass otherwise.
///
/// Why a denial can mean "absent": IAM authorises a request for a role that does not exist
/// against the ARN without a path (`role/<name>`), because it cannot know the path of a role
/// it does not have; a policy scoped to kopper's path (`role/kopper/<cluster>/*`) so answers
/// AccessDenied where NoSuchEntity is meant. A role kopper made is at its path, where the look
/// is allowed, so while status names neither a role nor a ServiceAccount (which kopper records
/// only once its role exists) a denial is no evidence of a role of kopper's, and a Bucket is
/// neither refused its first pass nor kept from being deleted. Once status names one, kopper
/// may have made a role and must not forget it: the denial is the pass's error.
fn role_lookup(
    looked: Result<Option<BTreeMap<String, String>>, ProviderError>,
    status: &BucketStatus,
    role: &str,
) -> Result<Option<BTreeMap<String, String>>, Error> {
    match looked {
        Err(error)
            if error.kind == FailureKind::AccessDenied
                && status.role_arn.is_none()
                && status.service_account_name.is_none() =>
        {
            tracing::debug!(role, "the look for the Bucket's IAM role was denied; taken as no role: {error}");
            Ok(None)
        }
        looked => Ok(looked?),
    }
}

/// Deletes `name` only while it is the object of `uid`, so that one made since under the name
/// is not.
async fn delete_exactly<K>(api: &Api<K>, name: &str, uid: Option<String>) -> Result<(), Error>
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let params = DeleteParams {
        preconditions: Some(Preconditions { uid, resource_version: None }),
        ..DeleteParams::default()
    };
    match api.delete(name, &params).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 || status.code == 409 => Ok(()),
        Err(source) => Err(Error::Kube { what: format!("deleting {name}"), source }),
    }
}

/// The access key in the Secret after a pass.
struct KeyInUse {
    id: String,
    /// When the provider says it was created.
    created: Option<Timestamp>,
    /// When the next step of its schedule falls due.
    next_due: Option<Timestamp>,
}

/// The shortest requeue for a scheduled step, so that no schedule can requeue a Bucket in a
/// tight loop.
const SOONEST_DUE: Duration = Duration::from_millis(200);

/// How long a Ready Bucket waits for its next pass: until its next scheduled step, or
/// [`RESYNC`].
fn until_due(next_due: Option<Timestamp>, now: Timestamp) -> Duration {
    let Some(due) = next_due else { return RESYNC };
    let wait = Duration::try_from(now.duration_until(due)).unwrap_or(Duration::ZERO);
    wait.clamp(SOONEST_DUE, RESYNC)
}

/// What status says about the bucket `name`: Ready with it (the ARN is written only with
/// Ready), recorded before creating it, or nothing.
fn recorded(status: &BucketStatus, name: &str) -> Recorded {
    match (&status.bucket_name, &status.bucket_arn) {
        (Some(recorded), Some(arn)) if recorded == name && *arn == names::bucket_arn(name) => Recorded::Ready,
        (Some(recorded), _) if recorded == name => Recorded::Creating,
        _ => Recorded::Nothing,
    }
}

/// Why the bucket under `name` is not used (or, `deleting`, not deleted), for a `step` that
/// refuses it.
fn refusal(step: &BucketStep, name: &str, owner: &Owner, deleting: bool) -> Error {
    let release = if deleting {
        "; kopper does not delete it and keeps the Bucket: set spec.deletionPolicy to Retain to let \
         the Bucket go without deleting the bucket"
    } else {
        ""
    };
    match step {
        BucketStep::TagsLost => Error::blocked(
            "BucketTagsMissing",
            format!(
                "bucket {name}, which this Bucket was Ready with, no longer carries its tags, so kopper \
                 neither adopts nor deletes it; the credentials stay in place. Restore the tags {}={} \
                 and {}={} (another tool may have replaced them){release}",
                names::TAG_CLUSTER,
                owner.cluster,
                names::TAG_UID,
                owner.uid
            ),
        ),
        _ if deleting => Error::blocked(
            "BucketNameTaken",
            format!(
                "bucket {name} is not this Bucket's any more (another account's, another Bucket's, or \
                 one kopper did not create){release}"
            ),
        ),
        _ => taken(name),
    }
}

/// The refusal of a Secret under `spec.secretName` that `keeper` keeps, unless it is this
/// Bucket's.
fn secret_taken(keeper: secret::Keeper, secret_name: &str) -> Result<(), Error> {
    let who = match keeper {
        secret::Keeper::ThisBucket => return Ok(()),
        secret::Keeper::Replication => {
            "is a copy the replication engine keeps (a ReplicationRule or \
                                        ConfigMapSync writes it)"
        }
        secret::Keeper::Other => "was not made by kopper for this Bucket",
    };
    Err(Error::blocked(
        "SecretNameTaken",
        format!(
            "Secret {secret_name} {who}; kopper never takes or overwrites it and issues no credentials \
             into it: set spec.secretName to a name no other Secret in the namespace has (or have the \
             Secret's owner remove it)"
        ),
    ))
}

fn taken(name: &str) -> Error {
    Error::blocked(
        "BucketNameTaken",
        format!(
            "the bucket name {name} is taken by a bucket that is not this Bucket's (another account, \
             another Bucket, or a bucket kopper did not create): choose another spec.bucketName"
        ),
    )
}

fn jiff_seconds_since(time: &Time) -> f64 {
    let now = k8s_openapi::jiff::Timestamp::now();
    now.duration_since(time.0).as_secs_f64().max(0.0)
}

/// Sets the Ready condition, keeping its transition time while its status stays the same.
fn set_ready(status: &mut BucketStatus, bucket: &Bucket, value: &str, reason: &str, message: &str) {
    let generation = bucket.meta().generation;
    set_ready_condition(&mut status.conditions, generation, value, reason, message);
    status.observed_generation = generation;
}

/// Sets the Ready condition in `conditions` for `generation`, keeping its transition time
/// while its status stays the same (a Bucket's and a BucketAccess's alike).
fn set_ready_condition(
    conditions: &mut Vec<Condition>,
    generation: Option<i64>,
    value: &str,
    reason: &str,
    message: &str,
) {
    let previous = conditions.iter().find(|c| c.type_ == READY);
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
    conditions.retain(|c| c.type_ != READY);
    conditions.push(condition);
}

/// Writes the status fields `change` changes, only if it changes any. `bucket` may be the
/// pass's starting snapshot: fields the change leaves alone are not written back, so a
/// report at the end of a pass cannot undo what the pass wrote meanwhile (a forgotten bucket
/// name, say). With `rewrite_conditions` (the pass wrote a condition meanwhile), the
/// conditions are written whatever the snapshot holds.
async fn write_status(
    ctx: &Context,
    bucket: &Bucket,
    rewrite_conditions: bool,
    change: impl FnOnce(&mut BucketStatus),
) -> Result<(), Error> {
    let old = bucket.status.clone().unwrap_or_default();
    let mut new = old.clone();
    change(&mut new);
    if new == old && !rewrite_conditions {
        return Ok(());
    }
    let mut patch = status_patch(&old, &new);
    if rewrite_conditions && let serde_json::Value::Object(fields) = &mut patch {
        fields.insert("conditions".into(), serde_json::to_value(&new.conditions).unwrap_or_default());
    }
    let api = Api::<Bucket>::namespaced(ctx.client.clone(), &bucket.namespace().unwrap_or_default());
    let params =
        PatchParams { field_manager: Some(ctx.settings.field_manager_for(NAME)), ..Default::default() };
    let patch = json!({ "status": patch });
    api.patch_status(&bucket.name_any(), &params, &Patch::Merge(patch))
        .await
        .map_err(Error::kube("writing the Bucket's status"))?;
    Ok(())
}

/// The merge patch from `old` to `new`: the fields that differ, `null` for those removed.
fn status_patch<S: serde::Serialize>(old: &S, new: &S) -> serde_json::Value {
    let fields = |status: &S| match serde_json::to_value(status) {
        Ok(serde_json::Value::Object(fields)) => fields,
        _ => serde_json::Map::new(),
    };
    let (old, new) = (fields(old), fields(new));
    let mut patch: serde_json::Map<_, _> = new
        .iter()
        .filter(|(key, value)| old.get(*key) != Some(value))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    for key in old.keys().filter(|key| !new.contains_key(*key)) {
        patch.insert(key.clone(), serde_json::Value::Null);
    }
    serde_json::Value::Object(patch)
}

async fn publish(ctx: &Context, bucket: &Bucket, type_: EventType, reason: &str, note: String) {
    ctx.recorder.record(&bucket.object_ref(&()), type_, "Reconcile", reason, note).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pass run on the cached copy of an object already gone finds its finalizer gone with
    /// it: done, not a failure to report. Any other failure to take it off stays one.
    #[test]
    fn a_finalizer_that_left_with_its_object_is_no_failure() {
        let answer = |code: u16| {
            let status = kube::core::Status { code, ..kube::core::Status::default() };
            finalizer::Error::<Error>::RemoveFinalizer(kube::Error::Api(Box::new(status)))
        };
        assert!(gone_with_its_finalizer(answer(404)).is_ok());
        assert!(matches!(gone_with_its_finalizer(answer(409)), Err(Error::Finalizer(_))));
    }

    #[test]
    fn a_long_rotation_request_is_kept_as_its_digest_and_a_short_one_as_written() {
        let with = |value: &str| -> Bucket {
            let mut bucket: Bucket = serde_json::from_value(serde_json::json!({
                "apiVersion": "kopper.dev/v1alpha1", "kind": "Bucket",
                "metadata": {"name": "b", "annotations": {ROTATE_ANNOTATION: value}}, "spec": {}
            }))
            .unwrap();
            shorten_rotation_request(&mut bucket);
            bucket
        };
        assert_eq!(with("2026-11-28").annotations()[ROTATE_ANNOTATION], "2026-11-28");
        let long = "x".repeat(256 * 1024);
        let kept = with(&long).annotations()[ROTATE_ANNOTATION].clone();
        assert!(kept.starts_with("sha256:") && kept.len() == 71, "{kept}");
        assert_ne!(
            kept,
            with(&format!("{long}y")).annotations()[ROTATE_ANNOTATION],
            "a change is a new request"
        );
    }

    #[test]
    fn a_status_write_from_a_stale_snapshot_holds_only_what_it_changes() {
        let snapshot = BucketStatus {
            bucket_name: Some("x".into()),
            region: Some("eu-west-1".into()),
            ..BucketStatus::default()
        };
        let mut reported = snapshot.clone();
        reported.observed_generation = Some(2);
        assert_eq!(status_patch(&snapshot, &reported), json!({"observedGeneration": 2}));
        let mut forgotten = snapshot.clone();
        forgotten.bucket_name = None;
        assert_eq!(status_patch(&snapshot, &forgotten), json!({"bucketName": null}));
    }

    #[test]
    fn a_ready_bucket_is_looked_at_again_when_its_next_step_falls_due() {
        let now = Timestamp::from_second(1_800_000_000).unwrap();
        let later = |seconds: i64| {
            Some(now.checked_add(k8s_openapi::jiff::SignedDuration::from_secs(seconds)).unwrap())
        };
        assert_eq!(until_due(None, now), RESYNC);
        assert_eq!(until_due(later(90), now), Duration::from_secs(90));
        assert_eq!(until_due(later(0), now), SOONEST_DUE);
        assert_eq!(until_due(later(-5), now), SOONEST_DUE);
        assert_eq!(until_due(later(365 * 24 * 3600), now), RESYNC);
    }

    /// A denied look for a role (IAM checks a role that does not exist against its ARN without
    /// kopper's path) is "no role" only while status names no role and no ServiceAccount.
    #[test]
    fn a_denied_role_lookup_counts_as_absent_only_while_status_names_no_role() {
        let denied = || {
            Err(ProviderError {
                service: "iam",
                operation: "ListRoleTags",
                kind: FailureKind::AccessDenied,
                message: "AccessDenied".into(),
            })
        };
        let fresh = BucketStatus::default();
        assert_eq!(role_lookup(denied(), &fresh, "r").unwrap(), None);
        let named_role =
            BucketStatus { role_arn: Some("arn:aws:iam::1:role/kopper/c/r".into()), ..fresh.clone() };
        let named_account = BucketStatus { service_account_name: Some("app".into()), ..fresh.clone() };
        for status in [named_role, named_account] {
            let error = role_lookup(denied(), &status, "r").unwrap_err();
            assert_eq!(error.category(), "access_denied", "{status:?}");
        }
        let unavailable = Err(ProviderError {
            service: "iam",
            operation: "ListRoleTags",
            kind: FailureKind::Unavailable,
            message: "timeout".into(),
        });
        assert!(role_lookup(unavailable, &fresh, "r").is_err(), "only a denial is taken as absent");
        let tags = BTreeMap::from([(names::TAG_UID.to_owned(), "u".to_owned())]);
        assert_eq!(role_lookup(Ok(Some(tags.clone())), &fresh, "r").unwrap(), Some(tags));
    }

    #[test]
    fn status_says_ready_only_with_the_arn_of_the_same_name() {
        let creating = BucketStatus { bucket_name: Some("x".into()), ..BucketStatus::default() };
        assert_eq!(recorded(&creating, "x"), Recorded::Creating);
        assert_eq!(recorded(&creating, "y"), Recorded::Nothing);
        let ready = BucketStatus { bucket_arn: Some(names::bucket_arn("x")), ..creating.clone() };
        assert_eq!(recorded(&ready, "x"), Recorded::Ready);
        let stale = BucketStatus { bucket_arn: Some(names::bucket_arn("old")), ..creating };
        assert_eq!(recorded(&stale, "x"), Recorded::Creating);
    }
}
