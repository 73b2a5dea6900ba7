//! Which BucketClass a Bucket uses and what the class allows it: pure decisions, tested
//! without a server. The I/O around them (the class's provider, its finalizer, its status)
//! is in [`super::backends`] and [`super::class_status`].
//!
//! A Bucket is bound to a class once kopper has recorded a bucket for it: the class named
//! in `status.className`, or kopper's built-in class when status names a bucket and no class
//! (a Bucket made before classes existed). A bound Bucket stays with its class whatever the
//! default becomes, so its bucket is cleaned up on the backend it was made on. An unbound
//! Bucket takes `spec.className`, else the default class, else the built-in one.

use std::cmp::Ordering;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;

use super::types::{AccessMode, Backend, Bucket, BucketClass, BucketClassSpec, ClassVersioning};

/// The annotation that makes a BucketClass the default, as `storageclass.kubernetes.io/is-default-class`
/// does for StorageClasses.
pub const DEFAULT_CLASS_ANNOTATION: &str = "kopper.dev/is-default-class";
/// Held on a BucketClass while Buckets use it, so that they can always be cleaned up on its
/// backend.
pub const CLASS_FINALIZER: &str = "kopper.dev/bucket-class-in-use";
/// The backend identity of AWS itself (no custom endpoint).
pub const AWS: &str = "aws";

/// The class a Bucket uses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Binding {
    /// A BucketClass, by name.
    Named(String),
    /// kopper's built-in class: its flags' provider, nothing enforced.
    BuiltIn,
}

impl Binding {
    pub fn name(&self) -> Option<&str> {
        match self {
            Binding::Named(name) => Some(name),
            Binding::BuiltIn => None,
        }
    }

    /// For messages: `BucketClass x`, or kopper's built-in class.
    pub fn describe(&self) -> String {
        match self {
            Binding::Named(name) => format!("BucketClass {name}"),
            Binding::BuiltIn => "kopper's built-in class (its flags)".to_owned(),
        }
    }
}

/// Whether `class` is annotated as the default.
pub fn is_default(class: &BucketClass) -> bool {
    class.annotations().get(DEFAULT_CLASS_ANNOTATION).is_some_and(|value| value == "true")
}

/// The default class among `classes`: the oldest annotated one not being deleted (by
/// creation time, then name), so that two defaults never split Buckets between them and every
/// replica picks the same one.
pub fn default_class<'a>(classes: impl IntoIterator<Item = &'a BucketClass>) -> Option<&'a BucketClass> {
    classes
        .into_iter()
        .filter(|class| is_default(class) && class.metadata.deletion_timestamp.is_none())
        .min_by(|a, b| {
            by_age(
                a.metadata.creation_timestamp.as_ref(),
                &a.name_any(),
                b.metadata.creation_timestamp.as_ref(),
                &b.name_any(),
            )
        })
}

/// Oldest first, then by name; an object without a creation time (never from the API
/// server) sorts last.
pub fn by_age(a_created: Option<&Time>, a_name: &str, b_created: Option<&Time>, b_name: &str) -> Ordering {
    let key = |created: Option<&Time>| created.map(|time| time.0);
    match (key(a_created), key(b_created)) {
        (Some(a), Some(b)) => a.cmp(&b),
        (Some(_), None) => Ordering::Less,
        (None, Some(_)) => Ordering::Greater,
        (None, None) => Ordering::Equal,
    }
    .then_with(|| a_name.cmp(b_name))
}

/// The class status binds the Bucket to, if any: the recorded class, or the built-in class for
/// a bucket recorded without one (made before classes, or with the built-in class).
pub fn recorded_binding(bucket: &Bucket) -> Option<Binding> {
    let status = bucket.status.as_ref()?;
    match (&status.class_name, &status.bucket_name) {
        (Some(name), _) => Some(Binding::Named(name.clone())),
        (None, Some(_)) => Some(Binding::BuiltIn),
        (None, None) => None,
    }
}

