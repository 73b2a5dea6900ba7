//! Names, tags and the policy of what a Bucket owns: pure functions of the Bucket and the
//! cluster id, so every reconcile (and every replica) derives the same ones.

use std::collections::BTreeMap;

use serde_json::json;

/// Tag keys kopper puts on the bucket and the IAM user to recognise them as a Bucket's.
pub const TAG_CLUSTER: &str = "kopper.dev/cluster";
pub const TAG_NAMESPACE: &str = "kopper.dev/namespace";
pub const TAG_NAME: &str = "kopper.dev/name";
pub const TAG_UID: &str = "kopper.dev/uid";

/// Longest S3 bucket name; IAM user names may have 64 characters.
const BUCKET_NAME_MAX: usize = 63;
const USER_NAME_MAX: usize = 64;
const ROLE_NAME_MAX: usize = 64;
/// Hex digits of the digest that keep derived user names and label values unique when the
/// readable part is cut.
const DIGEST_CHARS: usize = 8;
/// Hex digits (80 bits) of the digest ending a derived bucket name: too many to search for a
/// collision.
const BUCKET_DIGEST_CHARS: usize = 20;

/// Which Bucket object a provider resource belongs to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Owner {
    pub cluster: String,
    pub namespace: String,
    pub name: String,
    pub uid: String,
}

impl Owner {
    /// The tags that mark a bucket or user as this Bucket's.
    pub fn tags(&self) -> BTreeMap<String, String> {
        BTreeMap::from([
            (TAG_CLUSTER.to_owned(), self.cluster.clone()),
            (TAG_NAMESPACE.to_owned(), self.namespace.clone()),
            (TAG_NAME.to_owned(), self.name.clone()),
            (TAG_UID.to_owned(), self.uid.clone()),
        ])
    }

    /// Whether `tags` (of a bucket or user) say it belongs to this Bucket. The uid decides:
    /// a Bucket deleted and recreated under the same name does not inherit the old one's
    /// resources by accident of naming.
    pub fn owns(&self, tags: &BTreeMap<String, String>) -> bool {
        tags.get(TAG_CLUSTER) == Some(&self.cluster) && tags.get(TAG_UID) == Some(&self.uid)
    }

    /// Whether `tags` name another Bucket (or another cluster) as the owner: strong evidence,
    /// unlike missing tags, which a tagging tool may have replaced.
    pub fn is_another_owner(&self, tags: &BTreeMap<String, String>) -> bool {
        tags.get(TAG_UID).is_some_and(|uid| *uid != self.uid)
            || tags.get(TAG_CLUSTER).is_some_and(|cluster| *cluster != self.cluster)
    }

    /// The bucket name kopper derives when `spec.bucketName` is not set:
    /// `<cluster>-<namespace>-<name>` made valid for S3, cut to fit, and ended by 80 bits of a
    /// digest of the three and the Bucket's uid. The uid is chosen by the API server when the
    /// Bucket is created and is visible only to those who may read the Bucket, so nobody
    /// else, in this cluster or another sharing the account, can know the name before the
    /// bucket exists and take it first; and 80 bits leave no collision to search for.
    pub fn default_bucket_name(&self) -> String {
        let digest = digest_hex(&[self.cluster.as_str(), &self.namespace, &self.name, &self.uid].join("/"));
        derived_name_with(
            &[&self.cluster, &self.namespace, &self.name],
            &digest[..BUCKET_DIGEST_CHARS],
            BUCKET_NAME_MAX,
        )
    }

    /// What every derived bucket name starts with, and so no explicit one may: otherwise a
    /// tenant could take the name another Bucket derives (its inputs are no secret).
    pub fn reserved_prefix(&self) -> String {
        format!("{}-", self.cluster)
    }

    /// The IAM user for this Bucket's credentials, derived like the default bucket name.
    pub fn user_name(&self) -> String {
        derived_name(&["kopper", &self.cluster, &self.namespace, &self.name], USER_NAME_MAX)
    }

