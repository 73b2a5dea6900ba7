//! The sweep for credentials whose Bucket is gone. A Bucket is meant to leave only through
//! its finalizer, which deletes its IAM user, policy and keys; but a tenant may remove the
//! finalizer with a plain update while kopper holds the Bucket back (a bucket not empty, a
//! denial), and then nothing else would ever delete them: the key would keep working, and
//! once the bucket is deleted and its name taken by someone else, read their objects.
//!
//! So the leader sweeps at start and then every `--orphan-sweep-interval`. When the install
//! set a `--cluster-id` of its own ([`Scope::Everything`]; two clusters in one account with
//! the default one could not tell each other's users from orphans), it lists the IAM
//! users whose names start with this cluster's prefix, reads each one's tags, lists the
//! Buckets from the API server (not from the cache: a Bucket just created may not be there
//! yet), and deletes the keys, policy and user of every one whose tags name this cluster and
//! a Bucket uid that does not exist. Names alone prove nothing (another cluster's prefix may
//! start with this one's); a user whose tags cannot be read is left for the next sweep. Users
//! are listed before Buckets: a user made after that list cannot be in it, and a Bucket made
//! before its user is in the Bucket list. Bucket data is never touched here: `Retain` keeps
//! data, never credentials.
//!
//! Cost per sweep: ListUsers pages (100 users each) over the account, one ListUserTags per
//! user of this cluster, one paged list of Buckets from the API server; and for each orphan
//! ListAccessKeys, a DeleteAccessKey per key, DeleteUserPolicy and DeleteUser. Writes pass
//! the lease fence like every other provider write.
//!
//! Grant users (of BucketAccess objects, tagged with the grant's and the Bucket's uids) are
//! swept the same way: one whose BucketAccess or whose Bucket no longer exists is an orphan.
//! BucketAccesses are listed (after the users) only when a grant user was found. With the
//! default cluster id ([`Scope::GrantsOfLiveBuckets`]) the sweep still runs, over grant users
//! only: it lists those under this cluster's grants path (one ListUsers call per 100 grant
//! users, not a pass over the account) and deletes those whose Bucket exists here and whose
//! BucketAccess does not, such as a grant whose finalizer a tenant removed while kopper was
//! down. A grant's user is made only after its BucketAccess exists, so a user listed first
//! has its grant in the later list unless the grant is gone.
//!
//! Every backend Buckets may be on is swept: kopper's flags' and each BucketClass's own
//! (`spec.backend`), once per distinct backend identity (classes sharing a backend share its
//! sweep), with the class's cached provider. So the number of sweeps per round is bounded by
//! the number of classes, admin objects. A class whose credentials cannot be read is skipped
//! (and retried next round); the sweep waits for the class cache's first list, so that no
//! backend is forgotten at start.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use kube::api::ListParams;
use kube::{Api, ResourceExt};
use tracing::{debug, info, warn};

use kube::runtime::reflector::Store;

use super::Error;
use super::access_types::BucketAccess;
use super::backends::Backends;
use super::grant;
use super::names::{self, POLICY_NAME, TAG_CLUSTER, TAG_UID};
use super::provider::Provider;
use super::types::{Bucket, BucketClass};
use crate::runtime::cache::FirstList;

/// The kinds of identity kopper makes for a Bucket; each is found, proven and deleted the
/// same way, so that roles can join users here.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    User,
    Role,
}

/// An identity found in the account with the tags it carries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Found {
    pub kind: Kind,
    pub name: String,
    pub tags: BTreeMap<String, String>,
}

/// The identities made for a Bucket of `cluster` that no longer exists: their tags name this
/// cluster and a uid that is not among `live` Bucket uids. Untagged identities, and those of
/// other clusters, are never orphans.
pub fn orphans<'a>(found: &'a [Found], cluster: &str, live: &HashSet<String>) -> Vec<&'a Found> {
    found
        .iter()
        .filter(|found| found.tags.get(TAG_CLUSTER).is_some_and(|tag| tag == cluster))
        .filter(|found| found.tags.get(TAG_UID).is_some_and(|uid| !uid.is_empty() && !live.contains(uid)))
        .collect()
}

/// The backends to sweep: kopper's flags' and those of the BucketClasses.
pub struct Targets {
    pub backends: Arc<Backends>,
    pub classes: Store<BucketClass>,
    /// Marked once `classes` has had its first list.
    pub classes_listed: FirstList,
}

