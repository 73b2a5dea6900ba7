//! The bucket settings a BucketClass enforces (encryption, public-access block, lifecycle
//! rules) as kopper and the provider spell them, and when what the provider holds already is
//! what the class wants. An idle pass reads each setting and writes none: as with policies
//! ([`super::policy`]), S3 and compatible services return a setting in another spelling than
//! it was sent (rules in another order, an empty prefix as none, a KMS key as its ARN, a
//! `BucketKeyEnabled` added), and a plain comparison would rewrite it for ever.

use super::types::{BucketClassSpec, EncryptionAlgorithm, LifecycleRule as ClassRule};

/// A bucket's default encryption.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Encryption {
    /// `AES256` or `aws:kms` (as S3 names it).
    pub algorithm: String,
    pub kms_key_id: Option<String>,
}

/// The four public-access settings of a bucket; all false when it has none.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PublicAccessBlock {
    pub block_public_acls: bool,
    pub ignore_public_acls: bool,
    pub block_public_policy: bool,
    pub restrict_public_buckets: bool,
}

impl PublicAccessBlock {
    pub const ALL: Self = Self {
        block_public_acls: true,
        ignore_public_acls: true,
        block_public_policy: true,
        restrict_public_buckets: true,
    };
}

/// One lifecycle rule as kopper writes and reads it back: enabled, for one prefix, with the
/// expirations kopper manages.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct LifecycleRule {
    pub id: String,
    /// Empty for every object.
    pub prefix: String,
    pub enabled: bool,
    pub expiration_days: Option<i32>,
    pub noncurrent_version_expiration_days: Option<i32>,
    pub abort_incomplete_multipart_upload_days: Option<i32>,
}

/// What a class enforces on each of its buckets; `None` fields are left alone.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Enforced {
    pub encryption: Option<Encryption>,
    pub public_access_block: Option<PublicAccessBlock>,
    pub lifecycle: Option<Vec<LifecycleRule>>,
}

impl Enforced {
    /// What `class` enforces.
    pub fn of(class: &BucketClassSpec) -> Self {
        let days = |days: Option<u32>| days.map(|days| i32::try_from(days).unwrap_or(i32::MAX));
        let rule = |rule: &ClassRule| LifecycleRule {
            id: rule.id.clone(),
            prefix: rule.prefix.clone().unwrap_or_default(),
            enabled: true,
            expiration_days: days(rule.expiration_days),
            noncurrent_version_expiration_days: days(rule.noncurrent_version_expiration_days),
            abort_incomplete_multipart_upload_days: days(rule.abort_incomplete_multipart_upload_days),
        };
        Self {
            encryption: class.encryption.as_ref().map(|encryption| Encryption {
                algorithm: encryption.algorithm.as_str().to_owned(),
                kms_key_id: match encryption.algorithm {
                    EncryptionAlgorithm::AwsKms => encryption.kms_key_id.clone(),
                    EncryptionAlgorithm::Aes256 => None,
                },
            }),
            public_access_block: class.block_public_access.then_some(PublicAccessBlock::ALL),
            lifecycle: class.lifecycle_rules.as_ref().map(|rules| rules.iter().map(rule).collect()),
        }
    }
}

/// Whether `found` (what the bucket has, `None` for no default encryption) encrypts as
/// `wanted` does. Algorithms compare without case; a KMS key given by id or alias matches the
/// ARN the service may return for it (`…:key/<id>`, `…:alias/<name>`: the id after a `/`, the
/// alias after a `:`), so an idle pass writes nothing; a class that names no key accepts the
/// one the service chose.
pub fn encryption_holds(wanted: &Encryption, found: Option<&Encryption>) -> bool {
    let Some(found) = found else { return false };
    if !wanted.algorithm.eq_ignore_ascii_case(&found.algorithm) {
        return false;
    }
    match (&wanted.kms_key_id, &found.kms_key_id) {
        (None, _) => true,
        (Some(_), None) => false,
        (Some(wanted), Some(found)) => {
            wanted == found
                || found.starts_with("arn:")
                    && found.strip_suffix(wanted.as_str()).is_some_and(|head| {
                        let boundary = if wanted.starts_with("alias/") { ':' } else { '/' };
                        head.ends_with(boundary)
                    })
        }
    }
}

