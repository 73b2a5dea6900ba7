//! The API server's name rules, checked before a request is sent so that a template which
//! renders a bad name is reported against the policy field instead of failing as a 422.

/// Longest name most API objects accept.
const MAX_NAME_LENGTH: usize = 253;
/// Longest DNS label (namespace names, label values).
const MAX_LABEL_LENGTH: usize = 63;

/// RBAC object names (RoleBinding, Role, ClusterRole) are path segments: anything but `/`,
/// `%`, `.` and `..`. ClusterRoles such as `system:aggregate-to-edit` rely on that.
pub fn check_rbac_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("must not be empty".into());
    }
    if name.len() > MAX_NAME_LENGTH {
        return Err(format!("must be at most {MAX_NAME_LENGTH} characters, got {}", name.len()));
    }
    if name == "." || name == ".." {
        return Err(format!("may not be {name:?}"));
    }
    if let Some(bad) = name.chars().find(|c| matches!(c, '/' | '%')) {
        return Err(format!("may not contain {bad:?}"));
    }
    Ok(())
}

/// DNS-1123 subdomain: what ServiceAccount names must be.
pub fn check_dns_subdomain(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("must not be empty".into());
    }
    if name.len() > MAX_NAME_LENGTH {
        return Err(format!("must be at most {MAX_NAME_LENGTH} characters, got {}", name.len()));
    }
    if name.split('.').all(is_dns_label_body) {
        Ok(())
    } else {
        Err("must be lowercase letters, digits, '-' and '.', starting and ending with a letter or digit"
            .into())
    }
}

/// DNS-1123 label: what namespace names must be.
pub fn check_dns_label(name: &str) -> Result<(), String> {
    if name.len() > MAX_LABEL_LENGTH {
        return Err(format!("must be at most {MAX_LABEL_LENGTH} characters, got {}", name.len()));
    }
    if is_dns_label_body(name) {
        Ok(())
    } else {
        Err("must be lowercase letters, digits and '-', starting and ending with a letter or digit".into())
    }
}

/// Label values: at most 63 characters of `[A-Za-z0-9_.-]`, alphanumeric at both ends.
pub fn check_label_value(value: &str) -> Result<(), String> {
    if value.len() > MAX_LABEL_LENGTH {
        return Err(format!("must be at most {MAX_LABEL_LENGTH} characters, got {}", value.len()));
    }
    let inner_ok = value.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    let ends_ok = value.is_empty()
        || (value.starts_with(|c: char| c.is_ascii_alphanumeric())
            && value.ends_with(|c: char| c.is_ascii_alphanumeric()));
    if inner_ok && ends_ok {
        Ok(())
    } else {
        Err("must be letters, digits, '-', '_' and '.', starting and ending with a letter or digit".into())
    }
}

fn is_dns_label_body(label: &str) -> bool {
    !label.is_empty()
        && label.len() <= MAX_LABEL_LENGTH
        && label.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !label.starts_with('-')
        && !label.ends_with('-')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rbac_names_allow_colons_but_not_slashes() {
        assert!(check_rbac_name("system:aggregate-to-edit").is_ok());
        assert!(check_rbac_name("ad-kubernetes-team-1").is_ok());
        assert!(check_rbac_name("a/b").is_err());
        assert!(check_rbac_name("50%").is_err());
        assert!(check_rbac_name("..").is_err());
        assert!(check_rbac_name("").is_err());
        assert!(check_rbac_name(&"a".repeat(254)).is_err());
    }

    #[test]
    fn service_account_names_are_dns_subdomains() {
        assert!(check_dns_subdomain("builder").is_ok());
        assert!(check_dns_subdomain("ci.builder-1").is_ok());
        assert!(check_dns_subdomain("Builder").is_err());
        assert!(check_dns_subdomain("-builder").is_err());
        assert!(check_dns_subdomain("a..b").is_err());
        assert!(check_dns_subdomain("").is_err());
    }

    #[test]
    fn namespace_names_are_dns_labels() {
        assert!(check_dns_label("team-1").is_ok());
        assert!(check_dns_label("team.1").is_err());
        assert!(check_dns_label(&"a".repeat(64)).is_err());
    }

    #[test]
    fn label_values_are_short_and_alphanumeric_at_the_ends() {
        assert!(check_label_value("").is_ok());
        assert!(check_label_value("ad.Team_1").is_ok());
        assert!(check_label_value("-x").is_err());
        assert!(check_label_value(&"a".repeat(64)).is_err());
    }
}