/// Why a Bucket cannot use the class it asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    pub reason: &'static str,
    pub message: String,
}

/// What an unbound Bucket that names no class is made with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fallback {
    /// The default class in force, by name.
    Class(String),
    /// No BucketClass exists at all: kopper's built-in class, so that installs without classes
    /// work as they did before classes.
    BuiltIn,
    /// BucketClasses exist and none is the default (or the default is being deleted, or being
    /// switched): such a Bucket waits rather than binding to the built-in class for good.
    NoDefault,
}

impl Fallback {
    /// The fallback given every BucketClass there is: the default class in force, else the
    /// built-in class when there is no class at all.
    pub fn of<'a>(classes: impl IntoIterator<Item = &'a BucketClass>) -> Fallback {
        let classes: Vec<&BucketClass> = classes.into_iter().collect();
        match default_class(classes.iter().copied()) {
            Some(class) => Fallback::Class(class.name_any()),
            None if classes.is_empty() => Fallback::BuiltIn,
            None => Fallback::NoDefault,
        }
    }

    /// The default class's name, if one is in force.
    pub fn name(&self) -> Option<&str> {
        match self {
            Fallback::Class(name) => Some(name),
            Fallback::BuiltIn | Fallback::NoDefault => None,
        }
    }
}

/// The class the Bucket uses: the one it is bound to, else `spec.className`, else the
/// `fallback` ([`Fallback`]). A `spec.className` other than the bound class is refused:
/// kopper does not move buckets between classes (the schema refuses a change of a set name;
/// this also covers a name set after the bucket was made).
pub fn wanted_binding(bucket: &Bucket, fallback: &Fallback) -> Result<Binding, Refusal> {
    let asked = bucket.spec.class_name.as_deref();
    match (asked, recorded_binding(bucket)) {
        (Some(asked), Some(bound)) if bound.name() != Some(asked) => Err(Refusal {
            reason: "ClassNameImmutable",
            message: format!(
                "spec.className {asked:?} is not the class this Bucket's bucket was made with ({}): kopper does \
                 not move a bucket between classes or backends. Set spec.className back (or remove it), or \
                 create a new Bucket with class {asked:?} and copy the data (nothing was changed)",
                bound.describe()
            ),
        }),
        (_, Some(bound)) => Ok(bound),
        (Some(asked), None) => Ok(Binding::Named(asked.to_owned())),
        (None, None) => match fallback {
            Fallback::Class(name) => Ok(Binding::Named(name.clone())),
            Fallback::BuiltIn => Ok(Binding::BuiltIn),
            Fallback::NoDefault => Err(Refusal {
                reason: "NoDefaultClass",
                message: format!(
                    "this Bucket names no class (spec.className) and no BucketClass is the default: set \
                     spec.className to one of the classes (kubectl get bucketclasses), or ask a cluster admin to \
                     annotate one {DEFAULT_CLASS_ANNOTATION}=\"true\"; nothing was created"
                ),
            }),
        },
    }
}

/// The class a Bucket counts against, for quotas and `bucketsUsing`: [`wanted_binding`], or,
/// when that refuses another name, the class its bucket was made with.
pub fn counted_binding(bucket: &Bucket, fallback: &Fallback) -> Binding {
    wanted_binding(bucket, fallback).unwrap_or_else(|_| recorded_binding(bucket).unwrap_or(Binding::BuiltIn))
}

/// Whether `bucket` holds the class `name` in use: bound to it, naming it, or (unbound and
/// naming none) about to take it as the default. Once the class is `deleting`, only Buckets
/// bound to it hold it: one that merely names it gets nothing from it any more, so a tenant
/// cannot keep an admin's class from going by naming it.
pub fn holds(bucket: &Bucket, name: &str, default: Option<&str>, deleting: bool) -> bool {
    let bound = recorded_binding(bucket);
    if bound.as_ref().and_then(Binding::name) == Some(name) {
        return true;
    }
    !deleting
        && (bucket.spec.class_name.as_deref() == Some(name)
            || (bound.is_none() && bucket.spec.class_name.is_none() && default == Some(name)))
}

