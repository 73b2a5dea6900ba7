//! String rules from `k8s.io/apimachinery/pkg/util/validation` and `api/validation/path`.
//!
//! Each function returns the list of problems as Go does (`[]string`), empty when the value
//! is valid; callers wrap each message into a [`Cause`](super::Cause) at their field path.

use std::sync::LazyLock;

use regex::Regex;

const DNS1123_LABEL_FMT: &str = "[a-z0-9]([-a-z0-9]*[a-z0-9])?";
const DNS1123_LABEL_ERR: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character";
const DNS1123_LABEL_MAX: usize = 63;

const DNS1123_SUBDOMAIN_FMT: &str = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*";
const DNS1123_SUBDOMAIN_ERR: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character";
const DNS1123_SUBDOMAIN_MAX: usize = 253;

const DNS1035_LABEL_FMT: &str = "[a-z]([-a-z0-9]*[a-z0-9])?";
const DNS1035_LABEL_ERR: &str = "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character";

const LABEL_KEY_FMT: &str = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]";
const LABEL_KEY_ERR: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";
const LABEL_KEY_NAME_MAX: usize = 63;

const LABEL_VALUE_FMT: &str = "(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?";
const LABEL_VALUE_ERR: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";
const LABEL_VALUE_MAX: usize = 63;

const CONFIG_KEY_FMT: &str = "[-._a-zA-Z0-9]+";
const CONFIG_KEY_ERR: &str = "a valid config key must consist of alphanumeric characters, '-', '_' or '.'";

fn anchored(fmt: &str) -> Regex {
    // The patterns are constants of this module; a failure here is a programming error
    // caught by every test, never a consequence of input.
    Regex::new(&format!("^(?:{fmt})$")).unwrap_or_else(|e| panic!("invalid built-in pattern {fmt}: {e}"))
}

static DNS1123_LABEL: LazyLock<Regex> = LazyLock::new(|| anchored(DNS1123_LABEL_FMT));
static DNS1123_SUBDOMAIN: LazyLock<Regex> = LazyLock::new(|| anchored(DNS1123_SUBDOMAIN_FMT));
static DNS1035_LABEL: LazyLock<Regex> = LazyLock::new(|| anchored(DNS1035_LABEL_FMT));
static LABEL_KEY: LazyLock<Regex> = LazyLock::new(|| anchored(LABEL_KEY_FMT));
static LABEL_VALUE: LazyLock<Regex> = LazyLock::new(|| anchored(LABEL_VALUE_FMT));
static CONFIG_KEY: LazyLock<Regex> = LazyLock::new(|| anchored(CONFIG_KEY_FMT));

/// `validation.MaxLenError`.
pub fn max_len_error(length: usize) -> String {
    format!("must be no more than {length} characters")
}

/// `validation.RegexError`, including Go's odd double space before " or " between examples.
pub fn regex_error(msg: &str, fmt: &str, examples: &[&str]) -> String {
    if examples.is_empty() {
        return format!("{msg} (regex used for validation is '{fmt}')");
    }
    let mut out = format!("{msg} (e.g. ");
    for (i, example) in examples.iter().enumerate() {
        if i > 0 {
            out.push_str(" or ");
        }
        out.push_str(&format!("'{example}', "));
    }
    out.push_str(&format!("regex used for validation is '{fmt}')"));
    out
}

/// `IsDNS1123Label`: namespace names, container names.
pub fn dns1123_label(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > DNS1123_LABEL_MAX {
        errs.push(max_len_error(DNS1123_LABEL_MAX));
    }
    if !DNS1123_LABEL.is_match(value) {
        if DNS1123_SUBDOMAIN.is_match(value) {
            errs.push("must not contain dots".to_string());
        } else {
            errs.push(regex_error(DNS1123_LABEL_ERR, DNS1123_LABEL_FMT, &["my-name", "123-abc"]));
        }
    }
    errs
}

/// `IsDNS1123Subdomain`: most object names, API group names.
pub fn dns1123_subdomain(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > DNS1123_SUBDOMAIN_MAX {
        errs.push(max_len_error(DNS1123_SUBDOMAIN_MAX));
    }
    if !DNS1123_SUBDOMAIN.is_match(value) {
        errs.push(regex_error(DNS1123_SUBDOMAIN_ERR, DNS1123_SUBDOMAIN_FMT, &["example.com"]));
    }
    errs
}

/// `IsDNS1035Label`: CRD plural/singular/short names and version names.
pub fn dns1035_label(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > DNS1123_LABEL_MAX {
        errs.push(max_len_error(DNS1123_LABEL_MAX));
    }
    if !DNS1035_LABEL.is_match(value) {
        errs.push(regex_error(DNS1035_LABEL_ERR, DNS1035_LABEL_FMT, &["my-name", "abc-123"]));
    }
    errs
}

/// `IsQualifiedName` (a label key): an optional DNS subdomain prefix and `/`, then a name.
pub fn qualified_name(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    let parts: Vec<&str> = value.split('/').collect();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                errs.push("prefix part must be non-empty".to_string());
            } else {
                errs.extend(dns1123_subdomain(prefix).into_iter().map(|m| format!("prefix part {m}")));
            }
            *name
        }
        _ => {
            errs.push(format!(
                "a valid label key {} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')",
                regex_error(LABEL_KEY_ERR, LABEL_KEY_FMT, &["MyName", "my.name", "123-abc"])
            ));
            return errs;
        }
    };
    if name.is_empty() {
        errs.push("name part must be non-empty".to_string());
    } else if name.len() > LABEL_KEY_NAME_MAX {
        errs.push(format!("name part {}", max_len_error(LABEL_KEY_NAME_MAX)));
    }
    if !LABEL_KEY.is_match(name) {
        errs.push(format!(
            "name part {}",
            regex_error(LABEL_KEY_ERR, LABEL_KEY_FMT, &["MyName", "my.name", "123-abc"])
        ));
    }
    errs
}

