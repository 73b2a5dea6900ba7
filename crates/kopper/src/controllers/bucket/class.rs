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

/// The class the Bucket uses: the one it is bound to, else `spec.className`, else `default`
/// (the default class's name), else the built-in class. A `spec.className` other than the
/// bound class is refused: kopper does not move buckets between classes (the schema refuses
/// a change of a set name; this also covers a name set after the bucket was made).
pub fn wanted_binding(bucket: &Bucket, default: Option<&str>) -> Result<Binding, Refusal> {
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
        (None, None) => Ok(default.map_or(Binding::BuiltIn, |name| Binding::Named(name.to_owned()))),
    }
}

/// The class a Bucket counts against, for quotas and `bucketsUsing`: [`wanted_binding`], or,
/// when that refuses another name, the class its bucket was made with.
pub fn counted_binding(bucket: &Bucket, default: Option<&str>) -> Binding {
    wanted_binding(bucket, default).unwrap_or_else(|_| recorded_binding(bucket).unwrap_or(Binding::BuiltIn))
}

/// Whether `bucket` holds the class `name` in use: bound to it, naming it, or (unbound and
/// naming none) about to take it as the default.
pub fn holds(bucket: &Bucket, name: &str, default: Option<&str>) -> bool {
    let bound = recorded_binding(bucket);
    bound.as_ref().and_then(Binding::name) == Some(name)
        || bucket.spec.class_name.as_deref() == Some(name)
        || (bound.is_none() && bucket.spec.class_name.is_none() && default == Some(name))
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

/// Whether `bucket` is beyond the quota `max` of its class in its namespace, given `peers`:
/// every Bucket of that class in that namespace, `bucket` among them or not. Buckets rank by
/// creation time, then name, so the decision is the same in every pass and every replica, and
/// two Buckets created at once cannot both take the last place.
pub fn over_quota<'a>(bucket: &Bucket, peers: impl IntoIterator<Item = &'a Bucket>, max: u32) -> bool {
    let name = bucket.name_any();
    let created = bucket.metadata.creation_timestamp.as_ref();
    let ahead = peers
        .into_iter()
        .filter(|peer| peer.name_any() != name)
        .filter(|peer| {
            by_age(peer.metadata.creation_timestamp.as_ref(), &peer.name_any(), created, &name)
                == Ordering::Less
        })
        .count();
    ahead >= max as usize
}

/// The identity of a backend, recorded with each bucket: its S3 endpoint, or [`AWS`].
/// `default_endpoint` is the endpoint of kopper's flags, for a class without a backend.
pub fn backend_identity(backend: Option<&Backend>, default_endpoint: Option<&str>) -> String {
    let endpoint = match backend {
        Some(backend) => backend.endpoint.as_deref(),
        None => default_endpoint,
    };
    endpoint.map(|endpoint| endpoint.trim_end_matches('/').to_owned()).unwrap_or_else(|| AWS.to_owned())
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
        let named = bucket("x", json!({"className": "fast"}), 0);
        assert_eq!(wanted_binding(&named, Some("std")), Ok(Binding::Named("fast".into())));
        let plain = bucket("x", json!({}), 0);
        assert_eq!(wanted_binding(&plain, Some("std")), Ok(Binding::Named("std".into())));
        assert_eq!(wanted_binding(&plain, None), Ok(Binding::BuiltIn));
    }

    #[test]
    fn a_bound_bucket_keeps_its_class_when_the_default_changes() {
        let mut made = bucket("x", json!({}), 0);
        made.status = Some(BucketStatus {
            class_name: Some("std".into()),
            bucket_name: Some("b".into()),
            ..BucketStatus::default()
        });
        assert_eq!(wanted_binding(&made, Some("new")), Ok(Binding::Named("std".into())));
        // Made before classes: the built-in class, whatever the default is now.
        let mut old = bucket("x", json!({}), 0);
        old.status = Some(BucketStatus { bucket_name: Some("b".into()), ..BucketStatus::default() });
        assert_eq!(wanted_binding(&old, Some("new")), Ok(Binding::BuiltIn));
    }

    #[test]
    fn another_class_for_a_bound_bucket_is_refused_naming_the_field() {
        let mut made = bucket("x", json!({"className": "other"}), 0);
        made.status = Some(BucketStatus {
            class_name: Some("std".into()),
            bucket_name: Some("b".into()),
            ..BucketStatus::default()
        });
        let refusal = wanted_binding(&made, None).unwrap_err();
        assert_eq!(refusal.reason, "ClassNameImmutable");
        assert!(refusal.message.contains("spec.className") && refusal.message.contains("BucketClass std"));
        assert_eq!(counted_binding(&made, None), Binding::Named("std".into()), "it still counts where it is");
        made.status.as_mut().unwrap().class_name = None;
        assert!(wanted_binding(&made, None).unwrap_err().message.contains("built-in"));
    }

    #[test]
    fn a_class_is_held_by_buckets_naming_it_bound_to_it_or_about_to_take_it_as_default() {
        let named = bucket("a", json!({"className": "std"}), 0);
        let plain = bucket("b", json!({}), 0);
        assert!(holds(&named, "std", None));
        assert!(holds(&plain, "std", Some("std")));
        assert!(!holds(&plain, "std", None));
        let mut bound = bucket("c", json!({}), 0);
        bound.status = Some(BucketStatus { class_name: Some("std".into()), ..BucketStatus::default() });
        assert!(holds(&bound, "std", Some("new")));
        let mut built_in = bucket("d", json!({}), 0);
        built_in.status = Some(BucketStatus { bucket_name: Some("b".into()), ..BucketStatus::default() });
        assert!(!holds(&built_in, "std", Some("std")), "bound to the built-in class");
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
        let over = |name: &str| {
            let me = peers.iter().find(|peer| peer.name_any() == name).unwrap();
            over_quota(me, &peers, 2)
        };
        assert!(!over("c") && !over("a"));
        assert!(over("b"), "same age as a, later by name");
        assert!(!over_quota(&peers[2], &peers[2..], 1), "alone it fits");
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
    fn a_backend_is_known_by_its_endpoint() {
        let minio = Backend {
            region: "us-east-1".into(),
            endpoint: Some("http://minio:9000/".into()),
            iam_endpoint: None,
            force_path_style: true,
            credentials_secret: None,
        };
        assert_eq!(backend_identity(Some(&minio), None), "http://minio:9000");
        assert_eq!(backend_identity(None, Some("http://moto:5000")), "http://moto:5000");
        assert_eq!(backend_identity(None, None), AWS);
    }
}