/// What a Bucket asks for that `class` forbids, as the Ready message: the field, the class
/// and the fix. `None` when the class allows all of it.
pub fn forbidden(bucket: &Bucket, class_name: &str, class: &BucketClassSpec) -> Option<String> {
    let mode = bucket.access_mode();
    if !class.allowed_access_modes.contains(&mode) {
        let allowed: Vec<&str> = class.allowed_access_modes.iter().map(|mode| mode_name(*mode)).collect();
        return Some(format!(
            "spec.access.mode {} is not allowed by BucketClass {class_name} (allowedAccessModes: {}): use {}, or a \
             class that allows {}",
            mode_name(mode),
            allowed.join(", "),
            allowed.join(" or "),
            mode_name(mode)
        ));
    }
    if let (Some(enforced), Some(asked)) = (class.versioning, bucket.spec.versioning) {
        let wanted = enforced == ClassVersioning::Enabled;
        if asked != wanted {
            return Some(format!(
                "spec.versioning {asked} conflicts with BucketClass {class_name}, which sets versioning {enforced:?} \
                 for every bucket: remove spec.versioning (or set it to {wanted}), or use another class"
            ));
        }
    }
    if let Some(key) = bucket.spec.tags.keys().find(|key| class.tags.contains_key(*key)) {
        return Some(format!(
            "spec.tags sets {key:?}, a tag BucketClass {class_name} sets on every bucket: remove it from spec.tags \
             (the class's value applies)"
        ));
    }
    None
}

/// Most tags a bucket may have besides kopper's own four (S3 allows 50).
pub const MAX_USER_TAGS: usize = 46;

/// The refusal of a Bucket whose tags and its class's together exceed what S3 allows.
pub fn too_many_tags(bucket: &Bucket, binding: &Binding, class: &BucketClassSpec) -> Option<String> {
    let (own, added) = (bucket.spec.tags.len(), class.tags.len());
    (own + added > MAX_USER_TAGS).then(|| {
        format!(
            "spec.tags has {own} tags and {} adds {added}: S3 allows {MAX_USER_TAGS} besides kopper's own, so \
             remove {} from spec.tags",
            binding.describe(),
            own + added - MAX_USER_TAGS
        )
    })
}

fn mode_name(mode: AccessMode) -> &'static str {
    match mode {
        AccessMode::Key => "Key",
        AccessMode::ServiceAccount => "ServiceAccount",
    }
}

/// A Bucket competing for its class's places in its namespace.
#[derive(Clone, Copy, Debug)]
pub struct Contender<'a> {
    pub bucket: &'a Bucket,
    /// Bound to the class already: status records it, or this replica admitted it and its
    /// status write is not in the cache yet.
    pub bound: bool,
}

/// How many of `peers` (every Bucket of the class in `bucket`'s namespace, `bucket` among them
/// or not) rank ahead of `bucket` for the class's places. Bound Buckets rank ahead of unbound
/// ones, so a Bucket that already has its place never loses it to one created in the same
/// second with a smaller name; then creation time, then name, so the decision is the same in
/// every pass and every replica.
pub fn ranked_ahead<'a>(bucket: Contender<'_>, peers: impl IntoIterator<Item = Contender<'a>>) -> usize {
    let name = bucket.bucket.name_any();
    let created = bucket.bucket.metadata.creation_timestamp.as_ref();
    peers
        .into_iter()
        .filter(|peer| peer.bucket.name_any() != name)
        .filter(|peer| match (peer.bound, bucket.bound) {
            (true, false) => true,
            (false, true) => false,
            _ => {
                by_age(
                    peer.bucket.metadata.creation_timestamp.as_ref(),
                    &peer.bucket.name_any(),
                    created,
                    &name,
                ) == Ordering::Less
            }
        })
        .count()
}