    /// The IAM role of a Bucket in mode `ServiceAccount`, under the path [`role_path`] of this
    /// cluster: `kopper-<cluster>-<namespace>-<name>` cut to fit IAM's 64 characters and ended
    /// by 80 bits of a digest that takes in the Bucket's uid, as derived bucket names are. A
    /// tenant of another namespace can neither know the name before the role exists nor grind
    /// a Bucket name whose role name collides with it, and so cannot squat it (RoleNameTaken).
    /// It starts with [`user_name_prefix`], which kopper's own IAM policy is scoped to.
    pub fn role_name(&self) -> String {
        let digest = digest_hex(&[self.cluster.as_str(), &self.namespace, &self.name, &self.uid].join("/"));
        derived_name_with(
            &["kopper", &self.cluster, &self.namespace, &self.name],
            &digest[..BUCKET_DIGEST_CHARS],
            ROLE_NAME_MAX,
        )
    }
}

/// The IAM path of every role kopper makes for `cluster`: `/kopper/<cluster>/`. The sweep
/// lists only these (ListRoles by path prefix), then proves each by its tags; the closing
/// slash keeps another cluster whose id starts with this one's out of the listing.
pub fn role_path(cluster: &str) -> String {
    format!("/kopper/{cluster}/")
}

/// The role name an ARN ends with (`arn:aws:iam::123:role/kopper/c/name` gives `name`), for
/// telling which Bucket's role a ServiceAccount's annotation names; `None` for what is not a
/// role ARN.
pub fn role_name_in_arn(arn: &str) -> Option<&str> {
    let (_, resource) = arn.strip_prefix("arn:")?.split_once(":iam::")?;
    let (_, path_and_name) = resource.split_once(":role/")?;
    path_and_name.rsplit('/').next().filter(|name| !name.is_empty())
}

/// The cluster's OIDC provider, as the trust policy of a role for a ServiceAccount names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OidcProvider {
    /// `arn:aws:iam::<account>:oidc-provider/<issuer>`.
    pub arn: String,
    /// The issuer without its scheme (`oidc.eks.<region>.amazonaws.com/id/<id>`), which the
    /// trust policy's condition keys start with.
    pub issuer: String,
}

impl OidcProvider {
    /// Parses `--oidc-provider-arn`: the issuer is what follows `oidc-provider/`.
    pub fn from_arn(arn: &str) -> Result<Self, String> {
        let issuer = arn
            .strip_prefix("arn:")
            .and_then(|rest| rest.split_once(":oidc-provider/"))
            .map(|(_, issuer)| issuer.trim_end_matches('/'))
            .filter(|issuer| {
                !issuer.is_empty() && !issuer.contains("://") && !issuer.contains(char::is_whitespace)
            });
        match issuer {
            Some(issuer) if arn.split(':').count() >= 6 => {
                Ok(Self { arn: arn.to_owned(), issuer: issuer.to_owned() })
            }
            _ => Err(format!(
                "`{arn}` is not an IAM OIDC provider ARN: use arn:aws:iam::<account>:oidc-provider/<issuer \
                 without https://>, as `aws iam list-open-id-connect-providers` shows it"
            )),
        }
    }
}

/// The audience the pod identity webhook puts in a ServiceAccount's projected token for STS.
pub const STS_AUDIENCE: &str = "sts.amazonaws.com";

/// The trust policy of a Bucket's role: exactly the ServiceAccount `namespace/name`, through
/// the cluster's OIDC provider, with a token meant for STS.
pub fn trust_policy(oidc: &OidcProvider, namespace: &str, service_account: &str) -> serde_json::Value {
    json!({
        "Version": "2012-10-17",
        "Statement": [{
            "Effect": "Allow",
            "Principal": {"Federated": oidc.arn},
            "Action": "sts:AssumeRoleWithWebIdentity",
            "Condition": {"StringEquals": {
                format!("{}:sub", oidc.issuer): format!("system:serviceaccount:{namespace}:{service_account}"),
                format!("{}:aud", oidc.issuer): STS_AUDIENCE,
            }},
        }],
    })
}