/// Whether `found` (the bucket's rules as read) are exactly `wanted`, in any order.
pub fn lifecycle_holds(wanted: &[LifecycleRule], found: &[LifecycleRule]) -> bool {
    let sorted = |rules: &[LifecycleRule]| {
        let mut rules = rules.to_vec();
        rules.sort();
        rules
    };
    sorted(wanted) == sorted(found)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn class(value: serde_json::Value) -> BucketClassSpec {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn the_built_in_class_enforces_nothing() {
        assert_eq!(Enforced::of(&BucketClassSpec::built_in()), Enforced::default());
    }

    #[test]
    fn a_class_enforces_what_it_sets_and_blocks_public_access_by_default() {
        let enforced = Enforced::of(&class(json!({
            "encryption": {"algorithm": "aws:kms", "kmsKeyId": "k1"},
            "lifecycleRules": [{"id": "logs", "prefix": "logs/", "expirationDays": 30}],
        })));
        assert_eq!(
            enforced.encryption,
            Some(Encryption { algorithm: "aws:kms".into(), kms_key_id: Some("k1".into()) })
        );
        assert_eq!(enforced.public_access_block, Some(PublicAccessBlock::ALL));
        let rules = enforced.lifecycle.unwrap();
        assert_eq!(
            (rules[0].prefix.as_str(), rules[0].expiration_days, rules[0].enabled),
            ("logs/", Some(30), true)
        );
        let open = Enforced::of(&class(json!({"blockPublicAccess": false, "lifecycleRules": []})));
        assert_eq!(open.public_access_block, None);
        assert_eq!(open.lifecycle, Some(vec![]), "an empty list removes every rule");
    }

    #[test]
    fn encryption_compares_algorithms_without_case_and_a_key_id_with_its_arn() {
        let aes = Encryption { algorithm: "AES256".into(), kms_key_id: None };
        assert!(encryption_holds(&aes, Some(&Encryption { algorithm: "aes256".into(), kms_key_id: None })));
        assert!(!encryption_holds(&aes, None), "no default encryption");
        let kms = Encryption { algorithm: "aws:kms".into(), kms_key_id: Some("1234".into()) };
        assert!(!encryption_holds(&kms, Some(&aes)));
        let arn = Encryption {
            algorithm: "aws:kms".into(),
            kms_key_id: Some("arn:aws:kms:us-east-1:1:key/1234".into()),
        };
        assert!(encryption_holds(&kms, Some(&arn)));
        let other =
            Encryption { kms_key_id: Some("arn:aws:kms:us-east-1:1:key/91234".into()), ..arn.clone() };
        assert!(!encryption_holds(&kms, Some(&other)), "a key whose id only ends the same");
        let any_key = Encryption { algorithm: "aws:kms".into(), kms_key_id: None };
        assert!(encryption_holds(&any_key, Some(&arn)), "no key named: the service's choice stands");
    }

    #[test]
    fn a_kms_alias_matches_the_alias_arn_the_service_returns() {
        let alias = Encryption { algorithm: "aws:kms".into(), kms_key_id: Some("alias/logs".into()) };
        let returned = |id: &str| Encryption { algorithm: "aws:kms".into(), kms_key_id: Some(id.into()) };
        assert!(encryption_holds(&alias, Some(&returned("arn:aws:kms:eu-west-1:1:alias/logs"))));
        assert!(encryption_holds(&alias, Some(&returned("alias/logs"))));
        assert!(!encryption_holds(&alias, Some(&returned("arn:aws:kms:eu-west-1:1:alias/old-logs"))));
        assert!(!encryption_holds(&alias, Some(&returned("arn:aws:kms:eu-west-1:1:key/alias/logs"))));
    }

    #[test]
    fn lifecycle_rules_compare_in_any_order_and_a_changed_day_is_a_change() {
        let rule = |id: &str, days: i32| LifecycleRule {
            id: id.into(),
            enabled: true,
            expiration_days: Some(days),
            ..LifecycleRule::default()
        };
        assert!(lifecycle_holds(&[rule("a", 1), rule("b", 2)], &[rule("b", 2), rule("a", 1)]));
        assert!(!lifecycle_holds(&[rule("a", 1)], &[rule("a", 2)]));
        assert!(!lifecycle_holds(&[rule("a", 1)], &[rule("a", 1), rule("b", 2)]));
        assert!(lifecycle_holds(&[], &[]));
    }
}
