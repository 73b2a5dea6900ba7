//! Namespace changes waiting to be served, merged by namespace: what the shared namespace
//! cache reports that can matter to a rule (name, labels, consent, deletion), with the
//! namespace as it was and as it is. Changes that arrive while a batch is being served
//! wait, merged, and are served together next: a burst of namespaces costs a few batches,
//! not one write round per namespace, and a lone namespace waits for no timer. What waits
//! is one entry per namespace name changed meanwhile, whatever the rate of changes.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use futures::Future;
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use super::events::CacheEvents;
use crate::controllers::replication::model::{NamespaceInfo, Rule};
use crate::runtime::cache::FirstList;
use crate::runtime::namespaces::{NamespaceEvent, NamespaceFeed, NamespaceMeta};

/// One namespace as it was and as it is (`None`: not there).
#[derive(Clone, Debug, PartialEq)]
pub struct NamespaceChange {
    pub before: Option<NamespaceInfo>,
    pub after: Option<NamespaceInfo>,
}

impl NamespaceChange {
    /// Whether anything a rule decides by changed: not so for a new resourceVersion alone,
    /// or an annotation kopper does not read.
    pub fn matters(&self) -> bool {
        self.before != self.after
    }

    fn name(&self) -> &str {
        self.after.as_ref().or(self.before.as_ref()).map_or("", |namespace| namespace.name.as_str())
    }
}

/// States a namespace went through between two batches that are kept to wake the rules
/// they concern; past this many, every rule is woken instead.
const MAX_STATES_PASSED: usize = 8;

/// How one namespace changed since it was last served.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Merged {
    /// As it was, or `None` if it is new (or was deleted and created again meanwhile: the
    /// new one holds nothing yet).
    before: Option<NamespaceInfo>,
    after: Option<NamespaceInfo>,
    /// The states in between, and the one before a deletion: the rules they concern may
    /// have acted on them and must look again.
    passed: Vec<NamespaceInfo>,
    /// More states passed than are kept.
    many: bool,
}

impl Merged {
    fn new(change: NamespaceChange) -> Self {
        Self { before: change.before, after: change.after, ..Self::default() }
    }

    fn then(&mut self, change: NamespaceChange) {
        let created_again = change.before.is_none();
        let passed =
            if created_again { [self.after.take(), self.before.take()] } else { [self.after.take(), None] };
        for state in passed.into_iter().flatten() {
            if !self.passed.contains(&state) {
                self.passed.push(state);
            }
        }
        if self.passed.len() > MAX_STATES_PASSED {
            self.passed.clear();
            self.many = true;
        }
        self.after = change.after;
    }

    fn matters(&self) -> bool {
        self.before != self.after || !self.passed.is_empty() || self.many
    }

    /// The namespace's name, if it exists now.
    pub fn current_name(&self) -> Option<&str> {
        self.after.as_ref().map(|namespace| namespace.name.as_str())
    }

    /// Whether `rule` sends copies to the namespace, or did at some point: its pass has
    /// work to do.
    pub fn concerns(&self, rule: &Rule) -> bool {
        let targeted = |namespace: &NamespaceInfo| rule.targets(namespace);
        self.many
            || self.before.as_ref().is_some_and(targeted)
            || self.after.as_ref().is_some_and(targeted)
            || self.passed.iter().any(targeted)
    }

    /// Whether the namespace's only news for `rule` is that `rule` now sends copies to it:
    /// nothing of `rule`'s is to be deleted or repaired there.
    pub fn only_arrives_for(&self, rule: &Rule) -> bool {
        !self.many
            && self.newly_targeted_by(rule).is_some()
            && !self.passed.iter().any(|namespace| rule.targets(namespace))
    }

    /// The namespace as it is, if `rule` sends copies to it now and did not before.
    pub fn newly_targeted_by(&self, rule: &Rule) -> Option<&NamespaceInfo> {
        let before = self.before.as_ref().is_some_and(|namespace| rule.targets(namespace));
        self.after.as_ref().filter(|namespace| !before && rule.targets(namespace))
    }
}

