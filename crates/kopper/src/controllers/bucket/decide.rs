//! What to do with the bucket and the IAM user a Bucket wants, given what the provider holds:
//! pure decisions, so that adoption and refusal are tested without a server. The access key
//! decision is [`super::provider::plan_keys`].

use std::collections::BTreeMap;

use super::names::Owner;
use super::provider::BucketLookup;

/// The next step for the bucket under the wanted name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BucketStep {
    /// Nothing there: record the name in status, then create and tag it.
    Create,
    /// This Bucket's, with the wanted tags.
    Keep,
    /// This Bucket's, with other tags (the spec's `tags` changed): write them.
    Retag,
    /// An untagged bucket under the name this Bucket recorded before creating one: left by a
    /// crash between CreateBucket and PutBucketTagging, so ours, but only if it is empty
    /// (nobody held credentials for it yet). The check keeps a forged `status.bucketName`
    /// from handing kopper someone else's data.
    AdoptIfEmpty,
    /// Someone else's: another account's, another Bucket's, or one kopper did not create.
    Taken,
}

pub fn bucket_step(
    found: &BucketLookup,
    owner: &Owner,
    wanted_tags: &BTreeMap<String, String>,
    recorded_name: Option<&str>,
    name: &str,
) -> BucketStep {
    match found {
        BucketLookup::Missing => BucketStep::Create,
        BucketLookup::Ours { tags } if owner.owns(tags) && tags == wanted_tags => BucketStep::Keep,
        BucketLookup::Ours { tags } if owner.owns(tags) => BucketStep::Retag,
        BucketLookup::Ours { tags } if tags.is_empty() && recorded_name == Some(name) => {
            BucketStep::AdoptIfEmpty
        }
        BucketLookup::Ours { .. } | BucketLookup::OtherAccount => BucketStep::Taken,
    }
}

/// The next step for the Bucket's IAM user, from its tags (`None`: no such user).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UserStep {
    Create,
    Keep,
    /// A user of that name that is not this Bucket's: never touched.
    Taken,
}

pub fn user_step(found: Option<&BTreeMap<String, String>>, owner: &Owner) -> UserStep {
    match found {
        None => UserStep::Create,
        Some(tags) if owner.owns(tags) => UserStep::Keep,
        Some(_) => UserStep::Taken,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owner(uid: &str) -> Owner {
        Owner { cluster: "c".into(), namespace: "team-a".into(), name: "logs".into(), uid: uid.into() }
    }

    fn wanted() -> BTreeMap<String, String> {
        let mut tags = owner("u1").tags();
        tags.insert("team".into(), "a".into());
        tags
    }

    fn step(found: BucketLookup, recorded: Option<&str>) -> BucketStep {
        bucket_step(&found, &owner("u1"), &wanted(), recorded, "logs-bucket")
    }

    #[test]
    fn a_missing_bucket_is_created() {
        assert_eq!(step(BucketLookup::Missing, None), BucketStep::Create);
    }

    #[test]
    fn our_bucket_is_kept_or_retagged() {
        assert_eq!(step(BucketLookup::Ours { tags: wanted() }, None), BucketStep::Keep);
        assert_eq!(step(BucketLookup::Ours { tags: owner("u1").tags() }, None), BucketStep::Retag);
    }

    #[test]
    fn an_untagged_bucket_is_adopted_only_under_the_recorded_name_and_only_if_empty() {
        let untagged = || BucketLookup::Ours { tags: BTreeMap::new() };
        assert_eq!(step(untagged(), Some("logs-bucket")), BucketStep::AdoptIfEmpty);
        assert_eq!(step(untagged(), None), BucketStep::Taken);
        assert_eq!(step(untagged(), Some("other-bucket")), BucketStep::Taken);
    }

    #[test]
    fn buckets_of_others_are_taken_even_under_the_recorded_name() {
        let another_bucket = BucketLookup::Ours { tags: owner("u2").tags() };
        assert_eq!(step(another_bucket, Some("logs-bucket")), BucketStep::Taken);
        assert_eq!(step(BucketLookup::OtherAccount, Some("logs-bucket")), BucketStep::Taken);
        let someone = BucketLookup::Ours { tags: BTreeMap::from([("team".into(), "b".into())]) };
        assert_eq!(step(someone, Some("logs-bucket")), BucketStep::Taken);
    }

    #[test]
    fn a_user_is_created_kept_or_left_alone() {
        let me = owner("u1");
        assert_eq!(user_step(None, &me), UserStep::Create);
        assert_eq!(user_step(Some(&me.tags()), &me), UserStep::Keep);
        assert_eq!(user_step(Some(&owner("u2").tags()), &me), UserStep::Taken);
        assert_eq!(user_step(Some(&BTreeMap::new()), &me), UserStep::Taken);
    }
}
