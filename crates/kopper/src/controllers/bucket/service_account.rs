//! The ServiceAccount of a Bucket in mode `ServiceAccount`: which Bucket may give it its role
//! (pure, [`holder`]), and the annotation IRSA reads, written and removed by server-side apply
//! under kopper's field manager. Server-side apply is what keeps kopper from overwriting an
//! `eks.amazonaws.com/role-arn` another tool or person wrote: kopper applies without force,
//! so the API server refuses (409) to change a value kopper does not own, and an empty apply
//! removes only what kopper itself wrote.

use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use std::collections::HashMap;

use kube::api::{Patch, PatchParams};
use kube::runtime::watcher::Event;
use kube::{Api, Resource, ResourceExt};
use serde_json::json;

use super::Error;
use super::names;

/// The annotation the EKS pod identity webhook reads: pods of the ServiceAccount get a web
/// identity token and this role.
pub const ROLE_ARN_ANNOTATION: &str = "eks.amazonaws.com/role-arn";

/// A Bucket of the ServiceAccount's namespace that names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Claimant {
    pub name: String,
    pub created: Option<Time>,
    /// The role kopper derives for it ([`names::Owner::role_name`]).
    pub role_name: String,
    /// Its deletion has begun: it keeps the ServiceAccount only while the annotation still
    /// names its role (it is removing it), and is never chosen afresh.
    pub deleting: bool,
}

/// The Bucket that may give the ServiceAccount its role: the one whose role the annotation
/// already names, and only when none does, the oldest Bucket naming it (creation time, then
/// name), so every Bucket and every replica decides the same.
pub fn holder<'a>(annotation: Option<&str>, claimants: &'a [Claimant]) -> Option<&'a Claimant> {
    let annotated = annotation.and_then(names::role_name_in_arn);
    if let Some(named) = claimants.iter().find(|c| Some(c.role_name.as_str()) == annotated) {
        return Some(named);
    }
    claimants.iter().filter(|c| !c.deleting).min_by(|a, b| {
        (a.created.as_ref().map(|t| t.0), &a.name).cmp(&(b.created.as_ref().map(|t| t.0), &b.name))
    })
}

/// Whether the annotation holds the role `role_name` (the ARN's account and path aside).
pub fn names_role(service_account: &ServiceAccount, role_name: &str) -> bool {
    service_account.annotations().get(ROLE_ARN_ANNOTATION).and_then(|arn| names::role_name_in_arn(arn))
        == Some(role_name)
}

/// Puts `role_arn` into the ServiceAccount's annotation, unless it is there already. A 409 is
/// a value kopper did not write: reported with the field manager that wrote it.
pub async fn annotate(
    api: &Api<ServiceAccount>,
    current: &ServiceAccount,
    role_arn: &str,
    field_manager: &str,
) -> Result<(), Error> {
    let name = current.name_any();
    if current.annotations().get(ROLE_ARN_ANNOTATION).map(String::as_str) == Some(role_arn) {
        return Ok(());
    }
    let apply = json!({
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {"name": name, "annotations": {ROLE_ARN_ANNOTATION: role_arn}},
    });
    match api.patch(&name, &PatchParams::apply(field_manager), &Patch::Apply(apply)).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 409 => Err(Error::blocked(
            "ServiceAccountAnnotated",
            format!(
                "ServiceAccount {name} carries {ROLE_ARN_ANNOTATION} {:?}, which kopper did not write ({}); \
                 kopper never overwrites it: remove the annotation, or name another ServiceAccount in \
                 spec.access.serviceAccountName",
                current.annotations().get(ROLE_ARN_ANNOTATION).cloned().unwrap_or_default(),
                status.message
            ),
        )),
        Err(source) => Err(Error::Kube { what: format!("annotating ServiceAccount {name}"), source }),
    }
}

