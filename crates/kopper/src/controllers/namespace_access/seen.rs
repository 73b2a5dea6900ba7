//! kopper's own RoleBindings as the status controller knows them: for each, only what
//! judging it against a policy needs (digests of its name, the policy it serves, its owners,
//! its role and subjects), 64 bytes instead of the whole object.
//!
//! Only bindings labelled as kopper's are watched, so this index grows with what the
//! policies ask for, and with the bindings someone who may write RoleBindings labels as
//! kopper's (64 bytes each). The binding controller judges a namespace from it when it can
//! (every wanted binding up to date or missing), and each change it shows wakes that
//! namespace ([`IndexWakes`]). Whether a binding someone else made holds a name a policy
//! wants is found when a create meets it (409): the binding controller then reads the
//! namespace's bindings fresh and reports it to the status controller as a problem.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::hash::{BuildHasher, Hash, RandomState};
use std::sync::{Arc, OnceLock, PoisonError, RwLock, RwLockReadGuard};

use futures::{Future, StreamExt};
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::rbac::v1::{RoleBinding, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use kube::{Api, Resource, ResourceExt};
use serde::Deserialize;

use super::desired::{DesiredBinding, MANAGED_BY_LABEL, MANAGED_BY_VALUE, POLICY_LABEL};
use super::policy::RBAC_API_GROUP;
use crate::runtime::Metrics;
use crate::runtime::cache::{CacheStopped, FirstList, Trigger};
use crate::runtime::metrics::CacheLabels;

/// A managed binding, reduced to what [`SeenBinding::state_for`] compares. Every string is
/// held as a digest, with no allocation of its own: at 10,000 namespaces and 5 policies the
/// index holds 50,000 of these.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SeenBinding {
    policy: u64,
    owners: Owners,
    role: u64,
    subjects: u64,
    terminating: bool,
}

/// The digests of a binding's owners' uids: kopper's bindings have one, held inline.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Owners {
    None,
    One(u64),
    Many(Box<[u64]>),
}

impl Owners {
    fn of(uids: impl ExactSizeIterator<Item = u64>) -> Self {
        match uids.len() {
            0 => Self::None,
            1 => uids.map(Self::One).next().unwrap_or(Self::None),
            _ => Self::Many(uids.collect()),
        }
    }

    fn contains(&self, uid: u64) -> bool {
        match self {
            Self::None => false,
            Self::One(owner) => *owner == uid,
            Self::Many(owners) => owners.contains(&uid),
        }
    }
}

impl SeenBinding {
    /// What kopper judges `binding` by; `None` when kopper does not manage it.
    pub fn of(binding: &RoleBinding) -> Option<Self> {
        Self::of_parts(&binding.metadata, &binding.role_ref, binding.subjects.as_deref().unwrap_or_default())
    }

    fn of_parts(metadata: &ObjectMeta, role: &RoleRef, subjects: &[Subject]) -> Option<Self> {
        let labels = metadata.labels.as_ref()?;
        let managed = labels.get(MANAGED_BY_LABEL).is_some_and(|value| value == MANAGED_BY_VALUE);
        let policy = labels.get(POLICY_LABEL).filter(|_| managed)?;
        let owners = metadata.owner_references.as_deref().unwrap_or_default();
        Some(Self {
            policy: digest(policy.as_str()),
            terminating: metadata.deletion_timestamp.is_some(),
            owners: Owners::of(owners.iter().map(|owner| digest(owner.uid.as_str()))),
            role: role_digest(role),
            subjects: subjects_digest(subjects),
        })
    }

    /// Whether this binding's label names `policy` as the one it serves.
    pub fn serves(&self, policy: &str) -> bool {
        self.policy == digest(policy)
    }

    pub fn is_terminating(&self) -> bool {
        self.terminating
    }

    /// How this binding compares with the one `desired` asks for.
    pub fn state_for(&self, desired: &DesiredBinding) -> BindingState {
        if self.terminating {
            return BindingState::Terminating;
        }
        if self.role != role_digest(&desired.binding.role_ref) {
            return BindingState::WrongRole;
        }
        if self.serves(&desired.policy)
            && self.owners.contains(digest(desired.policy_uid.as_str()))
            && self.subjects == subjects_digest(&desired.binding.subjects)
        {
            BindingState::UpToDate
        } else {
            BindingState::Stale
        }
    }
}

