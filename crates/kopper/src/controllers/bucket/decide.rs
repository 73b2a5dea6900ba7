//! What to do with the bucket and the IAM user a Bucket wants, given what the provider holds:
//! pure decisions, so that adoption and refusal are tested without a server. The access key
//! decision is [`super::provider::plan_keys`].

use std::collections::BTreeMap;

use super::names::Owner;
use super::provider::BucketLookup;

/// What the Bucket's status says about the bucket name being looked at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Recorded {
    /// Nothing: status names no bucket, or another one.
    Nothing,
    /// kopper recorded the name before creating the bucket, and has not been Ready with it.
    Creating,
    /// The Bucket was Ready with this bucket (its credentials were issued for it).
    Ready,
}

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
    /// The bucket this Bucket was Ready with no longer carries kopper's tags (a tagging tool
    /// replaced them, say): reported, nothing adopted or revoked, so its data and the
    /// tenant's access stay while a person looks.
    TagsLost,
    /// Another Bucket's (of this or another cluster): it carries that Bucket's tags; or
    /// another account's now, though this Bucket was Ready with it (deleted outside kopper
    /// and the name taken since). Either way whatever credentials this Bucket holds for the
    /// name are revoked: its policy would let the tenant's workload write into someone
    /// else's bucket, or read what they put there.
    OtherBucket,
    /// Someone else's: another account's, or one kopper did not create. Reported, and
    /// nothing is touched.
    Taken,
}

pub fn bucket_step(
    found: &BucketLookup,
    owner: &Owner,
    wanted_tags: &BTreeMap<String, String>,
    recorded: Recorded,
) -> BucketStep {
    match found {
        BucketLookup::Missing => BucketStep::Create,
        BucketLookup::Ours { tags } if owner.owns(tags) && tags == wanted_tags => BucketStep::Keep,
        BucketLookup::Ours { tags } if owner.owns(tags) => BucketStep::Retag,
        BucketLookup::Ours { tags } if owner.is_another_owner(tags) => BucketStep::OtherBucket,
        BucketLookup::Ours { .. } if recorded == Recorded::Ready => BucketStep::TagsLost,
        BucketLookup::OtherAccount if recorded == Recorded::Ready => BucketStep::OtherBucket,
        BucketLookup::Ours { tags } if tags.is_empty() && recorded == Recorded::Creating => {
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

    fn step(found: BucketLookup, recorded: Recorded) -> BucketStep {
        bucket_step(&found, &owner("u1"), &wanted(), recorded)
    }

    #[test]
    fn a_missing_bucket_is_created() {
        assert_eq!(step(BucketLookup::Missing, Recorded::Nothing), BucketStep::Create);
    }

    #[test]
    fn our_bucket_is_kept_or_retagged() {
        assert_eq!(step(BucketLookup::Ours { tags: wanted() }, Recorded::Nothing), BucketStep::Keep);
        assert_eq!(step(BucketLookup::Ours { tags: owner("u1").tags() }, Recorded::Ready), BucketStep::Retag);
    }

    #[test]
    fn an_untagged_bucket_is_adopted_only_under_the_recorded_name_and_only_if_empty() {
        let untagged = || BucketLookup::Ours { tags: BTreeMap::new() };
        assert_eq!(step(untagged(), Recorded::Creating), BucketStep::AdoptIfEmpty);
        assert_eq!(step(untagged(), Recorded::Nothing), BucketStep::Taken);
    }

    /// The bucket a Bucket was Ready with, deleted outside kopper and created since by
    /// another account (which S3 confirms: not among this account's buckets): the Bucket's
    /// credentials must stop reaching it. A name never Ready is only refused.
    #[test]
    fn the_ready_bucket_now_another_account_s_revokes_the_credentials() {
        assert_eq!(step(BucketLookup::OtherAccount, Recorded::Ready), BucketStep::OtherBucket);
        assert_eq!(step(BucketLookup::OtherAccount, Recorded::Creating), BucketStep::Taken);
        assert_eq!(step(BucketLookup::OtherAccount, Recorded::Nothing), BucketStep::Taken);
    }

    #[test]
    fn buckets_of_others_are_taken_even_under_the_recorded_name() {
        let another_bucket = BucketLookup::Ours { tags: owner("u2").tags() };
        assert_eq!(step(another_bucket, Recorded::Creating), BucketStep::OtherBucket);
        assert_eq!(step(BucketLookup::OtherAccount, Recorded::Creating), BucketStep::Taken);
        let someone = BucketLookup::Ours { tags: BTreeMap::from([("team".into(), "b".into())]) };
        assert_eq!(step(someone, Recorded::Creating), BucketStep::Taken);
    }

    #[test]
    fn the_ready_bucket_that_lost_its_tags_is_reported_not_taken() {
        let stripped = BucketLookup::Ours { tags: BTreeMap::new() };
        assert_eq!(step(stripped, Recorded::Ready), BucketStep::TagsLost);
        let replaced = BucketLookup::Ours { tags: BTreeMap::from([("cost-center".into(), "42".into())]) };
        assert_eq!(step(replaced, Recorded::Ready), BucketStep::TagsLost);
        let another_bucket = BucketLookup::Ours { tags: owner("u2").tags() };
        assert_eq!(step(another_bucket, Recorded::Ready), BucketStep::OtherBucket);
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