impl Targets {
    /// The provider of each distinct backend, kopper's flags' first.
    async fn providers(&self, client: &kube::Client) -> Vec<(String, Arc<dyn Provider>)> {
        let mut seen = HashSet::new();
        let mut providers = Vec::new();
        if let Some(provider) = self.backends.default_provider() {
            seen.insert(self.backends.identity(None));
            providers.push(("kopper's flags".to_owned(), provider));
        }
        let mut classes = self.classes.state();
        classes.sort_by_key(|class| class.name_any());
        for class in classes {
            let Some(backend) = &class.spec.backend else { continue };
            if !seen.insert(self.backends.identity(Some(backend))) {
                continue;
            }
            let name = class.name_any();
            match self.backends.provider(client, &name, Some(backend)).await {
                Ok(provider) => providers.push((format!("BucketClass {name}"), provider)),
                Err(error) => {
                    warn!(class = name, "the class's backend is not swept this time: {error}");
                    seen.remove(&self.backends.identity(Some(backend)));
                }
            }
        }
        providers
    }
}

/// What a sweep may prove orphaned, by what the cluster id tells apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// The install set a cluster id of its own: every user and role of this cluster whose
    /// Bucket (or, for a grant user, whose BucketAccess) no longer exists.
    Everything,
    /// The default cluster id, which another cluster in the account may share: only the users
    /// of grants gone from Buckets that exist here, listed under [`grant::grants_path`]. A
    /// Bucket's uid is its cluster's alone, so these are proven this cluster's; the users and
    /// roles of deleted Buckets are not (they may be the other cluster's).
    GrantsOfLiveBuckets,
}

/// Sweeps every backend at once and then every `interval`, until the task is aborted.
/// `keyless`: kopper makes roles (`--oidc-provider-arn`), so a denied ListRoles is worth a
/// warning; without it roles are still looked for (left from when it was set), and a denial is
/// only logged at debug level.
pub async fn run(
    client: kube::Client,
    targets: Targets,
    cluster: String,
    scope: Scope,
    interval: Duration,
    keyless: bool,
) {
    if !targets.classes_listed.wait().await {
        warn!("the sweep for credentials of deleted Buckets does not run: the BucketClass watch ended");
        return;
    }
    loop {
        for (backend, provider) in targets.providers(&client).await {
            match sweep(&client, provider.as_ref(), &cluster, scope, keyless).await {
                Ok(0) => {}
                Ok(deleted) => {
                    info!(
                        deleted,
                        backend,
                        "deleted the IAM users and roles of Buckets or BucketAccesses that no longer exist"
                    )
                }
                Err(error) => warn!(
                    backend,
                    "the sweep for credentials of deleted Buckets failed, retried next time: {error}"
                ),
            }
        }
        tokio::time::sleep(interval).await;
    }
}

/// One sweep; how many users and roles it deleted.
async fn sweep(
    client: &kube::Client,
    provider: &dyn Provider,
    cluster: &str,
    scope: Scope,
    keyless: bool,
) -> Result<usize, Error> {
    let path = match scope {
        Scope::Everything => "/".to_owned(),
        Scope::GrantsOfLiveBuckets => grant::grants_path(cluster),
    };
    let mut found = Vec::new();
    for name in provider.users(&path, &names::user_name_prefix(cluster)).await? {
        match provider.user_tags(&name).await {
            Ok(Some(tags)) => found.push(Found { kind: Kind::User, name, tags }),
            Ok(None) => {}
            // No proof either way: the next sweep looks again.
            Err(error) => warn!(user = name, "could not read the user's tags: {error}"),
        }
    }
    if scope == Scope::Everything {
        found.extend(roles(provider, cluster, keyless).await);
    }
    if found.is_empty() {
        return Ok(0);
    }
    let live = live_bucket_uids(client).await?;
    // A Bucket being deleted counts as live: its cleanup deletes its grants' users too, but
    // may be held (its class moved to another backend), and the sweep still covers the
    // backend it was made on while that is swept.
    let (mut doomed, orphaned): (Vec<&Found>, GrantRule) = match scope {
        Scope::Everything => (orphans(&found, cluster, &live), grant::is_orphaned_grant),
        Scope::GrantsOfLiveBuckets => (Vec::new(), grant::is_orphaned_grant_of_live_bucket),
    };
    if found.iter().any(|found| found.tags.contains_key(grant::TAG_GRANT_UID)) {
        let grants = live_grant_uids(client).await?;
        doomed.extend(
            found
                .iter()
                .filter(|found| found.kind == Kind::User && orphaned(&found.tags, cluster, &grants, &live)),
        );
    }
    let mut deleted = 0;
    for orphan in doomed {
        // One that cannot be deleted now does not keep the others' credentials alive.
        match delete(provider, orphan).await {
            Ok(()) => {
                info!(
                    kind = ?orphan.kind,
                    name = orphan.name,
                    "deleted the IAM identity (and its policy and keys) of a Bucket or BucketAccess that no longer exists"
                );
                deleted += 1;
            }
            Err(error) => {
                warn!(
                    name = orphan.name,
                    "could not delete an orphaned IAM identity, retried next time: {error}"
                )
            }
        }
    }
    Ok(deleted)
}

