//! The replication engine behind ReplicationRule, ConfigMapSync and SecretSync.
//!
//! One engine decides what copies should exist and applies the difference; the three custom
//! resources ([`types`]) are its front doors, read into one rule model ([`rules`],
//! [`model`]). Its files import one way, each from those listed before it:
//! - [`shape`] (pure, depending on nothing of the engine: which keys, labels and annotations
//!   a copy carries of its source, the labels added, a Secret's type) and [`model`]:
//!   identities, labels and the types everything else works with;
//! - [`desired`] (pure: what each namespace should hold), [`apply`] (the writes),
//!   [`rules`] (a rule object read into a rule, and its status as a pure function);
//! - [`cache`]: kopper's copies, kept as digests, so a copy is checked against its source
//!   without being read and a restart costs one paginated list; everything else only where
//!   a rule needs it, metadata only ([`cache::scoped`]: the rules' source namespaces, and
//!   the names of sources whose copy an object kopper did not make blocks); sources'
//!   content, read once per version while it fits a byte budget ([`cache::sources`]);
//!   namespaces, from the cache every controller shares ([`crate::runtime::namespaces`]).
//!   The caches report each change through [`cache::CacheEvents`];
//! - [`wake`]: which rules a change concerns, and the pacing of their passes (a lone change
//!   at once, a burst by one pass per [`wake::pacing::MIN_WAKE_GAP`]; the watch event of a
//!   copy kopper wrote wakes no pass of the rule that wrote it);
//! - [`engine`]: one pass of one rule (read, decide, apply, report), and its cleanup;
//!   [`new_namespaces`]: the copies a namespace newly wants, written at once, so its wait
//!   does not grow with the cluster;
//! - this module: the three kube-runtime controllers (one per kind) that run the passes.
//!
//! [`mod@plan`] runs the same decision against the live cluster and writes nothing. A rule
//! holds the finalizer [`model::FINALIZER`] until its copies are removed (or, with
//! `deletionPolicy: Orphan`, marked [`model::ORPHANED_LABEL`] for a successor to take over);
//! copies whose rule vanished without it (a finalizer removed by hand) are deleted at start
//! and every minute, orphans never, but for those tenants' syncs left where their consent is
//! gone: those, and the copies of tenants' syncs kept while refused (see
//! [`model::KeptRules`]), go then and as each namespace change is served.
//! So besides get/list/watch on namespaces, ConfigMaps and Secrets, create/patch/delete on
//! ConfigMaps and Secrets and patch on the status subresources, kopper needs `patch` on
//! `configmapsyncs`, `replicationrules` and `secretsyncs` themselves, and get/list/watch/
//! create/update/delete on each kind `--replicate-kinds` allows ([`crate::kinds`]): those are
//! resolved by discovery at start ([`cache::kinds`]), their copies watched as
//! `DynamicObject`s and judged by the server's rendering of kopper's writes
//! ([`cache::copies::RenderingMemory`]); with no kind allowed, nothing of that runs.

pub mod apply;
pub mod cache;
pub mod desired;
pub mod engine;
pub mod metrics;
pub mod model;
pub mod new_namespaces;
pub mod plan;
pub mod rules;
pub mod shape;
pub mod types;
pub mod wake;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::{Patch, PatchParams};
use kube::core::error_boundary::InvalidObject;
use kube::core::{ApiResource, DynamicObject, ObjectMeta};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::runtime::finalizer::{self, finalizer};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{Controller, PredicateConfig, WatchStreamExt, watcher};
use kube::{Api, Resource};

use self::cache::Caches;
use self::cache::rules::{Guarded, RuleStores, StoreRevision};
use self::cache::sources::Memo;
use self::engine::{Engine, SyncError};
use self::metrics::ReplicationMetrics;
use self::model::{FIELD_MANAGER_NAME, FINALIZER};
use self::rules::RuleObject;
use self::types::{ConfigMapSync, DeletionPolicy, ReplicationRule, SecretSync};
use self::wake::{Router, Wakers, pacing};
use crate::runtime::cache::{CacheStopped, FirstList};
use crate::runtime::controller::run_controller;
use crate::runtime::{Context, ErrorCategory};