/// Digests are keyed per process, so nobody who writes a binding can aim at a collision
/// with the one a policy wants (a name, a role, subjects).
fn digest(value: &(impl Hash + ?Sized)) -> u64 {
    static KEYS: OnceLock<RandomState> = OnceLock::new();
    KEYS.get_or_init(RandomState::new).hash_one(value)
}

/// The role, with the API group the server fills in when it is left out.
fn role_digest(role: &RoleRef) -> u64 {
    let group = role.api_group.as_deref().filter(|group| !group.is_empty()).unwrap_or(RBAC_API_GROUP);
    digest(&(role.kind.as_str(), role.name.as_str(), group))
}

/// Subjects as the API server stores them: it fills in the RBAC API group for users and
/// groups and leaves it empty for service accounts.
fn subjects_digest(subjects: &[Subject]) -> u64 {
    let normalized: Vec<(&str, &str, &str, &str)> = subjects
        .iter()
        .map(|subject| {
            let default_group = if subject.kind == "ServiceAccount" { "" } else { RBAC_API_GROUP };
            (
                subject.kind.as_str(),
                subject.api_group.as_deref().unwrap_or(default_group),
                subject.name.as_str(),
                subject.namespace.as_deref().unwrap_or_default(),
            )
        })
        .collect();
    digest(&normalized)
}

/// A RoleBinding as the index's watch decodes it: the metadata [`SeenBinding`] and the echo
/// check read, its role and its subjects. The rest of its metadata is skipped while parsing,
/// never built: above all its managed fields, a JSON tree per field manager, which the watch
/// would otherwise build for every binding kopper writes.
/// Fields missing or null are read as empty, as k8s-openapi reads them: one odd binding does
/// not fail the list it comes in.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct IndexedBinding {
    #[serde(default, deserialize_with = "read_metadata")]
    metadata: ObjectMeta,
    #[serde(default, deserialize_with = "null_as_default")]
    role_ref: RoleRef,
    #[serde(default, deserialize_with = "null_as_default")]
    subjects: Vec<Subject>,
}

fn null_as_default<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    Ok(Option::<T>::deserialize(deserializer)?.unwrap_or_default())
}

/// The metadata fields an [`IndexedBinding`] keeps; serde skips every other one unread.
#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct KeptMetadata {
    name: Option<String>,
    namespace: Option<String>,
    resource_version: Option<String>,
    labels: Option<BTreeMap<String, String>>,
    owner_references: Option<Vec<OwnerReference>>,
    deletion_timestamp: Option<Time>,
}

fn read_metadata<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<ObjectMeta, D::Error> {
    let kept: KeptMetadata = null_as_default(deserializer)?;
    Ok(ObjectMeta {
        name: kept.name,
        namespace: kept.namespace,
        resource_version: kept.resource_version,
        labels: kept.labels,
        owner_references: kept.owner_references,
        deletion_timestamp: kept.deletion_timestamp,
        ..ObjectMeta::default()
    })
}

impl IndexedBinding {
    /// What kopper judges this binding by; `None` when kopper does not manage it.
    pub fn seen(&self) -> Option<SeenBinding> {
        SeenBinding::of_parts(&self.metadata, &self.role_ref, &self.subjects)
    }
}

impl Resource for IndexedBinding {
    type DynamicType = ();
    type Scope = NamespaceResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        RoleBinding::kind(&())
    }

    fn group(_: &()) -> Cow<'_, str> {
        RoleBinding::group(&())
    }

    fn version(_: &()) -> Cow<'_, str> {
        RoleBinding::version(&())
    }

    fn plural(_: &()) -> Cow<'_, str> {
        RoleBinding::plural(&())
    }

    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// How an existing binding compares with the one a policy wants.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BindingState {
    Missing,
    /// Exists but kopper did not make it: never touched.
    Foreign,
    /// Being deleted; its deletion will trigger another pass.
    Terminating,
    /// Managed, same role, but subjects, labels or owner differ.
    Stale,
    /// Managed, but refers to another role.
    WrongRole,
    UpToDate,
}

