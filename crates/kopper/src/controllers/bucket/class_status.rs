//! The BucketClass side of the Bucket controller: each class's finalizer, held while a
//! Bucket uses the class (so a class can never vanish from under a bucket that must be cleaned
//! up on its backend), and its status (`bucketsUsing`, `Ready`, `Default`). Classes are
//! reconciled when they change, when a Bucket starts or stops using one (the Bucket watch
//! wakes them, see [`ClassWakes`]), and every few minutes.
//!
//! Buckets are counted from the Bucket controller's cache, after its first list (a
//! [`FirstList`], which any number of class reconciles can wait on): a class is never released
//! on an empty cache.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Api, Resource, ResourceExt};
use serde_json::json;

use super::backends::Backends;
use super::class::{self, CLASS_FINALIZER};
use super::types::{Bucket, BucketClass, BucketClassStatus};
use super::{Error, NAME};
use crate::runtime::Context;
use crate::runtime::cache::FirstList;

/// Name of the class reconciles in metrics, logs and `/readyz`.
pub const CLASS_CONTROLLER: &str = "bucket-class";
/// How often a class is looked at without a change.
const RESYNC: Duration = Duration::from_secs(120);
/// How long a class reconcile waits for the Bucket cache's first list.
const BUCKETS_LISTED_WAIT: Duration = Duration::from_secs(5);
/// When a class whose reconcile found the Bucket cache not yet listed is looked at again.
const BUCKETS_LISTED_RETRY: Duration = Duration::from_secs(1);

/// What a class reconcile reads besides the class.
pub struct ClassShared {
    pub buckets: Store<Bucket>,
    /// Marked once `buckets` has had its first list.
    pub buckets_listed: FirstList,
    pub classes: Store<BucketClass>,
    pub backends: Arc<Backends>,
}

/// One class: its finalizer, then its status.
pub async fn reconcile(
    class: Arc<BucketClass>,
    ctx: Arc<Context>,
    shared: Arc<ClassShared>,
) -> Result<Action, Error> {
    // Never decide on a cache that has not seen every Bucket yet. The wait is bounded, so a
    // reconcile never holds its slot (nor shutdown) while the Bucket watch cannot list.
    let listed = tokio::time::timeout(BUCKETS_LISTED_WAIT, shared.buckets_listed.wait()).await;
    if !matches!(listed, Ok(true)) {
        return Ok(Action::requeue(BUCKETS_LISTED_RETRY));
    }
    let name = class.name_any();
    let classes = shared.classes.state();
    shared.backends.keep_only(&classes.iter().map(|class| class.name_any()).collect::<Vec<_>>());
    let default =
        class::default_class(classes.iter().map(|class| class.as_ref())).map(|class| class.name_any());
    let deleting = class.meta().deletion_timestamp.is_some();
    let users = shared
        .buckets
        .state()
        .iter()
        .filter(|bucket| class::holds(bucket, &name, default.as_deref(), deleting))
        .count();
    hold_while_used(&ctx, &class, users > 0).await?;
    if class.meta().deletion_timestamp.is_some() && users == 0 {
        shared.backends.forget(&name);
        return Ok(Action::await_change());
    }
    let credentials = match class.spec.backend.as_ref().and_then(|backend| backend.credentials_secret.as_ref()) {
        None if class.spec.backend.is_none() && shared.backends.default_provider().is_none() => Err((
            "ProviderNotConfigured",
            "this class has no spec.backend and kopper runs without an S3 provider (--s3-region): give the class \
             a backend, or set kopper's flags"
                .to_owned(),
        )),
        None => Ok(()),
        Some(secret) => match shared.backends.credentials(&ctx.client, &name, secret).await {
            Ok(_) => Ok(()),
            Err(Error::Wait { message, .. }) => Err(("CredentialsNotUsable", message)),
            Err(error) => return Err(error),
        },
    };
    let winner = class::is_default(&class).then_some(default.as_deref()).flatten();
    let desired = desired_status(&class, users, credentials, class::is_default(&class).then_some(winner));
    write_status(&ctx, &class, desired).await?;
    Ok(Action::requeue(RESYNC))
}

/// Adds the finalizer while Buckets use the class, and takes it off when none does. The
/// write is conditioned on the class's resourceVersion, so it never undoes a change it has not
/// seen. A class being deleted gets no new finalizer (the API server refuses one); a Bucket
/// pass never starts using a class being deleted.
async fn hold_while_used(ctx: &Context, class: &BucketClass, used: bool) -> Result<(), Error> {
    let held = class.finalizers().iter().any(|finalizer| finalizer == CLASS_FINALIZER);
    let deleting = class.meta().deletion_timestamp.is_some();
    let finalizers: Vec<String> = match (used, held) {
        (true, false) if !deleting => {
            class.finalizers().iter().cloned().chain([CLASS_FINALIZER.to_owned()]).collect()
        }
        (false, true) => class.finalizers().iter().filter(|f| *f != CLASS_FINALIZER).cloned().collect(),
        _ => return Ok(()),
    };
    patch_finalizers(ctx, class, finalizers).await
}