pub use self::metrics::register_metrics;
pub use self::model::{RULE_CONTROLLER, SECRET_SYNC_CONTROLLER, SYNC_CONTROLLER};

/// How often copies whose rule vanished without its finalizer running are looked for.
const ORPHAN_SWEEP_INTERVAL: Duration = Duration::from_secs(60);

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    CacheStopped(#[from] CacheStopped),
    #[error("removing the finalizer: {0}")]
    RemoveFinalizer(#[source] kube::Error),
    #[error(transparent)]
    Finalizer(Box<finalizer::Error<SyncError>>),
}

impl ErrorCategory for Error {
    fn category(&self) -> &'static str {
        match self {
            Self::CacheStopped(_) => "cache",
            Self::RemoveFinalizer(_) => "kube_api",
            Self::Finalizer(error) => match error.as_ref() {
                finalizer::Error::ApplyFailed(error) | finalizer::Error::CleanupFailed(error) => {
                    error.category()
                }
                finalizer::Error::AddFinalizer(_) | finalizer::Error::RemoveFinalizer(_) => "kube_api",
                _ => "finalizer",
            },
        }
    }

    /// A pass that met only permanent refusals (an escalation the API server refused) is
    /// tried again after the longest backoff, not hot.
    fn is_permanent(&self) -> bool {
        match self {
            Self::Finalizer(error) => match error.as_ref() {
                finalizer::Error::ApplyFailed(error) => error.is_permanent(),
                _ => false,
            },
            Self::CacheStopped(_) | Self::RemoveFinalizer(_) => false,
        }
    }
}

/// Runs the ReplicationRule, ConfigMapSync and SecretSync controllers until `shutdown` resolves and
/// in-flight passes end.
pub async fn run(
    ctx: Arc<Context>,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) -> anyhow::Result<()> {
    let shutdown = shutdown.shared();
    let client = ctx.client.clone();
    // No debounce, which would delay every change: wake-ups are paced per rule instead.
    let config = crate::runtime::controller::config();
    let (wakers, rule_wakes, sync_wakes, secret_sync_wakes) = Wakers::new();
    let revision = StoreRevision::default();
    let (rules, rules_synced) = watch_rules::<ReplicationRule>(&client, &revision);
    let (syncs, syncs_synced) = watch_rules::<ConfigMapSync>(&client, &revision);
    let (secret_syncs, secret_syncs_synced) = watch_rules::<SecretSync>(&client, &revision);
    let rule_controller = Controller::for_stream(rules.0, rules.1)
        .with_config(config.clone())
        .reconcile_on(pacing::paced(rule_wakes, pacing::MIN_WAKE_GAP));
    let sync_controller = Controller::for_stream(syncs.0, syncs.1)
        .with_config(config.clone())
        .reconcile_on(pacing::paced(sync_wakes, pacing::MIN_WAKE_GAP));
    let secret_sync_controller = Controller::for_stream(secret_syncs.0, secret_syncs.1)
        .with_config(config)
        .reconcile_on(pacing::paced(secret_sync_wakes, pacing::MIN_WAKE_GAP));
    // Nothing is asked of discovery when no other kind is allowed.
    self::cache::kinds::resolve_all(&client, &ctx.settings.replicate_kinds).await;
    let memo = Arc::new(Memo::default());
    let router = Arc::new(Router {
        rules: RuleStores::new(
            (rule_controller.store(), rules_synced),
            (sync_controller.store(), syncs_synced),
            (secret_sync_controller.store(), secret_syncs_synced),
            revision,
            ctx.settings.clone(),
        ),
        wakers,
        memo: memo.clone(),
    });
    let (caches, namespace_changes) = Caches::spawn(
        &client,
        ctx.namespaces.subscribe(),
        router.clone(),
        memo,
        ctx.metrics.clone(),
        // Metrics not built with the engine's registration (tests of other parts) get
        // gauges nobody exports.
        ctx.metrics.kept::<ReplicationMetrics>().unwrap_or_default(),
        &ctx.settings.replicate_kinds,
        shutdown.clone(),
    );
    let engine = Arc::new(Engine::new(caches, router));
    let for_namespaces = engine.clone();
    let for_rules = engine.clone();
    let for_syncs = engine.clone();
    let for_secret_syncs = engine.clone();
    let for_orphans = engine.clone();
    let orphan_ctx = ctx.clone();
    let controllers = async {
        tokio::join!(
            collect_orphans(for_orphans, orphan_ctx, shutdown.clone()),
            new_namespaces::serve(for_namespaces, ctx.clone(), namespace_changes, shutdown.clone()),
            run_controller(
                RULE_CONTROLLER,
                rule_controller,
                ctx.clone(),
                shutdown.clone(),
                move |rule, ctx| { reconcile(rule, ctx, for_rules.clone()) }
            ),
            run_controller(
                SYNC_CONTROLLER,
                sync_controller,
                ctx.clone(),
                shutdown.clone(),
                move |sync, ctx| { reconcile(sync, ctx, for_syncs.clone()) }
            ),
            run_controller(
                SECRET_SYNC_CONTROLLER,
                secret_sync_controller,
                ctx,
                shutdown.clone(),
                move |sync, ctx| { reconcile(sync, ctx, for_secret_syncs.clone()) }
            ),
        )
    };
    // A controller told to stop before its first list completes waits for that list for
    // ever; nothing has run yet then, so there is nothing to wait for.
    let stopped_before_start = async {
        shutdown.clone().await;
        if engine.router.rules.is_ready() {
            std::future::pending::<()>().await;
        }
    };
    tokio::select! {
        _ = controllers => {}
        () = stopped_before_start => {}
    }
    if let Some(engine) = Arc::into_inner(engine) {
        engine.caches.join().await;
    }
    Ok(())
}