/// The digest of a binding's name, as the index keys it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NameDigest(u64);

impl NameDigest {
    pub fn of(name: &str) -> Self {
        Self(digest(name))
    }
}

/// Each managed binding, by namespace and then by the digest of its name: one namespace's
/// are found without a pass over the cluster's, so the binding controller can judge a
/// namespace from this index alone, and each namespace's name is held once, not once per
/// binding.
#[derive(Clone, Debug, Default)]
pub struct Bindings {
    by_namespace: HashMap<Box<str>, InNamespace>,
    count: usize,
    /// Counts every change, so that what was computed from the index can tell it is still
    /// current.
    version: u64,
}

/// The same bindings, whatever changes led there.
impl PartialEq for Bindings {
    fn eq(&self, other: &Self) -> bool {
        self.count == other.count && self.by_namespace == other.by_namespace
    }
}

/// Namespaces with more bindings than this keep them in a map.
const FEW: usize = 16;

/// One namespace's managed bindings. Most namespaces hold a few (one per policy binding that
/// selects them): a vector sorted by name digest, exactly as long as needed, weighs less than
/// a map. Anyone who may write RoleBindings in a namespace may label thousands as kopper's,
/// so past [`FEW`] they go in a map, where each change costs the same however many there are.
#[derive(Clone, Debug)]
enum InNamespace {
    Few(Vec<(NameDigest, SeenBinding)>),
    Many(HashMap<NameDigest, SeenBinding>),
}

impl InNamespace {
    fn get(&self, name: NameDigest) -> Option<&SeenBinding> {
        match self {
            Self::Few(few) => few.binary_search_by_key(&name, |(name, _)| *name).ok().map(|at| &few[at].1),
            Self::Many(many) => many.get(&name),
        }
    }

    fn insert(&mut self, name: NameDigest, seen: SeenBinding) -> Option<SeenBinding> {
        let few = match self {
            Self::Many(many) => return many.insert(name, seen),
            Self::Few(few) => few,
        };
        match few.binary_search_by_key(&name, |(name, _)| *name) {
            Ok(at) => Some(std::mem::replace(&mut few[at].1, seen)),
            Err(_) if few.len() >= FEW => {
                let mut many: HashMap<_, _> = std::mem::take(few).into_iter().collect();
                many.insert(name, seen);
                *self = Self::Many(many);
                None
            }
            Err(at) => {
                few.reserve_exact(1);
                few.insert(at, (name, seen));
                None
            }
        }
    }

    fn remove(&mut self, name: NameDigest) -> Option<SeenBinding> {
        match self {
            Self::Few(few) => {
                let at = few.binary_search_by_key(&name, |(name, _)| *name).ok()?;
                let (_, removed) = few.remove(at);
                few.shrink_to_fit();
                Some(removed)
            }
            Self::Many(many) => {
                let removed = many.remove(&name)?;
                // Back to a vector well below the bound, so one binding coming and going
                // at the bound does not convert it each time.
                if many.len() < FEW / 2 {
                    let mut few: Vec<_> = std::mem::take(many).into_iter().collect();
                    few.sort_unstable_by_key(|(name, _)| *name);
                    *self = Self::Few(few);
                }
                Some(removed)
            }
        }
    }

    fn len(&self) -> usize {
        match self {
            Self::Few(few) => few.len(),
            Self::Many(many) => many.len(),
        }
    }

    fn iter(&self) -> impl Iterator<Item = (NameDigest, &SeenBinding)> {
        let (few, many) = match self {
            Self::Few(few) => (Some(few.iter().map(|(name, seen)| (*name, seen))), None),
            Self::Many(many) => (None, Some(many.iter().map(|(name, seen)| (*name, seen)))),
        };
        few.into_iter().flatten().chain(many.into_iter().flatten())
    }
}

/// The same bindings, however they are held.
impl PartialEq for InNamespace {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().all(|(name, seen)| other.get(name) == Some(seen))
    }
}