/// Removes the annotation kopper wrote for the role `role_name` from the ServiceAccount
/// `name`, if it still holds that role: an empty apply gives up what kopper's field manager
/// owns there, and the API server removes what nobody else owns.
pub async fn release(
    api: &Api<ServiceAccount>,
    name: &str,
    role_name: &str,
    field_manager: &str,
) -> Result<bool, Error> {
    let current = api.get_opt(name).await.map_err(Error::kube(format!("reading ServiceAccount {name}")))?;
    let Some(current) = current.filter(|sa| names_role(sa, role_name)) else { return Ok(false) };
    let apply =
        json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": current.name_any()}});
    api.patch(name, &PatchParams::apply(field_manager), &Patch::Apply(apply))
        .await
        .map_err(Error::kube(format!("removing kopper's annotation from ServiceAccount {name}")))?;
    Ok(true)
}

/// What of a ServiceAccount a Bucket's pass depends on: which object it is (its uid: one
/// deleted and created again is another) and the annotation IRSA reads.
fn what_buckets_read(account: &impl Resource) -> u64 {
    use std::hash::{DefaultHasher, Hash, Hasher};
    let annotation = account.meta().annotations.as_ref().and_then(|a| a.get(ROLE_ARN_ANNOTATION));
    let mut hasher = DefaultHasher::new();
    (&account.meta().uid, annotation).hash(&mut hasher);
    hasher.finish()
}

/// Narrows the ServiceAccount watch to the events that can change a Bucket's pass: a
/// ServiceAccount seen for the first time, deleted, replaced (another uid), or whose
/// [`ROLE_ARN_ANNOTATION`] changed. Anyone who may edit ServiceAccounts can relabel them at
/// will; such changes wake no Bucket, and so cost no IAM or S3 call. Holds a digest per
/// ServiceAccount (by namespace and name); a relist starts afresh, so that those deleted while
/// the watch was down are forgotten.
#[derive(Debug, Default)]
pub struct WakingChanges {
    seen: HashMap<(String, String), u64>,
    /// Filled during a relist, and then replaces `seen`.
    relisted: Option<HashMap<(String, String), u64>>,
}

impl WakingChanges {
    /// The ServiceAccount of `event` when it may change a Bucket's pass.
    pub fn filter<K: Resource>(&mut self, event: Event<K>) -> Option<K> {
        match event {
            Event::Apply(account) => self.changed(account, false),
            Event::InitApply(account) => self.changed(account, true),
            Event::Delete(account) => {
                self.seen.remove(&key(&account));
                if let Some(relisted) = &mut self.relisted {
                    relisted.remove(&key(&account));
                }
                Some(account)
            }
            Event::Init => {
                self.relisted = Some(HashMap::new());
                None
            }
            Event::InitDone => {
                if let Some(relisted) = self.relisted.take() {
                    self.seen = relisted;
                }
                None
            }
        }
    }

    fn changed<K: Resource>(&mut self, account: K, relisting: bool) -> Option<K> {
        let key = key(&account);
        let digest = what_buckets_read(&account);
        let before = self.seen.get(&key).copied();
        let into = match &mut self.relisted {
            Some(relisted) if relisting => relisted,
            _ => &mut self.seen,
        };
        into.insert(key, digest);
        (before != Some(digest)).then_some(account)
    }
}

