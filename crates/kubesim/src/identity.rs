//! The users and ServiceAccounts `kubesim serve` writes kubeconfigs for
//! (`--user`, `--service-account`, `--kubeconfig-dir`), so a tenant's view of the cluster can
//! be tried with plain kubectl.

use std::path::{Path, PathBuf};

use crate::Server;
use crate::validation::names;

/// The file the admin's kubeconfig is written to in a kubeconfig directory.
pub const ADMIN_FILE: &str = "admin.kubeconfig";

/// Someone a kubeconfig is written for; the token in it is the one kubesim maps back to them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Identity {
    User { name: String, groups: Vec<String> },
    ServiceAccount { namespace: String, name: String },
}

impl Identity {
    /// `NAME` or `NAME:GROUP[,GROUP…]`, the form of kubesim's user tokens. The name becomes a
    /// file name, so it cannot hold `/` or be `admin`, whose file is the admin's.
    pub fn parse_user(text: &str) -> Result<Self, String> {
        let (name, groups) = text.split_once(':').unwrap_or((text, ""));
        if name.is_empty() {
            return Err(format!("`{text}` has no user name; expected NAME or NAME:GROUP,GROUP"));
        }
        if name.contains('/') || name.starts_with('.') {
            return Err(format!(
                "user name `{name}` names the kubeconfig file, so it cannot contain `/` or start with `.`"
            ));
        }
        if name == "admin" {
            return Err("`admin` is the name of the admin's kubeconfig; pick another user name".to_owned());
        }
        let groups = groups.split(',').filter(|group| !group.is_empty()).map(str::to_owned).collect();
        Ok(Identity::User { name: name.to_owned(), groups })
    }

    /// `NAMESPACE/NAME`, each a valid Kubernetes name, as a ServiceAccount must have.
    pub fn parse_service_account(text: &str) -> Result<Self, String> {
        let Some((namespace, name)) = text.split_once('/') else {
            return Err(format!("`{text}` is not NAMESPACE/NAME"));
        };
        if let Some(problem) = names::dns1123_label(namespace).into_iter().next() {
            return Err(format!("namespace `{namespace}` of `{text}`: {problem}"));
        }
        if let Some(problem) = names::dns1123_subdomain(name).into_iter().next() {
            return Err(format!("name `{name}` of `{text}`: {problem}"));
        }
        Ok(Identity::ServiceAccount { namespace: namespace.to_owned(), name: name.to_owned() })
    }

    /// `alice.kubeconfig`, `team-a-builder.kubeconfig`.
    pub fn file_name(&self) -> String {
        match self {
            Identity::User { name, .. } => format!("{name}.kubeconfig"),
            Identity::ServiceAccount { namespace, name } => format!("{namespace}-{name}.kubeconfig"),
        }
    }
}

/// Refuses two identities whose kubeconfigs would land in one file (`a-b/c` and `a/b-c`, or
/// one user given twice), so no kubeconfig silently replaces another.
pub fn check_distinct(identities: &[Identity]) -> Result<(), String> {
    let mut seen = std::collections::BTreeSet::from([ADMIN_FILE.to_owned()]);
    for identity in identities {
        let file = identity.file_name();
        if !seen.insert(file.clone()) {
            return Err(format!("two identities would both be written to {file}; name each one once"));
        }
    }
    Ok(())
}

/// Writes the admin's kubeconfig and one per identity into `dir` (created if missing), and
/// returns the paths written, admin first.
pub fn write_kubeconfigs(
    server: &Server,
    dir: &Path,
    identities: &[Identity],
) -> std::io::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir)?;
    let admin = dir.join(ADMIN_FILE);
    server.write_kubeconfig(&admin)?;
    let mut written = vec![admin];
    for identity in identities {
        let path = dir.join(identity.file_name());
        match identity {
            Identity::User { name, groups } => {
                let groups: Vec<&str> = groups.iter().map(String::as_str).collect();
                server.write_kubeconfig_for_user(&path, name, &groups)?;
            }
            Identity::ServiceAccount { namespace, name } => {
                server.write_kubeconfig_for_service_account(&path, namespace, name)?;
            }
        }
        written.push(path);
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_user_may_carry_groups() {
        assert_eq!(
            Identity::parse_user("bob:devs,ops").unwrap(),
            Identity::User { name: "bob".into(), groups: vec!["devs".into(), "ops".into()] }
        );
        assert_eq!(Identity::parse_user("alice").unwrap().file_name(), "alice.kubeconfig");
    }

    #[test]
    fn user_names_that_cannot_be_file_names_are_refused() {
        for bad in ["", ":devs", "../x", "a/b", "admin", ".hidden"] {
            assert!(Identity::parse_user(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn service_accounts_are_namespace_slash_name() {
        let builder = Identity::parse_service_account("team-a/builder").unwrap();
        assert_eq!(builder.file_name(), "team-a-builder.kubeconfig");
        assert!(Identity::parse_service_account("builder").unwrap_err().contains("NAMESPACE/NAME"));
        assert!(Identity::parse_service_account("Team/builder").unwrap_err().contains("namespace `Team`"));
        assert!(Identity::parse_service_account("team/Builder").unwrap_err().contains("name `Builder`"));
    }

    #[test]
    fn identities_sharing_a_file_are_refused() {
        let clash = [
            Identity::parse_service_account("a-b/c").unwrap(),
            Identity::parse_service_account("a/b-c").unwrap(),
        ];
        assert!(check_distinct(&clash).unwrap_err().contains("a-b-c.kubeconfig"));
        let distinct =
            [Identity::parse_user("alice").unwrap(), Identity::parse_service_account("a/b").unwrap()];
        assert_eq!(check_distinct(&distinct), Ok(()));
    }
}