/// What the name of every IAM user kopper derives for this cluster starts with: the sweep
/// for orphans lists only these, then proves each by its tags. The cluster id has at most 20
/// characters, so no cut of a derived name reaches into it.
pub fn user_name_prefix(cluster: &str) -> String {
    format!("kopper-{cluster}-")
}

/// The IAM path of a Bucket's own user: none, as kopper has always made them (a user's path
/// cannot be changed by an update that keeps its ARN, so existing users keep theirs).
pub const BUCKET_USER_PATH: &str = "/";

fn derived_name(parts: &[&str], max: usize) -> String {
    let digest = digest_hex(&parts.join("/"));
    derived_name_with(parts, &digest[..DIGEST_CHARS], max)
}

/// `parts` made readable and valid for S3 and IAM, cut to leave room for `digest`, which ends it.
fn derived_name_with(parts: &[&str], digest: &str, max: usize) -> String {
    let readable: String = parts
        .join("-")
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_lowercase() } else { '-' })
        .collect();
    let room = max - digest.len() - 1;
    let readable = readable.get(..room).unwrap_or(&readable).trim_matches('-');
    format!("{readable}-{digest}")
}

/// The SHA-256 of `text` in hex (64 digits).
pub fn digest_hex(text: &str) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, text.as_bytes());
    digest.as_ref().iter().map(|byte| format!("{byte:02x}")).collect()
}

/// ARN of an S3 bucket (the partition of every commercial region).
pub fn bucket_arn(bucket: &str) -> String {
    format!("arn:aws:s3:::{bucket}")
}

/// Name of the inline policy kopper puts on the user.
pub const POLICY_NAME: &str = "kopper-bucket-access";

/// The inline user policy: the bucket itself (list, location, multipart uploads) and its
/// objects (read, write, delete, all versions), and nothing else.
pub fn policy_document(bucket: &str) -> serde_json::Value {
    let arn = bucket_arn(bucket);
    json!({
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "Bucket",
                "Effect": "Allow",
                "Action": ["s3:ListBucket", "s3:ListBucketVersions", "s3:GetBucketLocation", "s3:ListBucketMultipartUploads"],
                "Resource": [arn],
            },
            {
                "Sid": "Objects",
                "Effect": "Allow",
                "Action": [
                    "s3:GetObject", "s3:GetObjectVersion", "s3:PutObject", "s3:DeleteObject",
                    "s3:DeleteObjectVersion", "s3:AbortMultipartUpload", "s3:ListMultipartUploadParts",
                ],
                "Resource": [format!("{arn}/*")],
            },
        ],
    })
}

/// A label value naming a Kubernetes object: its name when that fits in a label (63
/// characters), otherwise the name cut and ended by a digest.
pub fn label_value(name: &str) -> String {
    if name.len() <= 63 { name.to_owned() } else { derived_name(&[name], 63) }
}

/// Why `spec.tags` cannot be put on a bucket, in S3's rules for tags, plus the `kopper.dev/`
/// keys kopper owns (a tenant must not be able to claim another Bucket's bucket by them).
pub fn tags_problem(tags: &BTreeMap<String, String>) -> Option<String> {
    let allowed = |c: char| c.is_alphanumeric() || " _.:/=+-@".contains(c);
    for (key, value) in tags {
        if key.is_empty() || key.chars().count() > 128 {
            return Some(format!("key {key:?} must have 1 to 128 characters"));
        }
        if value.chars().count() > 256 {
            return Some(format!("the value of {key:?} must have at most 256 characters"));
        }
        if key.starts_with("aws:") || key.starts_with("kopper.dev/") {
            return Some(format!(
                "key {key:?} uses a prefix reserved for AWS (aws:) or kopper (kopper.dev/)"
            ));
        }
        if !key.chars().all(allowed) || !value.chars().all(allowed) {
            return Some(format!(
                "{key:?}: keys and values may hold only letters, digits, spaces and _ . : / = + - @"
            ));
        }
    }
    None
}