impl Bindings {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn get(&self, namespace: &str, name: &str) -> Option<&SeenBinding> {
        self.by_namespace.get(namespace)?.get(NameDigest::of(name))
    }

    /// The managed bindings of one namespace, with their names' digests.
    pub fn in_namespace<'a>(
        &'a self,
        namespace: &str,
    ) -> impl Iterator<Item = (NameDigest, &'a SeenBinding)> + 'a {
        self.by_namespace.get(namespace).into_iter().flat_map(InNamespace::iter)
    }

    /// Records `seen` under `namespace`/`name`; what it held before.
    pub fn insert(&mut self, namespace: &str, name: &str, seen: SeenBinding) -> Option<SeenBinding> {
        let names = match self.by_namespace.get_mut(namespace) {
            Some(names) => names,
            None => self.by_namespace.entry(namespace.into()).or_insert(InNamespace::Few(Vec::new())),
        };
        let previous = names.insert(NameDigest::of(name), seen);
        if previous.is_none() {
            self.count += 1;
        }
        self.version += 1;
        previous
    }

    pub fn remove(&mut self, namespace: &str, name: &str) -> Option<SeenBinding> {
        let names = self.by_namespace.get_mut(namespace)?;
        let removed = names.remove(NameDigest::of(name))?;
        if names.len() == 0 {
            self.by_namespace.remove(namespace);
        }
        self.count -= 1;
        self.version += 1;
        Some(removed)
    }

    pub fn len(&self) -> usize {
        self.count
    }

    /// A number that differs after any change to the index, a relist's included.
    pub fn version(&self) -> u64 {
        self.version
    }

    /// The namespaces whose bindings differ between this index and `other`.
    fn namespaces_differing_from(&self, other: &Self) -> Vec<Box<str>> {
        let differs = |a: &Self, b: &Self, namespace: &str| {
            a.by_namespace.get(namespace) != b.by_namespace.get(namespace)
        };
        let mut namespaces: Vec<Box<str>> = self
            .by_namespace
            .keys()
            .chain(other.by_namespace.keys())
            .filter(|namespace| differs(self, other, namespace))
            .cloned()
            .collect();
        namespaces.sort();
        namespaces.dedup();
        namespaces
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }
}

/// Namespaces whose bindings changed in the index, until the binding controller takes them:
/// a set, so it holds each namespace at most once however often tenants change bindings,
/// and nothing grows while the controller has not started.
#[derive(Default)]
pub struct IndexWakes {
    pending: std::sync::Mutex<std::collections::HashSet<Box<str>>>,
    notify: tokio::sync::Notify,
}

impl IndexWakes {
    pub fn wake(&self, namespace: Box<str>) {
        self.pending.lock().unwrap_or_else(PoisonError::into_inner).insert(namespace);
        self.notify.notify_one();
    }

    /// Each namespace woken, once per time it was taken.
    pub fn stream(self: Arc<Self>) -> impl futures::Stream<Item = Box<str>> + Send {
        futures::stream::unfold((self, Vec::new()), |(wakes, mut taken)| async move {
            loop {
                if let Some(namespace) = taken.pop() {
                    return Some((namespace, (wakes, taken)));
                }
                taken = wakes.pending.lock().unwrap_or_else(PoisonError::into_inner).drain().collect();
                if taken.is_empty() {
                    // notify_one keeps a permit when nobody waits, so no wake is lost here.
                    wakes.notify.notified().await;
                }
            }
        })
    }
}

/// kopper's managed RoleBindings, kept by a watch until shutdown.
#[derive(Clone)]
pub struct BindingIndex {
    bindings: Arc<RwLock<Bindings>>,
    ready: FirstList,
}