/// The refusal of a Bucket with `ahead` Buckets of class `class` ranked before it in
/// `namespace`, where the class allows `max`.
pub fn quota_exceeded(class: &str, max: u32, ahead: usize, namespace: &str) -> String {
    format!(
        "BucketClass {class} allows {max} Buckets per namespace (maxBucketsPerNamespace), and {ahead} other \
         Buckets of the class in namespace {namespace} come first (those already made, then the oldest): delete \
         one of them (this Bucket then proceeds), or use another class; nothing was created"
    )
}

/// The refusal of an unbound Bucket whose class is being deleted.
pub fn class_being_deleted(class: &str) -> String {
    format!(
        "BucketClass {class} is being deleted, so no new bucket is made with it: set spec.className to another \
         class; nothing was created"
    )
}

/// The refusal of a Bucket whose class's backend is no longer the one its bucket is on.
pub fn backend_changed(bucket: &str, recorded: &str, class: &Binding, now: &str) -> String {
    format!(
        "Bucket {bucket}'s bucket is on backend {recorded}, and {} now uses backend {now}: kopper does not move \
         buckets between backends, and neither makes nor deletes anything for this Bucket meanwhile. Set the \
         class's spec.backend (and its credentials) back, or create a new Bucket and copy the data",
        class.describe()
    )
}

/// What a tenant is told when its class's backend cannot be used: the details (the Secret, its
/// namespace) are in the class's status, which cluster admins read; tenants learn only who must
/// act.
pub fn class_not_ready(class: &str) -> String {
    format!(
        "BucketClass {class} is not ready (kopper cannot use its backend): a cluster admin must check the \
         class's status (kubectl get bucketclass {class} -o yaml); this Bucket proceeds once it is ready"
    )
}