/// Namespace changes waiting to be served, merged by namespace.
#[derive(Default)]
pub struct NamespaceChanges {
    pending: Mutex<BTreeMap<String, Merged>>,
    arrived: Notify,
}

impl NamespaceChanges {
    pub fn push(&self, change: NamespaceChange) {
        if !change.matters() {
            return;
        }
        {
            // Every critical section here completes or changes nothing.
            let mut pending = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
            match pending.entry(change.name().to_owned()) {
                std::collections::btree_map::Entry::Occupied(mut entry) => entry.get_mut().then(change),
                std::collections::btree_map::Entry::Vacant(entry) => {
                    entry.insert(Merged::new(change));
                }
            }
        }
        self.arrived.notify_one();
    }

    /// Waits for changes and takes all that are waiting.
    pub async fn next_batch(&self) -> Vec<Merged> {
        loop {
            let batch = std::mem::take(&mut *self.pending.lock().unwrap_or_else(PoisonError::into_inner));
            let batch: Vec<Merged> = batch.into_values().filter(Merged::matters).collect();
            if !batch.is_empty() {
                return batch;
            }
            self.arrived.notified().await;
        }
    }
}

/// Follows the shared namespace cache until shutdown, adding each change that can matter to
/// a rule (name, labels, consent, deletion), with the namespace as it was and as it is, to
/// `changes`, for the engine to serve at once. A resync wakes every rule instead:
/// what changed meanwhile is unknown.
pub fn follow(
    mut feed: NamespaceFeed,
    synced: FirstList,
    events: Arc<dyn CacheEvents>,
    changes: Arc<NamespaceChanges>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let follow = async {
            loop {
                match feed.next().await {
                    NamespaceEvent::Resync => {
                        synced.mark_ready();
                        events.relisted();
                    }
                    NamespaceEvent::Changed { before, after } => {
                        let info = |namespace: Option<Arc<NamespaceMeta>>| {
                            namespace.map(|namespace| NamespaceInfo::from_meta(&namespace.metadata))
                        };
                        changes.push(NamespaceChange { before: info(before), after: info(after) });
                    }
                }
            }
        };
        tokio::select! {
            () = follow => {}
            () = shutdown => {}
        }
        synced.mark_stopped();
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn namespace(name: &str, labels: &[(&str, &str)]) -> NamespaceInfo {
        NamespaceInfo {
            name: name.to_owned(),
            labels: labels.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect(),
            active: true,
            ..NamespaceInfo::default()
        }
    }

    fn change(before: Option<&NamespaceInfo>, after: Option<&NamespaceInfo>) -> NamespaceChange {
        NamespaceChange { before: before.cloned(), after: after.cloned() }
    }

    fn merged(changes: &[NamespaceChange]) -> Vec<Merged> {
        let pending = NamespaceChanges::default();
        changes.iter().cloned().for_each(|change| pending.push(change));
        let batch = std::mem::take(&mut *pending.pending.lock().unwrap());
        batch.into_values().filter(Merged::matters).collect()
    }

    #[test]
    fn a_namespace_changed_twice_keeps_how_it_was_first_and_how_it_is_last() {
        let first = namespace("team-a", &[]);
        let second = namespace("team-a", &[("tier", "gold")]);
        let other = namespace("team-b", &[]);
        let batch = merged(&[
            change(None, Some(&first)),
            change(Some(&first), Some(&second)),
            change(None, Some(&other)),
        ]);
        assert_eq!(batch.len(), 2);
        assert_eq!((batch[0].before.as_ref(), batch[0].after.as_ref()), (None, Some(&second)));
        assert_eq!(batch[0].passed, [first]);
    }

    #[test]
    fn a_namespace_created_and_deleted_before_it_is_served_still_wakes_its_rules() {
        let created = namespace("team-a", &[]);
        let batch = merged(&[change(None, Some(&created)), change(Some(&created), None)]);
        assert_eq!(batch.len(), 1);
        assert_eq!((batch[0].before.as_ref(), batch[0].after.as_ref()), (None, None));
        assert_eq!(batch[0].passed, [created], "a pass may have copied into it meanwhile");
    }

    #[test]
    fn a_namespace_deleted_and_created_again_is_new() {
        let old = namespace("team-a", &[("tier", "gold")]);
        let batch = merged(&[change(Some(&old), None), change(None, Some(&old))]);
        assert_eq!(batch.len(), 1);
        assert_eq!(batch[0].before, None, "the new namespace holds none of the old one's copies");
        assert_eq!(batch[0].after.as_ref(), Some(&old));
    }

    #[test]
    fn labels_that_flap_back_still_wake_the_rules_of_the_state_in_between() {
        let gold = namespace("team-a", &[("tier", "gold")]);
        let silver = namespace("team-a", &[("tier", "silver")]);
        let batch = merged(&[change(Some(&gold), Some(&silver)), change(Some(&silver), Some(&gold))]);
        assert_eq!(batch.len(), 1);
        assert_eq!(batch[0].passed, [silver]);
    }

    #[test]
    fn past_a_few_states_every_rule_is_woken_and_nothing_more_is_kept() {
        let states: Vec<NamespaceInfo> =
            (0..20).map(|n| namespace("team-a", &[("n", &n.to_string())])).collect();
        let changes: Vec<NamespaceChange> =
            states.windows(2).map(|pair| change(Some(&pair[0]), Some(&pair[1]))).collect();
        let batch = merged(&changes);
        assert!(batch[0].many);
        assert!(batch[0].passed.len() <= MAX_STATES_PASSED);
    }

    #[test]
    fn only_changes_to_what_rules_read_matter() {
        let before = namespace("team-a", &[("tier", "gold")]);
        assert!(!change(Some(&before), Some(&before)).matters());
        assert!(change(Some(&before), Some(&namespace("team-a", &[]))).matters());
        assert!(merged(&[change(Some(&before), Some(&before))]).is_empty());
    }

    /// A rule copying into namespaces labelled `tier: gold`.
    fn gold_rule() -> Rule {
        use crate::controllers::replication::model::{ObjectKind, RuleId, SourceMatch, TargetMatch};
        Rule {
            id: RuleId::replication_rule("gold"),
            uid: "uid".to_owned(),
            kind: ObjectKind::ConfigMap,
            shape: Default::default(),
            deletion_policy: Default::default(),
            sources: SourceMatch { namespaces: vec!["src".to_owned()], ..SourceMatch::default() },
            targets: TargetMatch::Matching {
                selector: Some(kube::core::Selector::from_iter([("tier", "gold")])),
                include: vec![],
                exclude: vec![],
                protected: crate::tenancy::ProtectedNamespaces::default(),
            },
        }
    }

    #[test]
    fn only_a_namespace_a_rule_newly_targets_and_never_did_meanwhile_is_news_for_its_status_alone() {
        let rule = gold_rule();
        let gold = namespace("team-a", &[("tier", "gold")]);
        let plain = namespace("team-a", &[]);
        let only_arrives = |changes: &[NamespaceChange]| merged(changes)[0].only_arrives_for(&rule);
        assert!(only_arrives(&[change(None, Some(&gold))]), "a new namespace");
        assert!(only_arrives(&[change(Some(&plain), Some(&gold))]), "labelled into the rule's targets");
        assert!(!only_arrives(&[change(Some(&gold), Some(&plain))]), "its copies there must go");
        assert!(!only_arrives(&[change(None, Some(&plain))]), "not a target");
        let flapped = [change(Some(&gold), Some(&plain)), change(Some(&plain), Some(&gold))];
        assert!(!only_arrives(&flapped), "a pass may have deleted its copies meanwhile");
        let states: Vec<NamespaceInfo> =
            (0..20).map(|n| namespace("team-a", &[("n", &n.to_string())])).chain([gold.clone()]).collect();
        let many: Vec<NamespaceChange> =
            states.windows(2).map(|pair| change(Some(&pair[0]), Some(&pair[1]))).collect();
        assert!(!only_arrives(&many), "too many states passed to tell");
    }
}