impl BindingIndex {
    /// Starts the watch; every change after the first list fires `wake`, and names the
    /// namespaces whose bindings changed on `changed`: the binding controller judges a
    /// namespace from this index, so a namespace must be judged again once the index shows
    /// the change, not only when the API server's event for it arrives (which may be first).
    /// An event `is_echo` calls kopper's own write names no namespace; `is_echo` hears every
    /// event, so it also learns of relists.
    pub fn spawn(
        client: kube::Client,
        wake: Trigger,
        changed: Arc<IndexWakes>,
        is_echo: impl Fn(&Event<IndexedBinding>) -> bool + Send + 'static,
        (metrics, controller): (Arc<Metrics>, &'static str),
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> (Self, tokio::task::JoinHandle<()>) {
        let bindings = Arc::new(RwLock::new(Bindings::new()));
        let ready = FirstList::default();
        let first_list = ready.clone();
        let config = crate::runtime::trim::tenant_objects_watch().labels(&managed_by_kopper());
        let events = crate::runtime::watch::watcher(Api::<IndexedBinding>::all(client), config)
            .default_backoff()
            .take_until(shutdown);
        let index = bindings.clone();
        let labels = CacheLabels { controller: controller.to_owned(), kind: "RoleBinding".to_owned() };
        let task = tokio::spawn(async move {
            let mut events = std::pin::pin!(events);
            let mut relisted = Bindings::new();
            while let Some(event) = events.next().await {
                let event = match event {
                    Ok(event) => event,
                    Err(error) => {
                        tracing::warn!(kind = "RoleBinding", %error, "watch failed; retrying with backoff");
                        continue;
                    }
                };
                // The first list wakes nobody (every namespace is judged at start anyway), nor
                // does the echo of kopper's own write (the pass that wrote it knew).
                let was_ready = first_list.is_ready();
                let echo = is_echo(&event);
                let (change, namespaces) = apply(&index, &mut relisted, event);
                let size = index.read().unwrap_or_else(PoisonError::into_inner).len();
                metrics.cached_objects.get_or_create(&labels).set(i64::try_from(size).unwrap_or(i64::MAX));
                if change == Change::ListDone {
                    first_list.mark_ready();
                }
                if change != Change::None && first_list.is_ready() {
                    wake.fire();
                }
                if was_ready && !echo {
                    namespaces.into_iter().for_each(|namespace| changed.wake(namespace));
                }
            }
            first_list.mark_stopped();
        });
        (Self { bindings, ready }, task)
    }

    /// Waits for the first complete list.
    pub async fn wait_until_ready(&self) -> Result<(), CacheStopped> {
        self.ready.wait_until_ready("RoleBinding").await
    }

    pub fn read(&self) -> RwLockReadGuard<'_, Bindings> {
        self.bindings.read().unwrap_or_else(PoisonError::into_inner)
    }
}

#[derive(Debug, PartialEq, Eq)]
enum Change {
    None,
    Changed,
    ListDone,
}

/// The label selector of every RoleBinding kopper marks as its own, whichever policy (if
/// any) its label names: this index's watch. The binding controller's watch of every other
/// binding selects the complement, so each binding's events reach kopper once.
pub fn managed_by_kopper() -> String {
    format!("{MANAGED_BY_LABEL}={MANAGED_BY_VALUE}")
}

/// Applies one watch event: what changed in the index, and the namespaces to judge again. A
/// binding marked as kopper's that names no policy is held by nobody's index but its
/// namespace is judged again on any event of it, as for any binding kopper did not make: it
/// may take or free a name a policy wants. A (re)list is gathered in `relisted` and replaces
/// the index whole when it completes, so bindings deleted while the watch was down leave no
/// trace.
fn apply(
    shared: &RwLock<Bindings>,
    relisted: &mut Bindings,
    event: Event<IndexedBinding>,
) -> (Change, Vec<Box<str>>) {
    let index = || shared.write().unwrap_or_else(PoisonError::into_inner);
    let changed_in = |namespace: &str, changed: bool| {
        if changed { (Change::Changed, vec![Box::from(namespace)]) } else { (Change::None, Vec::new()) }
    };
    match event {
        watcher::Event::Init => {
            *relisted = Bindings::new();
            (Change::None, Vec::new())
        }
        watcher::Event::InitApply(binding) => {
            if let (Some(namespace), Some(seen)) = (binding.metadata.namespace.as_deref(), binding.seen()) {
                relisted.insert(namespace, &binding.name_any(), seen);
            }
            (Change::None, Vec::new())
        }
        watcher::Event::InitDone => {
            let mut index = index();
            let changed = index.namespaces_differing_from(relisted);
            let version = index.version + relisted.version + 1;
            *index = std::mem::take(relisted);
            index.version = version;
            (Change::ListDone, changed)
        }
        watcher::Event::Apply(binding) => {
            let Some(namespace) = binding.metadata.namespace.as_deref() else {
                return (Change::None, Vec::new());
            };
            let name = binding.name_any();
            match binding.seen() {
                Some(seen) => {
                    let unchanged = index().insert(namespace, &name, seen.clone()).as_ref() == Some(&seen);
                    changed_in(namespace, !unchanged)
                }
                None => {
                    let removed = index().remove(namespace, &name).is_some();
                    (if removed { Change::Changed } else { Change::None }, vec![Box::from(namespace)])
                }
            }
        }
        watcher::Event::Delete(binding) => {
            let Some(namespace) = binding.metadata.namespace.as_deref() else {
                return (Change::None, Vec::new());
            };
            let removed = index().remove(namespace, &binding.name_any()).is_some();
            (if removed { Change::Changed } else { Change::None }, vec![Box::from(namespace)])
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controllers::namespace_access::desired::desired_bindings;
    use crate::controllers::namespace_access::testing::{namespace, policy};
    use crate::controllers::namespace_access::{desired::Policies, template::NamespaceFacts};

    fn wanted() -> DesiredBinding {
        let namespace = namespace("team-1", &[]);
        let facts = NamespaceFacts { name: "team-1", labels: namespace.labels(), protected: false };
        let policies = Policies::compile([&policy("seed", 1)]);
        desired_bindings(facts, &policies).bindings.into_values().next().unwrap()
    }

    fn applied() -> RoleBinding {
        wanted().to_role_binding("team-1")
    }

    #[test]
    fn what_kopper_applied_is_up_to_date_and_edits_are_not() {
        let wanted = wanted();
        let seen = |binding: &RoleBinding| SeenBinding::of(binding).unwrap().state_for(&wanted);
        assert_eq!(seen(&applied()), BindingState::UpToDate);

        let mut defaulted = applied();
        defaulted.subjects.as_mut().unwrap()[0].api_group = None;
        defaulted.role_ref.api_group = None;
        assert_eq!(seen(&defaulted), BindingState::UpToDate, "the server's defaults are no change");

        let mut edited = applied();
        edited.subjects.as_mut().unwrap()[0].name = "intruders".into();
        assert_eq!(seen(&edited), BindingState::Stale);
        let mut disowned = applied();
        disowned.metadata.owner_references = None;
        assert_eq!(seen(&disowned), BindingState::Stale);
        let mut other_role = applied();
        other_role.role_ref.name = "admin".into();
        assert_eq!(seen(&other_role), BindingState::WrongRole);
        let mut going = applied();
        going.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
        ));
        assert_eq!(seen(&going), BindingState::Terminating);

        let mut foreign = applied();
        foreign.metadata.labels = None;
        assert_eq!(SeenBinding::of(&foreign), None);
    }

    #[test]
    fn a_binding_with_more_owners_than_its_policy_is_still_the_policy_s() {
        let wanted = wanted();
        let mut shared = applied();
        let mut other_owner = shared.owner_references()[0].clone();
        other_owner.uid = "someone-else".into();
        shared.owner_references_mut().push(other_owner);
        let seen = SeenBinding::of(&shared).unwrap();
        assert!(matches!(seen.owners, Owners::Many(_)));
        assert_eq!(seen.state_for(&wanted), BindingState::UpToDate);
        assert!(seen.serves("seed") && !seen.serves("other"));
    }

    #[test]
    fn the_index_is_the_same_whichever_order_its_bindings_came_in() {
        let seen = SeenBinding::of(&applied()).unwrap();
        let names = ["a", "b", "c", "d", "e"];
        let mut forwards = Bindings::new();
        let mut backwards = Bindings::new();
        for name in names {
            forwards.insert("team-1", name, seen.clone());
        }
        for name in names.iter().rev() {
            backwards.insert("team-1", name, seen.clone());
        }
        assert_eq!(forwards, backwards, "a relist in another order wakes nobody");
        assert!(forwards.namespaces_differing_from(&backwards).is_empty());
        assert_eq!(forwards.len(), 5);
        assert!(names.iter().all(|name| forwards.get("team-1", name) == Some(&seen)));
        assert_eq!(forwards.get("team-1", "f"), None);
        assert_eq!(forwards.get("team-2", "a"), None);

        assert_eq!(forwards.insert("team-1", "c", seen.clone()), Some(seen.clone()), "replaced, not added");
        assert_eq!(forwards.len(), 5);
        for name in names {
            assert_eq!(forwards.remove("team-1", name), Some(seen.clone()));
        }
        assert_eq!(forwards.remove("team-1", "a"), None);
        assert!(
            forwards.is_empty() && forwards.by_namespace.is_empty(),
            "an empty namespace leaves no entry"
        );
    }

    #[test]
    fn a_namespace_with_many_bindings_keeps_them_in_a_map_and_back() {
        let seen = SeenBinding::of(&applied()).unwrap();
        let names: Vec<String> = (0..100).map(|n| format!("b-{n}")).collect();
        let mut forwards = Bindings::new();
        let mut backwards = Bindings::new();
        names.iter().for_each(|name| assert_eq!(forwards.insert("team-1", name, seen.clone()), None));
        names.iter().rev().for_each(|name| assert_eq!(backwards.insert("team-1", name, seen.clone()), None));
        assert!(matches!(forwards.by_namespace["team-1"], InNamespace::Many(_)));
        assert_eq!(forwards, backwards);
        assert_eq!((forwards.len(), forwards.in_namespace("team-1").count()), (100, 100));
        assert!(names.iter().all(|name| forwards.get("team-1", name) == Some(&seen)));

        for name in &names[..95] {
            assert_eq!(forwards.remove("team-1", name), Some(seen.clone()));
        }
        assert!(matches!(forwards.by_namespace["team-1"], InNamespace::Few(_)), "back to a vector");
        let mut few = Bindings::new();
        names[95..].iter().rev().for_each(|name| _ = few.insert("team-1", name, seen.clone()));
        assert_eq!(forwards, few, "the same bindings, whichever way they are held");
        assert!(names[95..].iter().all(|name| forwards.get("team-1", name) == Some(&seen)));
        assert_eq!(forwards.get("team-1", &names[0]), None);
    }

    #[tokio::test]
    async fn index_wakes_hold_each_namespace_once_until_taken() {
        use futures::StreamExt;
        let wakes = Arc::new(IndexWakes::default());
        for _ in 0..1000 {
            wakes.wake("team-1".into());
        }
        wakes.wake("team-2".into());
        assert_eq!(
            wakes.pending.lock().unwrap().len(),
            2,
            "a thousand changes in one namespace hold one entry"
        );
        let mut stream = Box::pin(wakes.clone().stream());
        let mut taken = vec![stream.next().await.unwrap(), stream.next().await.unwrap()];
        taken.sort();
        assert_eq!(taken, [Box::from("team-1"), Box::from("team-2")]);
        wakes.wake("team-1".into());
        assert_eq!(stream.next().await.unwrap(), Box::from("team-1"), "a later change is taken again");
    }

    /// `binding` as the index's watch decodes it.
    fn indexed(binding: &RoleBinding) -> IndexedBinding {
        serde_json::from_value(serde_json::to_value(binding).unwrap()).unwrap()
    }

    #[test]
    fn the_watch_keeps_what_judging_and_echoes_read_and_parses_no_managed_fields() {
        let mut binding = applied();
        binding.metadata.resource_version = Some("42".into());
        binding.metadata.uid = Some("b-uid".into());
        let mut json = serde_json::to_value(&binding).unwrap();
        json["metadata"]["managedFields"] = serde_json::json!([{
            "manager": "kopper", "operation": "Apply", "apiVersion": "rbac.authorization.k8s.io/v1",
            "fieldsType": "FieldsV1", "fieldsV1": {"f:metadata": {"f:labels": {"f:a": {}}}}
        }]);
        json["metadata"]["creationTimestamp"] = "2026-11-30T00:00:00Z".into();
        let decoded: IndexedBinding = serde_json::from_value(json).unwrap();

        assert_eq!(decoded.seen(), SeenBinding::of(&binding), "judged as the whole binding is");
        assert_eq!(decoded.seen().unwrap().state_for(&wanted()), BindingState::UpToDate);
        assert_eq!(
            (decoded.name_any(), decoded.namespace(), decoded.resource_version()),
            (binding.name_any(), Some("team-1".to_owned()), Some("42".to_owned())),
            "the echo check's name, namespace and version"
        );
        let skipped = &decoded.metadata;
        assert!(
            skipped.managed_fields.is_none() && skipped.creation_timestamp.is_none() && skipped.uid.is_none()
        );

        let mut going = binding.clone();
        going.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
        assert!(indexed(&going).seen().unwrap().is_terminating());
        for (field, value) in [("subjects", None), ("subjects", Some(serde_json::Value::Null))] {
            let mut odd = serde_json::to_value(&binding).unwrap();
            match &value {
                Some(value) => odd[field] = value.clone(),
                None => _ = odd.as_object_mut().unwrap().remove(field),
            }
            let decoded: IndexedBinding = serde_json::from_value(odd).unwrap();
            assert_eq!(
                decoded.seen().unwrap().state_for(&wanted()),
                BindingState::Stale,
                "{field}: {value:?}"
            );
        }
        let odd: IndexedBinding =
            serde_json::from_value(serde_json::json!({"metadata": null, "roleRef": null, "subjects": null}))
                .unwrap();
        assert_eq!(odd.seen(), None, "read as a binding that is not kopper's");
        let mut no_role = serde_json::to_value(&binding).unwrap();
        no_role["roleRef"] = serde_json::Value::Null;
        let decoded: IndexedBinding = serde_json::from_value(no_role).unwrap();
        assert_eq!(decoded.seen().unwrap().state_for(&wanted()), BindingState::WrongRole);
    }

    #[test]
    fn a_relist_replaces_the_index_and_only_real_changes_wake() {
        let index = RwLock::new(Bindings::new());
        let mut relisted = Bindings::new();
        let binding = applied();
        assert_eq!(apply(&index, &mut relisted, Event::Init).0, Change::None);
        assert_eq!(apply(&index, &mut relisted, Event::InitApply(indexed(&binding))).0, Change::None);
        assert_eq!(
            apply(&index, &mut relisted, Event::InitDone),
            (Change::ListDone, vec![Box::from("team-1")])
        );
        assert_eq!(index.read().unwrap().len(), 1);

        assert_eq!(
            apply(&index, &mut relisted, Event::Apply(indexed(&binding))),
            (Change::None, vec![]),
            "no change"
        );
        let mut edited = binding.clone();
        edited.subjects.as_mut().unwrap()[0].name = "intruders".into();
        assert_eq!(
            apply(&index, &mut relisted, Event::Apply(indexed(&edited))),
            (Change::Changed, vec![Box::from("team-1")]),
            "an edit names its namespace, to be judged again"
        );
        let mut unlabelled = binding.clone();
        unlabelled.metadata.labels = None;
        assert_eq!(apply(&index, &mut relisted, Event::Apply(indexed(&unlabelled))).0, Change::Changed);
        assert!(index.read().unwrap().is_empty());
        assert_eq!(apply(&index, &mut relisted, Event::Apply(indexed(&binding))).0, Change::Changed);
        assert_eq!(apply(&index, &mut relisted, Event::Delete(indexed(&binding))).0, Change::Changed);

        apply(&index, &mut relisted, Event::Apply(indexed(&applied())));
        apply(&index, &mut relisted, Event::Init);
        assert_eq!(
            apply(&index, &mut relisted, Event::InitDone),
            (Change::ListDone, vec![Box::from("team-1")]),
            "a namespace whose binding went while the watch was down is judged again"
        );
        assert!(index.read().unwrap().is_empty(), "deleted while the watch was down");
    }
}