/// This cluster's roles with their tags. A denied ListRoles (an install that never gave kopper
/// the role permissions, because it uses no keyless access) is logged and counted
/// (`kopper_bucket_provider_calls_total{operation="ListRoles",outcome="access_denied"}`), and
/// the sweep goes on with the users.
async fn roles(provider: &dyn Provider, cluster: &str, keyless: bool) -> Vec<Found> {
    let names = match provider.roles(&names::role_path(cluster)).await {
        Ok(names) => names,
        Err(error) if keyless => {
            warn!("the sweep could not list IAM roles, so it looks at users only: {error}");
            return Vec::new();
        }
        Err(error) => {
            debug!("the sweep could not list IAM roles (keyless access is off): {error}");
            return Vec::new();
        }
    };
    let mut found = Vec::new();
    for name in names {
        match provider.role_tags(&name).await {
            Ok(Some(tags)) => found.push(Found { kind: Kind::Role, name, tags }),
            Ok(None) => {}
            Err(error) => warn!(role = name, "could not read the role's tags: {error}"),
        }
    }
    found
}

/// Which of a grant user's tags say it is an orphan, given the live grants and Buckets.
type GrantRule = fn(&BTreeMap<String, String>, &str, &HashSet<String>, &HashSet<String>) -> bool;

/// Every Bucket's uid, read from the API server page by page.
async fn live_bucket_uids(client: &kube::Client) -> Result<HashSet<String>, Error> {
    let api = Api::<Bucket>::all(client.clone());
    let mut uids = HashSet::new();
    // Buckets' metadata carries what tenants write (annotations): small pages.
    let mut params = ListParams::default().limit(crate::runtime::trim::TENANT_OBJECTS_PAGE_SIZE);
    loop {
        let page = api.list_metadata(&params).await.map_err(Error::kube("listing Buckets"))?;
        uids.extend(page.items.iter().filter_map(|bucket| bucket.uid()));
        match page.metadata.continue_ {
            Some(next) if !next.is_empty() => params = params.continue_token(&next),
            _ => return Ok(uids),
        }
    }
}

/// Every BucketAccess's uid, read from the API server page by page.
async fn live_grant_uids(client: &kube::Client) -> Result<HashSet<String>, Error> {
    let api = Api::<BucketAccess>::all(client.clone());
    let mut uids = HashSet::new();
    let mut params = ListParams::default().limit(crate::runtime::trim::TENANT_OBJECTS_PAGE_SIZE);
    loop {
        let page = api.list_metadata(&params).await.map_err(Error::kube("listing BucketAccesses"))?;
        uids.extend(page.items.iter().filter_map(|grant| grant.uid()));
        match page.metadata.continue_ {
            Some(next) if !next.is_empty() => params = params.continue_token(&next),
            _ => return Ok(uids),
        }
    }
}

async fn delete(provider: &dyn Provider, found: &Found) -> Result<(), Error> {
    match found.kind {
        Kind::User => {
            let user = &found.name;
            for key in provider.access_keys(user).await? {
                provider.delete_access_key(user, &key.id).await?;
            }
            provider.delete_user_policy(user, POLICY_NAME).await?;
            provider.delete_user(user).await?;
        }
        Kind::Role => {
            provider.delete_role_policy(&found.name, POLICY_NAME).await?;
            provider.delete_role(&found.name).await?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(name: &str, tags: &[(&str, &str)]) -> Found {
        let tags = tags.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        Found { kind: Kind::User, name: name.into(), tags }
    }

    fn names(found: Vec<&Found>) -> Vec<&str> {
        found.iter().map(|found| found.name.as_str()).collect()
    }

    #[test]
    fn a_user_of_this_cluster_whose_bucket_is_gone_is_an_orphan() {
        let found = [
            user("kopper-c1-a", &[(TAG_CLUSTER, "c1"), (TAG_UID, "gone")]),
            user("kopper-c1-b", &[(TAG_CLUSTER, "c1"), (TAG_UID, "live")]),
        ];
        let live = HashSet::from(["live".to_owned()]);
        assert_eq!(names(orphans(&found, "c1", &live)), ["kopper-c1-a"]);
    }

    #[test]
    fn users_of_other_clusters_or_without_kopper_s_tags_are_never_orphans() {
        let found = [
            user("kopper-c1-x-a", &[(TAG_CLUSTER, "c1-x"), (TAG_UID, "gone")]),
            user("kopper-c1-b", &[]),
            user("kopper-c1-c", &[(TAG_CLUSTER, "c1")]),
            user("kopper-c1-d", &[(TAG_CLUSTER, "c1"), (TAG_UID, "")]),
            user("kopper-c1-e", &[(TAG_UID, "gone")]),
        ];
        assert!(orphans(&found, "c1", &HashSet::new()).is_empty());
    }
}