/// The identity of a backend, recorded with each bucket: its S3 endpoint (or [`AWS`]), its
/// region and whose credentials kopper uses there, so that pointing a class at another
/// account (another credentials Secret) or region is seen as another backend, not as the
/// same one ([`BackendChanged`](super)). The credentials are named by a digest of the Secret's
/// name, never by its content: rotating the key in the Secret is not a change, and tenants,
/// who read the identity in their Bucket's status, learn no name from kopper's namespace.
/// `flags` is the endpoint and region of kopper's flags, for a class without a backend.
pub fn backend_identity(backend: Option<&Backend>, flags: (Option<&str>, &str)) -> String {
    let (endpoint, region, credentials) = match backend {
        Some(backend) => (
            backend.endpoint.as_deref(),
            backend.region.as_str(),
            match &backend.credentials_secret {
                Some(secret) => format!("secret-{}", &super::names::digest_hex(secret)[..12]),
                None => "ambient".to_owned(),
            },
        ),
        None => (flags.0, flags.1, "kopper".to_owned()),
    };
    let endpoint =
        endpoint.map(|endpoint| endpoint.trim_end_matches('/').to_owned()).unwrap_or_else(|| AWS.to_owned());
    format!("{endpoint} region={region} credentials={credentials}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controllers::bucket::types::BucketStatus;
    use k8s_openapi::jiff::Timestamp;
    use serde_json::json;

    fn bucket(name: &str, spec: serde_json::Value, created: i64) -> Bucket {
        let mut bucket: Bucket = serde_json::from_value(json!({
            "apiVersion": "kopper.dev/v1alpha1", "kind": "Bucket",
            "metadata": {"name": name, "namespace": "team"}, "spec": spec,
        }))
        .unwrap();
        bucket.metadata.creation_timestamp =
            Some(Time(Timestamp::from_second(1_800_000_000 + created).unwrap()));
        bucket
    }

    fn class(name: &str, default: bool, created: i64) -> BucketClass {
        let mut class = BucketClass::new(name, BucketClassSpec::built_in());
        if default {
            class.metadata.annotations =
                Some([(DEFAULT_CLASS_ANNOTATION.to_owned(), "true".to_owned())].into());
        }
        class.metadata.creation_timestamp =
            Some(Time(Timestamp::from_second(1_800_000_000 + created).unwrap()));
        class
    }

    fn spec(value: serde_json::Value) -> BucketClassSpec {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn the_oldest_default_class_wins_and_one_being_deleted_is_none() {
        let classes =
            [class("b", true, 10), class("a", true, 10), class("old", true, 5), class("plain", false, 1)];
        assert_eq!(default_class(&classes).unwrap().name_any(), "old");
        assert_eq!(default_class(&classes[..2]).unwrap().name_any(), "a", "same age: by name");
        let mut deleting = class("old", true, 5);
        deleting.metadata.deletion_timestamp = Some(Time(Timestamp::now()));
        assert!(default_class([&deleting, &classes[3]]).is_none());
    }

    #[test]
    fn a_bucket_takes_its_named_class_else_the_default_else_the_built_in_one() {
        let std = Fallback::Class("std".into());
        let named = bucket("x", json!({"className": "fast"}), 0);
        assert_eq!(wanted_binding(&named, &std), Ok(Binding::Named("fast".into())));
        let plain = bucket("x", json!({}), 0);
        assert_eq!(wanted_binding(&plain, &std), Ok(Binding::Named("std".into())));
        assert_eq!(wanted_binding(&plain, &Fallback::BuiltIn), Ok(Binding::BuiltIn));
        let refusal = wanted_binding(&plain, &Fallback::NoDefault).unwrap_err();
        assert_eq!(refusal.reason, "NoDefaultClass");
        assert!(
            refusal.message.contains("spec.className") && refusal.message.contains(DEFAULT_CLASS_ANNOTATION)
        );
    }

    #[test]
    fn a_bound_bucket_keeps_its_class_when_the_default_changes() {
        let mut made = bucket("x", json!({}), 0);
        made.status = Some(BucketStatus {
            class_name: Some("std".into()),
            bucket_name: Some("b".into()),
            ..BucketStatus::default()
        });
        assert_eq!(wanted_binding(&made, &Fallback::Class("new".into())), Ok(Binding::Named("std".into())));
        // Made before classes: the built-in class, whatever the default is now.
        let mut old = bucket("x", json!({}), 0);
        old.status = Some(BucketStatus { bucket_name: Some("b".into()), ..BucketStatus::default() });
        assert_eq!(wanted_binding(&old, &Fallback::Class("new".into())), Ok(Binding::BuiltIn));
    }

    #[test]
    fn another_class_for_a_bound_bucket_is_refused_naming_the_field() {
        let mut made = bucket("x", json!({"className": "other"}), 0);
        made.status = Some(BucketStatus {
            class_name: Some("std".into()),
            bucket_name: Some("b".into()),
            ..BucketStatus::default()
        });
        let refusal = wanted_binding(&made, &Fallback::BuiltIn).unwrap_err();
        assert_eq!(refusal.reason, "ClassNameImmutable");
        assert!(refusal.message.contains("spec.className") && refusal.message.contains("BucketClass std"));
        assert_eq!(
            counted_binding(&made, &Fallback::BuiltIn),
            Binding::Named("std".into()),
            "it still counts where it is"
        );
        made.status.as_mut().unwrap().class_name = None;
        assert!(wanted_binding(&made, &Fallback::BuiltIn).unwrap_err().message.contains("built-in"));
    }

    #[test]
    fn a_class_is_held_by_buckets_naming_it_bound_to_it_or_about_to_take_it_as_default() {
        let named = bucket("a", json!({"className": "std"}), 0);
        let plain = bucket("b", json!({}), 0);
        assert!(holds(&named, "std", None, false));
        assert!(holds(&plain, "std", Some("std"), false));
        assert!(!holds(&plain, "std", None, false));
        let mut bound = bucket("c", json!({}), 0);
        bound.status = Some(BucketStatus { class_name: Some("std".into()), ..BucketStatus::default() });
        assert!(holds(&bound, "std", Some("new"), false));
        let mut built_in = bucket("d", json!({}), 0);
        built_in.status = Some(BucketStatus { bucket_name: Some("b".into()), ..BucketStatus::default() });
        assert!(!holds(&built_in, "std", Some("std"), false), "bound to the built-in class");
        // Being deleted: only the Buckets bound to it hold it, not those that name it.
        assert!(holds(&bound, "std", None, true));
        assert!(!holds(&named, "std", None, true), "a tenant naming a class cannot keep it from going");
        assert!(!holds(&plain, "std", Some("std"), true));
    }

    #[test]
    fn what_a_class_forbids_is_refused_naming_the_field_the_class_and_the_fix() {
        let keys_only =
            spec(json!({"allowedAccessModes": ["Key"], "versioning": "Enabled", "tags": {"cost": "1"}}));
        let cases = [
            (
                json!({"access": {"mode": "ServiceAccount", "serviceAccountName": "app"}}),
                "spec.access.mode ServiceAccount",
            ),
            (json!({"versioning": false}), "spec.versioning false"),
            (json!({"tags": {"cost": "2"}}), "spec.tags sets \"cost\""),
        ];
        for (asked, field) in cases {
            let message = forbidden(&bucket("x", asked.clone(), 0), "std", &keys_only).expect("forbidden");
            assert!(message.starts_with(field) && message.contains("BucketClass std"), "{asked}: {message}");
        }
        for allowed in [json!({}), json!({"versioning": true}), json!({"tags": {"team": "a"}})] {
            assert_eq!(forbidden(&bucket("x", allowed, 0), "std", &keys_only), None);
        }
        assert_eq!(
            forbidden(&bucket("x", json!({"versioning": false}), 0), "b", &BucketClassSpec::built_in()),
            None,
            "the built-in class forbids nothing"
        );
    }

    #[test]
    fn a_class_defaults_to_blocking_public_access_and_every_access_mode() {
        let defaulted = spec(json!({}));
        assert!(defaulted.block_public_access);
        assert_eq!(defaulted.allowed_access_modes, [AccessMode::Key, AccessMode::ServiceAccount]);
        assert!(!BucketClassSpec::built_in().block_public_access, "the built-in class enforces nothing");
    }

    #[test]
    fn the_quota_goes_to_the_oldest_buckets_then_by_name() {
        let peers = [bucket("c", json!({}), 1), bucket("a", json!({}), 2), bucket("b", json!({}), 2)];
        let unbound = |bucket| Contender { bucket, bound: false };
        let ahead = |name: &str| {
            let me = peers.iter().find(|peer| peer.name_any() == name).unwrap();
            ranked_ahead(unbound(me), peers.iter().map(unbound))
        };
        assert_eq!((ahead("c"), ahead("a"), ahead("b")), (0, 1, 2), "same age as a, later by name");
        assert_eq!(ranked_ahead(unbound(&peers[2]), [unbound(&peers[2])]), 0, "alone it fits");
    }

    /// Buckets created in the same second rank by name; one that got its place first (bound)
    /// keeps it, so two passes that each saw only part of the others cannot both take it.
    #[test]
    fn a_bound_bucket_ranks_ahead_of_unbound_ones_whatever_their_names() {
        let (a, b, c) = (bucket("a", json!({}), 0), bucket("b", json!({}), 0), bucket("c", json!({}), 0));
        let bound = |bucket| Contender { bucket, bound: true };
        let unbound = |bucket| Contender { bucket, bound: false };
        assert_eq!(ranked_ahead(unbound(&a), [bound(&c), unbound(&b)]), 1, "c holds the place");
        assert_eq!(ranked_ahead(bound(&c), [unbound(&a), unbound(&b)]), 0);
        assert_eq!(ranked_ahead(unbound(&b), [bound(&c), unbound(&a)]), 2);
        let older = bucket("old", json!({}), -5);
        assert_eq!(ranked_ahead(bound(&c), [bound(&older)]), 1, "among bound ones the oldest first");
    }

    /// Every message a tenant reads is one sentence with single spaces (no line continuation
    /// lost), and the quota message counts those ahead, not the limit.
    #[test]
    fn refusal_messages_have_single_spaces_and_the_right_count() {
        let messages = [
            quota_exceeded("small", 1, 3, "team"),
            class_being_deleted("old"),
            backend_changed("b", "http://a region=r credentials=kopper", &Binding::Named("c".into()), "x"),
            class_not_ready("c"),
            wanted_binding(&bucket("x", json!({}), 0), &Fallback::NoDefault).unwrap_err().message,
        ];
        for message in &messages {
            assert!(!message.contains("  "), "{message}");
        }
        assert!(
            messages[0].contains("allows 1 ") && messages[0].contains("and 3 other Buckets"),
            "{}",
            messages[0]
        );
    }

    #[test]
    fn too_many_tags_with_the_class_s_are_refused() {
        let tags: serde_json::Map<_, _> = (0..40).map(|i| (format!("k{i}"), json!("v"))).collect();
        let full = bucket("x", json!({"tags": tags}), 0);
        let class =
            spec(json!({"tags": {"a": "1", "b": "2", "c": "3", "d": "4", "e": "5", "f": "6", "g": "7"}}));
        let message = too_many_tags(&full, &Binding::Named("std".into()), &class).unwrap();
        assert!(message.contains("remove 1 from spec.tags"), "{message}");
        assert_eq!(too_many_tags(&full, &Binding::BuiltIn, &BucketClassSpec::built_in()), None);
    }

    #[test]
    fn a_backend_is_known_by_its_endpoint_region_and_credentials_secret() {
        let minio = Backend {
            region: "us-east-1".into(),
            endpoint: Some("http://minio:9000/".into()),
            iam_endpoint: None,
            force_path_style: true,
            credentials_secret: Some("minio-admin".into()),
        };
        let identity = backend_identity(Some(&minio), (None, "x"));
        assert!(identity.starts_with("http://minio:9000 region=us-east-1 credentials=secret-"), "{identity}");
        assert!(!identity.contains("minio-admin"), "no name from kopper's namespace: {identity}");
        let other_account = Backend { credentials_secret: Some("other".into()), ..minio.clone() };
        assert_ne!(backend_identity(Some(&other_account), (None, "x")), identity, "another account");
        let other_region = Backend { region: "eu-west-1".into(), ..minio.clone() };
        assert_ne!(backend_identity(Some(&other_region), (None, "x")), identity, "another region");
        let ambient = Backend { credentials_secret: None, ..minio };
        assert!(backend_identity(Some(&ambient), (None, "x")).ends_with("credentials=ambient"));
        assert_eq!(
            backend_identity(None, (Some("http://moto:5000"), "us-east-1")),
            "http://moto:5000 region=us-east-1 credentials=kopper"
        );
        assert_eq!(backend_identity(None, (None, "us-east-1")), "aws region=us-east-1 credentials=kopper");
    }

    #[test]
    fn without_classes_the_built_in_class_and_with_classes_but_no_default_none() {
        assert_eq!(Fallback::of([]), Fallback::BuiltIn);
        let plain = class("plain", false, 1);
        assert_eq!(Fallback::of([&plain]), Fallback::NoDefault);
        let mut deleting = class("old", true, 0);
        deleting.metadata.deletion_timestamp = Some(Time(Timestamp::now()));
        assert_eq!(Fallback::of([&deleting]), Fallback::NoDefault, "a default being deleted is none");
        let std = class("std", true, 2);
        assert_eq!(Fallback::of([&plain, &std, &deleting]), Fallback::Class("std".into()));
    }
}