/// Puts the class finalizer on `class` for a Bucket about to use it (the Bucket pass does
/// this before it makes anything on the class's backend).
///
/// Many Buckets of a new class start at once, each from the same cached class: a write that
/// meets a newer class (409) waits for the cache (`classes`) to show that newer class, and is
/// done if another pass held it meanwhile, else writes again from it.
///
/// A Bucket not yet `bound` to the class is refused when the newer class is being deleted.
pub async fn hold_for_bucket(
    ctx: &Context,
    classes: &Store<BucketClass>,
    class: &BucketClass,
    bound: bool,
) -> Result<(), Error> {
    let holds = |class: &BucketClass| class.finalizers().iter().any(|finalizer| finalizer == CLASS_FINALIZER);
    if holds(class) {
        return Ok(());
    }
    let with = |class: &BucketClass| {
        class.finalizers().iter().cloned().chain([CLASS_FINALIZER.to_owned()]).collect()
    };
    let conflict = match patch_finalizers(ctx, class, with(class)).await {
        Err(Error::Kube { source: kube::Error::Api(status), .. }) if status.code == 409 => status,
        done => return done,
    };
    let seen = class.resource_version();
    let reference = ObjectRef::new(&class.name_any());
    let deadline = tokio::time::Instant::now() + NEWER_CLASS_WAIT;
    while tokio::time::Instant::now() < deadline {
        if let Some(newer) = classes.get(&reference).filter(|newer| newer.resource_version() != seen) {
            if newer.meta().deletion_timestamp.is_some() && !bound {
                return Err(Error::blocked("ClassNotFound", class::class_being_deleted(&class.name_any())));
            }
            if holds(&newer) || newer.meta().deletion_timestamp.is_some() {
                return Ok(());
            }
            return patch_finalizers(ctx, &newer, with(&newer)).await;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Err(Error::Kube {
        what: format!("writing the finalizers of BucketClass {}", class.name_any()),
        source: kube::Error::Api(conflict),
    })
}

/// How long a Bucket pass waits for the cache to show a class changed under its write.
const NEWER_CLASS_WAIT: Duration = Duration::from_secs(2);

async fn patch_finalizers(ctx: &Context, class: &BucketClass, finalizers: Vec<String>) -> Result<(), Error> {
    let api = Api::<BucketClass>::all(ctx.client.clone());
    let patch = json!({"metadata": {"resourceVersion": class.resource_version(), "finalizers": finalizers}});
    let params =
        PatchParams { field_manager: Some(ctx.settings.field_manager_for(NAME)), ..Default::default() };
    api.patch(&class.name_any(), &params, &Patch::Merge(patch))
        .await
        .map_err(Error::kube(format!("writing the finalizers of BucketClass {}", class.name_any())))?;
    Ok(())
}

/// The class's status for `users` Buckets, whether its credentials are usable (the reason
/// and message when not), and, for a class annotated as the default, the name of the default
/// in force.
pub fn desired_status(
    class: &BucketClass,
    users: usize,
    credentials: Result<(), (&'static str, String)>,
    default_in_force: Option<Option<&str>>,
) -> BucketClassStatus {
    let old = class.status.clone().unwrap_or_default();
    let generation = class.meta().generation;
    let mut conditions = Vec::new();
    let (status, reason, message) = match credentials {
        Ok(()) => ("True", "Ready", "kopper can use this class's backend".to_owned()),
        Err((reason, message)) => ("False", reason, message),
    };
    conditions.push(condition(&old, "Ready", status, reason, &message, generation));
    if let Some(winner) = default_in_force {
        let name = class.name_any();
        let condition = match winner {
            Some(winner) if winner != name => condition(
                &old,
                "Default",
                "False",
                "OlderDefaultExists",
                &format!(
                    "BucketClass {winner} is also annotated {} and is older, so it is the default: remove the \
                     annotation from one of them",
                    class::DEFAULT_CLASS_ANNOTATION
                ),
                generation,
            ),
            _ => condition(
                &old,
                "Default",
                "True",
                "Default",
                "Buckets that name no class use this one",
                generation,
            ),
        };
        conditions.push(condition);
    }
    BucketClassStatus {
        observed_generation: generation,
        buckets_using: u32::try_from(users).unwrap_or(u32::MAX),
        conditions,
    }
}

/// A condition, keeping its transition time while its status stays the same.
fn condition(
    old: &BucketClassStatus,
    type_: &str,
    status: &str,
    reason: &str,
    message: &str,
    generation: Option<i64>,
) -> Condition {
    let previous = old.conditions.iter().find(|c| c.type_ == type_ && c.status == status);
    Condition {
        type_: type_.to_owned(),
        status: status.to_owned(),
        reason: reason.to_owned(),
        message: message.to_owned(),
        observed_generation: generation,
        last_transition_time: previous
            .map(|c| c.last_transition_time.clone())
            .unwrap_or_else(|| Time(k8s_openapi::jiff::Timestamp::now())),
    }
}

/// Writes `desired` unless the class already has it.
async fn write_status(ctx: &Context, class: &BucketClass, desired: BucketClassStatus) -> Result<(), Error> {
    if class.status.as_ref() == Some(&desired) {
        return Ok(());
    }
    let api = Api::<BucketClass>::all(ctx.client.clone());
    let params =
        PatchParams { field_manager: Some(ctx.settings.field_manager_for(NAME)), ..Default::default() };
    let patch = json!({"status": desired});
    api.patch_status(&class.name_any(), &params, &Patch::Merge(patch))
        .await
        .map_err(Error::kube(format!("writing the status of BucketClass {}", class.name_any())))?;
    Ok(())
}

/// Tells the class reconciles which classes a Bucket event concerns: the class a Bucket
/// counts against, when it changes, and when the Bucket goes. One small entry per Bucket.
#[derive(Default)]
pub struct ClassWakes {
    seen: HashMap<String, Option<String>>,
}

impl ClassWakes {
    /// The classes to look at again after `bucket` was seen (`gone`: deleted), given the
    /// default class in force.
    pub fn after(
        &mut self,
        bucket: &Bucket,
        gone: bool,
        fallback: &class::Fallback,
    ) -> Vec<ObjectRef<BucketClass>> {
        let uid = bucket.uid().unwrap_or_default();
        let now =
            if gone { None } else { class::counted_binding(bucket, fallback).name().map(str::to_owned) };
        let before = if gone {
            self.seen.remove(&uid).flatten()
        } else {
            self.seen.insert(uid, now.clone()).flatten()
        };
        if before == now && !gone {
            return Vec::new();
        }
        let mut wake: Vec<String> = before.into_iter().chain(now).collect();
        wake.dedup();
        wake.iter().map(|name| ObjectRef::new(name)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controllers::bucket::types::BucketClassSpec;

    fn class(name: &str) -> BucketClass {
        let mut class = BucketClass::new(name, BucketClassSpec::built_in());
        class.metadata.generation = Some(3);
        class
    }

    fn bucket(uid: &str, class_name: Option<&str>) -> Bucket {
        let mut bucket: Bucket = serde_json::from_value(json!({
            "apiVersion": "kopper.dev/v1alpha1", "kind": "Bucket",
            "metadata": {"name": "b", "namespace": "t", "uid": uid}, "spec": {"className": class_name},
        }))
        .unwrap();
        bucket.spec.class_name = class_name.map(str::to_owned);
        bucket
    }

    #[test]
    fn a_class_reports_its_users_and_whether_it_is_the_default_in_force() {
        let status = desired_status(&class("std"), 2, Ok(()), Some(Some("std")));
        assert_eq!(status.buckets_using, 2);
        assert_eq!(status.observed_generation, Some(3));
        let types: Vec<_> = status.conditions.iter().map(|c| (c.type_.as_str(), c.status.as_str())).collect();
        assert_eq!(types, [("Ready", "True"), ("Default", "True")]);
        let loser = desired_status(&class("new"), 0, Ok(()), Some(Some("std")));
        assert_eq!(loser.conditions[1].reason, "OlderDefaultExists");
        assert!(loser.conditions[1].message.contains("BucketClass std"));
        let plain = desired_status(&class("x"), 0, Err(("CredentialsNotUsable", "no Secret".into())), None);
        assert_eq!(plain.conditions.len(), 1);
        assert_eq!(
            (plain.conditions[0].status.as_str(), plain.conditions[0].reason.as_str()),
            ("False", "CredentialsNotUsable")
        );
    }

    #[test]
    fn an_unchanged_status_keeps_its_transition_times_and_so_is_not_written_again() {
        let mut written = class("std");
        written.status = Some(desired_status(&written, 1, Ok(()), None));
        assert_eq!(written.status, Some(desired_status(&written, 1, Ok(()), None)));
    }

    #[test]
    fn a_class_is_woken_when_a_bucket_starts_or_stops_using_it() {
        let mut wakes = ClassWakes::default();
        let none = class::Fallback::BuiltIn;
        let names = |refs: Vec<ObjectRef<BucketClass>>| refs.into_iter().map(|r| r.name).collect::<Vec<_>>();
        assert_eq!(names(wakes.after(&bucket("u1", Some("a")), false, &none)), ["a"]);
        assert!(wakes.after(&bucket("u1", Some("a")), false, &none).is_empty(), "nothing changed");
        assert_eq!(
            names(wakes.after(&bucket("u2", None), false, &class::Fallback::Class("std".into()))),
            ["std"],
            "the default"
        );
        assert_eq!(names(wakes.after(&bucket("u1", Some("a")), true, &none)), ["a"], "gone");
        assert!(
            wakes.after(&bucket("u3", None), false, &none).is_empty(),
            "the built-in class has no object"
        );
    }
}