fn key(account: &impl Resource) -> (String, String) {
    (account.meta().namespace.clone().unwrap_or_default(), account.meta().name.clone().unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use k8s_openapi::jiff::Timestamp;

    use super::*;

    fn claimant(name: &str, created: i64) -> Claimant {
        Claimant {
            name: name.into(),
            created: Some(Time(Timestamp::from_second(1_800_000_000 + created).unwrap())),
            role_name: format!("kopper-c-ns-{name}-0000"),
            deleting: false,
        }
    }

    fn arn(role: &str) -> String {
        format!("arn:aws:iam::123456789012:role/kopper/c/{role}")
    }

    fn held<'a>(annotation: Option<&str>, claimants: &'a [Claimant]) -> Option<&'a str> {
        holder(annotation, claimants).map(|c| c.name.as_str())
    }

    #[test]
    fn without_an_annotation_the_oldest_bucket_holds_then_the_first_by_name() {
        let claimants = [claimant("young", 10), claimant("old", 0), claimant("also-old", 0)];
        assert_eq!(held(None, &claimants), Some("also-old"));
        assert_eq!(held(None, &claimants[..2]), Some("old"));
        assert_eq!(held(None, &[]), None);
    }

    #[test]
    fn the_bucket_whose_role_the_annotation_names_holds_however_young() {
        let claimants = [claimant("young", 10), claimant("old", 0)];
        let annotation = arn(&claimants[0].role_name);
        assert_eq!(held(Some(&annotation), &claimants), Some("young"));
    }

    #[test]
    fn an_annotation_naming_no_claimant_leaves_the_choice_to_age() {
        let claimants = [claimant("young", 10), claimant("old", 0)];
        assert_eq!(held(Some(&arn("someone-elses")), &claimants), Some("old"));
        assert_eq!(held(Some("not an arn"), &claimants), Some("old"));
    }

    fn account(uid: &str, labels: &[(&str, &str)], role: Option<&str>) -> ServiceAccount {
        let labels: std::collections::BTreeMap<_, _> =
            labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        let mut account = ServiceAccount::default();
        account.metadata.name = Some("app".into());
        account.metadata.namespace = Some("team".into());
        account.metadata.uid = Some(uid.into());
        account.metadata.labels = Some(labels);
        account.metadata.annotations =
            role.map(|role| [(ROLE_ARN_ANNOTATION.to_owned(), role.to_owned())].into());
        account
    }

    #[test]
    fn only_a_new_uid_the_role_annotation_or_a_deletion_wakes_buckets() {
        let mut changes = WakingChanges::default();
        let wakes = |changes: &mut WakingChanges, event| changes.filter(event).is_some();
        assert!(!wakes(&mut changes, Event::Init));
        assert!(wakes(&mut changes, Event::InitApply(account("1", &[], None))), "seen first");
        assert!(!wakes(&mut changes, Event::InitDone));
        for round in 0..20 {
            let relabelled = account("1", &[("audited", &round.to_string())], None);
            assert!(!wakes(&mut changes, Event::Apply(relabelled)), "a label change wakes nothing");
        }
        let annotated = account("1", &[], Some("arn:aws:iam::1:role/kopper/c/r"));
        assert!(wakes(&mut changes, Event::Apply(annotated.clone())), "the annotation changed");
        assert!(!wakes(&mut changes, Event::Apply(annotated.clone())));
        assert!(wakes(&mut changes, Event::Apply(account("2", &[], Some("arn:aws:iam::1:role/kopper/c/r")))));
        assert!(wakes(&mut changes, Event::Delete(account("2", &[], None))), "a deletion wakes");
        assert!(wakes(&mut changes, Event::Apply(account("3", &[], None))), "created again");
        // A relist: what is unchanged wakes nothing, and the ServiceAccounts it no longer
        // holds are forgotten.
        assert!(!wakes(&mut changes, Event::Init));
        assert!(!wakes(&mut changes, Event::InitApply(account("3", &[("x", "y")], None))));
        assert!(!wakes(&mut changes, Event::InitDone));
        assert_eq!(changes.seen.len(), 1);
    }

    #[test]
    fn a_bucket_being_deleted_keeps_only_what_it_still_holds() {
        let mut leaving = claimant("old", 0);
        leaving.deleting = true;
        let claimants = [claimant("young", 10), leaving];
        assert_eq!(held(None, &claimants), Some("young"));
        let annotation = arn(&claimants[1].role_name);
        assert_eq!(held(Some(&annotation), &claimants), Some("old"), "until its annotation is gone");
    }
}