/// The objects of one rule kind, read through a guard, as a stream for its controller and
/// the store it fills, with a flag set when the first list is complete; `revision` counts
/// the changes made to the store. The controller hears only of changes its passes depend on
/// ([`pass_inputs`]); the store holds every change.
#[allow(clippy::type_complexity)]
fn watch_rules<R: RuleObject>(
    client: &kube::Client,
    revision: &StoreRevision,
) -> (
    (impl futures::Stream<Item = Result<Guarded<R>, watcher::Error>> + Send + 'static, Store<Guarded<R>>),
    FirstList,
) {
    let (store, writer) = reflector::store();
    let synced = FirstList::default();
    let events = reflector::reflector(
        writer,
        crate::runtime::watch::watcher(
            Api::<Guarded<R>>::all(client.clone()),
            crate::runtime::trim::tenant_objects_watch(),
        )
        .default_backoff()
        .modify(crate::runtime::trim::keep_no_metadata_extras),
    );
    let objects = synced
        .track(revision.track(events))
        .applied_objects()
        .predicate_filter(pass_inputs, PredicateConfig::default());
    ((objects, store), synced)
}

/// What a pass depends on in the rule object itself: its identity, its spec (generation),
/// its finalizers and whether it is being deleted. Not its status, which a pass writes: each
/// status write would start another pass at once, before the copy watch has even delivered
/// the writes of the one before. Without a generation, every change counts.
fn pass_inputs<K: Resource>(object: &K) -> Option<u64> {
    use std::hash::{Hash, Hasher};
    let meta = object.meta();
    let mut hasher = std::hash::DefaultHasher::new();
    meta.uid.hash(&mut hasher);
    match meta.generation {
        Some(generation) => generation.hash(&mut hasher),
        None => meta.resource_version.hash(&mut hasher),
    }
    meta.finalizers.hash(&mut hasher);
    meta.deletion_timestamp.is_some().hash(&mut hasher);
    Some(hasher.finish())
}

/// Deletes copies whose rule is gone (and a ConfigMapSync's orphans whose destination no
/// longer consents) once the caches are ready, then every
/// [`ORPHAN_SWEEP_INTERVAL`], until shutdown. The sweep reads only the caches.
async fn collect_orphans(engine: Arc<Engine>, ctx: Arc<Context>, shutdown: impl Future<Output = ()> + Send) {
    let sweeps = async {
        if engine.ready().await.is_err() {
            return;
        }
        loop {
            engine.collect_orphans(&ctx).await;
            tokio::time::sleep(ORPHAN_SWEEP_INTERVAL).await;
        }
    };
    tokio::select! {
        () = sweeps => {}
        () = shutdown => {}
    }
    drop(engine);
}

/// One pass for one rule: its copies made right, or removed when it is being deleted.
async fn reconcile<R: RuleObject>(
    guarded: Arc<Guarded<R>>,
    ctx: Arc<Context>,
    engine: Arc<Engine>,
) -> Result<Action, Error> {
    engine.ready().await?;
    match &guarded.0 {
        Ok(object) => reconcile_rule(Arc::new(object.clone()), &ctx, &engine).await,
        Err(invalid) => reconcile_unreadable::<R>(invalid, &guarded.object_ref(&()), &ctx, &engine).await,
    }
}

async fn reconcile_rule<R: RuleObject>(
    object: Arc<R>,
    ctx: &Context,
    engine: &Engine,
) -> Result<Action, Error> {
    let api = object.api(ctx.client.clone());
    // kube-runtime's helper adds the finalizer first (a JSON patch that tests the list it
    // read, so a concurrent change fails it and the next reconcile reads again); the write
    // comes back as a watch event, which starts the first real pass.
    finalizer(&api, FINALIZER, object, move |event| async move {
        match event {
            finalizer::Event::Apply(object) => engine.sync(ctx, object.as_ref()).await,
            finalizer::Event::Cleanup(object) => {
                if let Some(note) = object.copies_left_behind(&ctx.settings) {
                    let reference = object.object_ref(&());
                    ctx.recorder
                        .record(&reference, EventType::Warning, "Replicate", "CopiesLeftBehind", note)
                        .await;
                }
                let uid = object.meta().uid.as_deref().unwrap_or_default();
                engine.cleanup(ctx, &object.rule_id(), uid, object.deletion_policy()).await
            }
        }
    })
    .await
    .map_err(|error| Error::Finalizer(Box::new(error)))
}

/// An object kopper cannot read (its stored form no longer fits the schema) keeps its
/// copies and gets a Warning; deleting it still removes them and releases it. Meanwhile its
/// copies hold their places, and a ConfigMapSync's go where their consent is gone, as those
/// of a rule refused for its shape ([`model::KeptRules`]).
async fn reconcile_unreadable<R: RuleObject>(
    invalid: &InvalidObject,
    reference: &ObjectReference,
    ctx: &Context,
    engine: &Engine,
) -> Result<Action, Error> {
    let meta = &invalid.metadata;
    let ours = meta.finalizers.iter().flatten().any(|f| f == FINALIZER);
    if meta.deletion_timestamp.is_none() || !ours {
        let note =
            format!("kopper cannot read this object, so its copies are left as they are: {}", invalid.error);
        ctx.recorder.record(reference, EventType::Warning, "Replicate", "InvalidObject", note).await;
        return Ok(Action::await_change());
    }
    // Its deletion policy cannot be read either: its copies go, as by default.
    engine
        .cleanup(ctx, &R::id_of(meta), meta.uid.as_deref().unwrap_or_default(), DeletionPolicy::Delete)
        .await
        .map_err(|error| Error::Finalizer(Box::new(finalizer::Error::CleanupFailed(error))))?;
    remove_finalizer::<R>(&ctx.client, meta, &ctx.settings.field_manager_for(FIELD_MANAGER_NAME))
        .await
        .map_err(Error::RemoveFinalizer)?;
    Ok(Action::await_change())
}

/// Removes kopper's finalizer from an object that cannot be read as `R`, through the
/// untyped API. kube's `finalizer` helper, which every other path uses, needs the object
/// deserialized as `R`; an object whose stored form no longer fits the schema is not, and
/// without this its deletion would wait on kopper for ever.
async fn remove_finalizer<R: RuleObject>(
    client: &kube::Client,
    meta: &ObjectMeta,
    field_manager: &str,
) -> Result<(), kube::Error> {
    let resource = ApiResource::erase::<R>(&());
    let api: Api<DynamicObject> = match &meta.namespace {
        Some(namespace) => Api::namespaced_with(client.clone(), namespace, &resource),
        None => Api::all_with(client.clone(), &resource),
    };
    let finalizers: Vec<&String> = meta.finalizers.iter().flatten().filter(|f| *f != FINALIZER).collect();
    let patch = serde_json::json!({
        "metadata": { "finalizers": finalizers, "resourceVersion": meta.resource_version }
    });
    let name = meta.name.as_deref().unwrap_or_default();
    let params = PatchParams { field_manager: Some(field_manager.to_owned()), ..PatchParams::default() };
    api.patch(name, &params, &Patch::Merge(patch)).await.map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controllers::replication::apply::{EscalationRefused, WriteError};
    use crate::controllers::replication::model::{CopyKey, ObjectKind};
    use crate::runtime::controller::{BACKOFF_MAX, retry_delay};

    #[test]
    fn a_pass_refused_as_an_escalation_waits_the_permanent_delay_and_a_failed_write_backs_off() {
        let key = CopyKey { kind: ObjectKind::ConfigMap, namespace: "team-a".into(), name: "exec".into() };
        let pass_failed = |error: SyncError| Error::Finalizer(Box::new(finalizer::Error::ApplyFailed(error)));
        let refused = pass_failed(SyncError::Escalation {
            count: 1,
            first: Box::new(EscalationRefused { key: key.clone(), reason: "attempting to grant".into() }),
        });
        assert!(refused.is_permanent());
        for attempt in [1, 2, 3] {
            assert_eq!(retry_delay(refused.is_permanent(), attempt, 0.5), BACKOFF_MAX, "attempt {attempt}");
        }
        let failed = pass_failed(SyncError::Write {
            count: 1,
            first: Box::new(WriteError::NotServed { key, kind: "Role".into() }),
        });
        assert!(!failed.is_permanent());
        assert!(retry_delay(failed.is_permanent(), 1, 0.5) < std::time::Duration::from_secs(2));
    }

    fn rule(yaml_metadata: &str, status: &str) -> ReplicationRule {
        let yaml = format!(
            "apiVersion: kopper.dev/v1alpha1\nkind: ReplicationRule\nmetadata: {yaml_metadata}\n\
             spec: {{kind: ConfigMap, namespaces: [src], selector: {{matchLabels: {{a: b}}}}}}\nstatus: {status}"
        );
        serde_yaml::from_str(&yaml).unwrap()
    }

    #[test]
    fn a_rule_wakes_its_controller_for_its_spec_identity_finalizers_and_deletion_not_its_status() {
        let base = "{name: r, uid: u1, generation: 1, resourceVersion: '10'}";
        let inputs = |metadata: &str, status: &str| pass_inputs(&rule(metadata, status));
        let before = inputs(base, "{copiesInSync: 1}");
        assert_eq!(
            before,
            inputs("{name: r, uid: u1, generation: 1, resourceVersion: '11'}", "{copiesInSync: 2}"),
            "a status write starts no pass"
        );
        for changed in [
            "{name: r, uid: u1, generation: 2, resourceVersion: '11'}",
            "{name: r, uid: u2, generation: 1, resourceVersion: '11'}",
            "{name: r, uid: u1, generation: 1, resourceVersion: '11', finalizers: [kopper.dev/replication]}",
            "{name: r, uid: u1, generation: 1, resourceVersion: '11', deletionTimestamp: '2026-01-01T00:00:00Z'}",
        ] {
            assert_ne!(before, inputs(changed, "{copiesInSync: 1}"), "{changed}");
        }
        assert_ne!(
            inputs("{name: r, uid: u1, resourceVersion: '10'}", "{}"),
            inputs("{name: r, uid: u1, resourceVersion: '11'}", "{}"),
            "without a generation, every change counts"
        );
    }
}