/// `IsValidLabelValue`.
pub fn label_value(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > LABEL_VALUE_MAX {
        errs.push(max_len_error(LABEL_VALUE_MAX));
    }
    if !LABEL_VALUE.is_match(value) {
        errs.push(regex_error(LABEL_VALUE_ERR, LABEL_VALUE_FMT, &["MyValue", "my_value", "12345"]));
    }
    errs
}

/// `IsConfigMapKey`: keys of ConfigMap `data`/`binaryData` and Secret `data`.
pub fn config_map_key(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > DNS1123_SUBDOMAIN_MAX {
        errs.push(max_len_error(DNS1123_SUBDOMAIN_MAX));
    }
    if !CONFIG_KEY.is_match(value) {
        errs.push(regex_error(CONFIG_KEY_ERR, CONFIG_KEY_FMT, &["key.name", "KEY_NAME", "key-name"]));
    }
    if value == "." {
        errs.push("must not be '.'".to_string());
    } else if value == ".." {
        errs.push("must not be '..'".to_string());
    } else if value.starts_with("..") {
        errs.push("must not start with '..'".to_string());
    }
    errs
}

/// `path.IsValidPathSegmentName`: RBAC names only need to be safe in a URL path.
pub fn path_segment_name(value: &str) -> Vec<String> {
    if value == "." || value == ".." {
        return vec![format!("may not be '{value}'")];
    }
    path_segment_prefix(value)
}

/// `path.IsValidPathSegmentPrefix`: a generateName prefix for an RBAC object.
pub fn path_segment_prefix(value: &str) -> Vec<String> {
    ["/", "%"]
        .iter()
        .filter(|illegal| value.contains(*illegal))
        .map(|illegal| format!("may not contain '{illegal}'"))
        .collect()
}

/// Go's `maskTrailingDash`: a generateName prefix may end in `-` because random characters follow.
pub fn mask_trailing_dash(value: &str) -> String {
    match value.strip_suffix('-') {
        Some(stripped) if value.len() > 1 => format!("{stripped}a"),
        _ => value.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uppercase_subdomain_gets_the_full_regex_message() {
        assert_eq!(
            dns1123_subdomain("Foo"),
            vec![
                "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
            ]
        );
    }

    #[test]
    fn dotted_name_is_a_subdomain_but_not_a_label() {
        assert!(dns1123_subdomain("a.b").is_empty());
        assert_eq!(dns1123_label("a.b"), vec!["must not contain dots"]);
    }

    #[test]
    fn label_examples_keep_go_double_space() {
        let errs = dns1123_label("-bad");
        assert_eq!(errs.len(), 1);
        assert!(errs[0].ends_with(
            "(e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
        ));
    }

    #[test]
    fn overlong_label_reports_length_and_stays_valid_otherwise() {
        let long = "a".repeat(64);
        assert_eq!(dns1123_label(&long), vec!["must be no more than 63 characters"]);
        assert_eq!(dns1123_subdomain(&"a".repeat(254)), vec!["must be no more than 253 characters"]);
    }

    #[test]
    fn label_key_with_bad_prefix_and_empty_name_reports_both() {
        let errs = qualified_name("Bad_Prefix/");
        assert_eq!(errs.len(), 3);
        assert!(errs[0].starts_with("prefix part a lowercase RFC 1123 subdomain"));
        assert_eq!(errs[1], "name part must be non-empty");
        assert!(errs[2].starts_with("name part must consist of alphanumeric characters"));
    }

    #[test]
    fn label_key_with_two_slashes_is_rejected_whole() {
        let errs = qualified_name("a/b/c");
        assert_eq!(errs.len(), 1);
        assert!(errs[0].starts_with("a valid label key must consist of"));
        assert!(
            errs[0].ends_with("with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')")
        );
    }

    #[test]
    fn prefixed_label_key_is_valid() {
        assert!(qualified_name("app.kubernetes.io/name").is_empty());
        assert!(qualified_name("MyName").is_empty());
    }

    #[test]
    fn label_value_may_be_empty_but_not_end_in_dash() {
        assert!(label_value("").is_empty());
        assert_eq!(label_value("x-").len(), 1);
    }

    #[test]
    fn config_key_rules_reject_spaces_and_dot_names() {
        assert!(config_map_key("key.name_1-x").is_empty());
        assert_eq!(config_map_key("a b").len(), 1);
        assert_eq!(config_map_key("."), vec!["must not be '.'"]);
        assert_eq!(config_map_key(".."), vec!["must not be '..'"]);
        assert_eq!(config_map_key("..a"), vec!["must not start with '..'"]);
    }

    #[test]
    fn path_segment_names_forbid_slash_and_percent() {
        assert!(path_segment_name("system:controller:x").is_empty());
        assert_eq!(path_segment_name(".."), vec!["may not be '..'"]);
        assert_eq!(path_segment_name("a/b%"), vec!["may not contain '/'", "may not contain '%'"]);
    }

    #[test]
    fn generate_name_prefix_may_end_in_dash() {
        assert_eq!(mask_trailing_dash("web-"), "weba");
        assert_eq!(mask_trailing_dash("-"), "-");
        assert!(dns1123_subdomain(&mask_trailing_dash("web-")).is_empty());
    }
}
