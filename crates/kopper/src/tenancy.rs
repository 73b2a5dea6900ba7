//! The tenant model every controller follows: which namespaces are protected, and how a
//! namespace consents to receive copies from another. Pure, unit-tested.
//!
//! kopper writes with its own rights, which reach every namespace; a tenant's rights end at
//! their own. So kopper must not let a namespaced resource (a tenant's) write where the
//! tenant could not: into a protected namespace never, into another tenant's namespace only
//! when that namespace says it accepts it. The consent lives on the destination Namespace
//! object, which tenants usually cannot edit and cluster admins (or their GitOps tooling)
//! can, so only whoever owns the destination can give it.

use std::collections::{BTreeMap, BTreeSet};

/// The annotation on a Namespace naming the namespaces whose ConfigMapSyncs and SecretSyncs may copy into
/// it: `*` for any, or a comma-separated list.
pub const ACCEPT_REPLICATION_FROM: &str = "kopper.dev/accept-replication-from";

/// Namespaces every cluster has that hold cluster machinery.
pub const BUILT_IN_PROTECTED: [&str; 3] = ["kube-system", "kube-public", "kube-node-lease"];

/// Secret types that are credentials of the cluster itself. A copy of a ServiceAccount
/// token is a live credential of that ServiceAccount wherever it lands; a bootstrap token
/// joins nodes; a Helm release record confuses Helm in the namespace it lands in. They are
/// copied only by a cluster-scoped rule that names the type in `credentialTypes`.
pub const CREDENTIAL_SECRET_TYPES: [&str; 3] =
    ["kubernetes.io/service-account-token", "bootstrap.kubernetes.io/token", "helm.sh/release.v1"];

/// Namespaces no namespaced resource writes into, and a cluster-scoped rule only when it
/// names one exactly (never through a glob or a selector).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProtectedNamespaces(BTreeSet<String>);

impl Default for ProtectedNamespaces {
    fn default() -> Self {
        Self::new(None, &[])
    }
}

impl ProtectedNamespaces {
    /// The built-in ones, kopper's own namespace (where its credentials and lease live) and
    /// any the admin adds.
    pub fn new(own_namespace: Option<&str>, extra: &[String]) -> Self {
        let built_in = BUILT_IN_PROTECTED.iter().map(|name| (*name).to_owned());
        let own = own_namespace.map(str::to_owned);
        Self(built_in.chain(own).chain(extra.iter().cloned()).filter(|name| !name.is_empty()).collect())
    }

    pub fn contains(&self, namespace: &str) -> bool {
        self.0.contains(namespace)
    }

    pub fn iter(&self) -> impl Iterator<Item = &str> {
        self.0.iter().map(String::as_str)
    }
}

/// Which namespaces a namespace accepts copies from, as its annotation says.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Consent {
    /// No annotation (or an empty one): copies only from the namespace itself.
    #[default]
    None,
    /// `*`: from any namespace.
    Any,
    From(BTreeSet<String>),
}

impl Consent {
    pub fn from_annotations(annotations: Option<&BTreeMap<String, String>>) -> Self {
        let Some(value) = annotations.and_then(|a| a.get(ACCEPT_REPLICATION_FROM)) else {
            return Self::None;
        };
        let names: BTreeSet<String> =
            value.split(',').map(str::trim).filter(|name| !name.is_empty()).map(str::to_owned).collect();
        if names.contains("*") {
            Self::Any
        } else if names.is_empty() {
            Self::None
        } else {
            Self::From(names)
        }
    }

    /// Whether resources in namespace `from` may copy into this namespace.
    pub fn accepts(&self, from: &str) -> bool {
        match self {
            Self::None => false,
            Self::Any => true,
            Self::From(names) => names.contains(from),
        }
    }
}

/// Where a tenant's (namespaced) resource may write, given the admin's settings.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DestinationPolicy {
    pub protected: ProtectedNamespaces,
    /// Skip the consent check: for single-tenant clusters (`--allow-unconsented-destinations`).
    pub allow_unconsented: bool,
}

impl DestinationPolicy {
    /// Whether a resource in namespace `tenant` may write into `destination`, whose consent
    /// is `consent`. Protected namespaces are refused whatever the flags.
    pub fn allows(&self, tenant: &str, destination: &str, consent: &Consent) -> bool {
        !self.protected.contains(destination)
            && (destination == tenant || self.allow_unconsented || consent.accepts(tenant))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn annotated(value: &str) -> Consent {
        Consent::from_annotations(Some(&[(ACCEPT_REPLICATION_FROM.to_owned(), value.to_owned())].into()))
    }

    #[test]
    fn consent_lists_namespaces_or_a_star() {
        assert_eq!(Consent::from_annotations(None), Consent::None);
        assert!(annotated("*").accepts("anyone"));
        let listed = annotated(" tenant-a , tenant-c ");
        assert!(listed.accepts("tenant-a") && listed.accepts("tenant-c"));
        assert!(!listed.accepts("tenant-b"));
        assert!(!annotated(" , ").accepts("tenant-a"));
    }

    #[test]
    fn a_tenant_writes_into_its_own_namespace_and_consenting_ones_only() {
        let policy = DestinationPolicy::default();
        assert!(policy.allows("tenant-a", "tenant-a", &Consent::None));
        assert!(!policy.allows("tenant-a", "tenant-b", &Consent::None));
        assert!(policy.allows("tenant-a", "tenant-b", &annotated("tenant-a")));
        assert!(!policy.allows("tenant-a", "tenant-b", &annotated("tenant-c")));
    }

    #[test]
    fn protected_namespaces_are_refused_even_with_consent_or_the_relaxing_flag() {
        let policy = DestinationPolicy {
            protected: ProtectedNamespaces::new(Some("kopper-system"), &["platform".to_owned()]),
            allow_unconsented: true,
        };
        for protected in ["kube-system", "kube-public", "kube-node-lease", "kopper-system", "platform"] {
            assert!(!policy.allows("tenant-a", protected, &Consent::Any), "{protected}");
        }
        assert!(policy.allows("tenant-a", "tenant-b", &Consent::None), "the flag skips consent");
    }
}