/// Why an explicit bucket name cannot be used, beyond what the CRD schema checks.
pub fn bucket_name_problem(name: &str) -> Option<&'static str> {
    if name.contains("..") {
        return Some("must not contain two dots in a row");
    }
    if name.split('.').count() == 4 && name.split('.').all(|part| part.parse::<u8>().is_ok()) {
        return Some("must not look like an IP address");
    }
    if name.starts_with("xn--") || name.ends_with("-s3alias") || name.ends_with("--ol-s3") {
        return Some("must not use a prefix or suffix S3 reserves (xn--, -s3alias, --ol-s3)");
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_follow_s3_rules_and_leave_kopper_and_aws_keys_alone() {
        let tags = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
        };
        assert_eq!(tags_problem(&tags(&[("team", "a"), ("cost-center", "42/b")])), None);
        for bad in [
            tags(&[("kopper.dev/uid", "someone-elses")]),
            tags(&[("aws:cloudformation:stack-name", "x")]),
            tags(&[(&"k".repeat(129), "x")]),
            tags(&[("team", &"v".repeat(257))]),
            tags(&[("team", "a;b")]),
        ] {
            let problem = tags_problem(&bad).expect("refused");
            assert!(!problem.is_empty());
        }
    }

    #[test]
    fn label_values_fit_in_a_label() {
        assert_eq!(label_value("logs"), "logs");
        let long = "a".repeat(200);
        let value = label_value(&long);
        assert!(value.len() <= 63 && value.ends_with(|c: char| c.is_ascii_alphanumeric()), "{value}");
        assert_ne!(label_value(&long), label_value(&"a".repeat(201)));
    }

    #[test]
    fn derived_names_start_with_the_reserved_prefix() {
        let owner =
            Owner { cluster: "prod".into(), namespace: "b".into(), name: "data".into(), uid: "u".into() };
        assert!(owner.default_bucket_name().starts_with(&owner.reserved_prefix()));
    }

    fn owner(namespace: &str, name: &str) -> Owner {
        Owner { cluster: "prod".into(), namespace: namespace.into(), name: name.into(), uid: "u-1".into() }
    }

    fn valid_bucket_name(name: &str) -> bool {
        (3..=63).contains(&name.len())
            && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
            && name.starts_with(|c: char| c.is_ascii_alphanumeric())
            && name.ends_with(|c: char| c.is_ascii_alphanumeric())
            && bucket_name_problem(name).is_none()
    }

    #[test]
    fn default_names_are_readable_valid_and_distinct_where_dashes_would_collide() {
        let a = owner("a-b", "c").default_bucket_name();
        let b = owner("a", "b-c").default_bucket_name();
        assert!(a.starts_with("prod-a-b-c-"), "{a}");
        assert_ne!(a, b);
        assert!(valid_bucket_name(&a) && valid_bucket_name(&b));
    }

    #[test]
    fn long_names_are_cut_to_fit_and_stay_valid() {
        let long = owner(&"n".repeat(63), &format!("{}.x", "m".repeat(250)));
        let bucket = long.default_bucket_name();
        assert_eq!(bucket.len(), 63);
        assert!(valid_bucket_name(&bucket), "{bucket}");
        let user = long.user_name();
        assert!(user.len() <= 64 && user.starts_with("kopper-prod-"), "{user}");
        assert_ne!(bucket, owner(&"n".repeat(63), &format!("{}.y", "m".repeat(250))).default_bucket_name());
    }

    /// A role name holds the Bucket's uid and 80 bits of digest, fits IAM (64 characters of
    /// letters, digits and `+=,.@_-`), and starts with the prefix kopper's IAM policy allows.
    #[test]
    fn role_names_hold_the_uid_and_fit_iam() {
        let a = owner("team", "data");
        let b = Owner { uid: "u-2".into(), ..a.clone() };
        assert_ne!(a.role_name(), b.role_name(), "a Bucket recreated under its name gets another role");
        let digest = a.role_name().rsplit('-').next().unwrap().to_owned();
        assert_eq!(digest.len(), 20, "{}", a.role_name());
        assert!(a.role_name().starts_with("kopper-prod-team-data-"), "{}", a.role_name());
        let long = Owner {
            cluster: "c".repeat(20),
            namespace: "n".repeat(63),
            name: format!("{}.x", "m".repeat(250)),
            uid: "u".into(),
        };
        let role = long.role_name();
        assert!(role.len() <= 64, "{role}");
        assert!(role.starts_with(&user_name_prefix(&long.cluster)), "{role}");
        assert!(role.chars().all(|c| c.is_ascii_alphanumeric() || c == '-'), "{role}");
        assert_eq!(a.user_name(), owner("team", "data").user_name(), "user names stay as they are");
    }

    /// Another cluster's tenant who knows a Bucket's cluster, namespace and name still cannot
    /// know the bucket name kopper will derive for it: that needs the Bucket's uid.
    #[test]
    fn derived_bucket_names_hold_the_uid_and_80_bits_of_digest() {
        let a = owner("team", "data");
        let b = Owner { uid: "u-2".into(), ..a.clone() };
        assert_ne!(a.default_bucket_name(), b.default_bucket_name());
        let digest = a.default_bucket_name().rsplit('-').next().unwrap().to_owned();
        assert_eq!(digest.len(), 20, "{digest}");
        assert!(valid_bucket_name(&a.default_bucket_name()));
    }

    #[test]
    fn ownership_is_by_cluster_and_uid_not_by_name() {
        let mine = owner("team", "data");
        assert!(mine.owns(&mine.tags()));
        let recreated = Owner { uid: "u-2".into(), ..mine.clone() };
        assert!(!recreated.owns(&mine.tags()));
        assert!(!mine.owns(&BTreeMap::new()));
    }

    #[test]
    fn the_policy_allows_this_bucket_and_its_objects_only() {
        let policy = policy_document("data").to_string();
        assert!(policy.contains("\"arn:aws:s3:::data\"") && policy.contains("\"arn:aws:s3:::data/*\""));
        assert!(!policy.contains("\"*\"") && !policy.contains("s3:*"));
    }

    #[test]
    fn the_trust_policy_names_exactly_one_service_account_and_sts() {
        let oidc = OidcProvider::from_arn(
            "arn:aws:iam::123456789012:oidc-provider/oidc.eks.eu-west-1.amazonaws.com/id/ABC",
        )
        .unwrap();
        assert_eq!(oidc.issuer, "oidc.eks.eu-west-1.amazonaws.com/id/ABC");
        let policy = trust_policy(&oidc, "team-a", "app");
        let conditions = &policy["Statement"][0]["Condition"]["StringEquals"];
        assert_eq!(
            conditions["oidc.eks.eu-west-1.amazonaws.com/id/ABC:sub"],
            "system:serviceaccount:team-a:app"
        );
        assert_eq!(conditions["oidc.eks.eu-west-1.amazonaws.com/id/ABC:aud"], "sts.amazonaws.com");
        assert_eq!(policy["Statement"][0]["Principal"]["Federated"], oidc.arn);
        for bad in ["", "arn:aws:iam::1:role/x", "arn:aws:iam::1:oidc-provider/", "https://oidc.example"] {
            assert!(OidcProvider::from_arn(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_role_arn_names_its_role_whatever_its_path() {
        assert_eq!(
            role_name_in_arn("arn:aws:iam::123:role/kopper/c1/kopper-c1-a-b-1234"),
            Some("kopper-c1-a-b-1234")
        );
        assert_eq!(role_name_in_arn("arn:aws:iam::123:role/plain"), Some("plain"));
        assert_eq!(role_name_in_arn("arn:aws:iam::123:user/kopper/x"), None);
        assert_eq!(role_name_in_arn("not an arn"), None);
        assert_eq!(role_path("c1"), "/kopper/c1/");
    }

    #[test]
    fn bucket_names_s3_refuses_are_explained() {
        assert!(bucket_name_problem("a..b").is_some());
        assert!(bucket_name_problem("192.168.1.1").is_some());
        assert!(bucket_name_problem("xn--abc").is_some());
        assert!(bucket_name_problem("my.bucket-1").is_none());
    }
}
