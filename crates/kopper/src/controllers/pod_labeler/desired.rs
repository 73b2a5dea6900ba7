//! Pure decision of the pod labeler: which change, if any, a pod's labels need.

use std::collections::BTreeMap;

/// The two keys the labeler works with, from `--pod-label-annotation` and `--pod-name-label`.
#[derive(Clone, Copy, Debug)]
pub struct Keys<'a> {
    pub annotation: &'a str,
    pub label: &'a str,
}

/// A change to one label: set it to a value, or remove it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LabelChange {
    Set(String),
    Remove,
}

/// Why a requested label cannot be written. Permanent: retrying cannot fix the pod's name.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("pod name `{0}` is longer than the 63 characters a label value may have")]
pub struct NameTooLongForLabel(pub String);

/// Longest label value the API server accepts.
const MAX_LABEL_VALUE_LEN: usize = 63;

/// A pod asks for the label with annotation value exactly `"true"`. Any other value, or no
/// annotation, means the label should be gone.
pub fn wants_label(annotations: &BTreeMap<String, String>, keys: Keys<'_>) -> bool {
    annotations.get(keys.annotation).is_some_and(|value| value == "true")
}

/// A pod that wants the label should carry it with its own name; one that does not should
/// not carry it (`current`: the label's value now). `None` when the labels are already as
/// they should be, so nothing is written.
pub fn label_change(
    pod_name: &str,
    wanted: bool,
    current: Option<&str>,
) -> Result<Option<LabelChange>, NameTooLongForLabel> {
    match (wanted, current) {
        (true, Some(value)) if value == pod_name => Ok(None),
        (true, _) if pod_name.len() > MAX_LABEL_VALUE_LEN => Err(NameTooLongForLabel(pod_name.to_owned())),
        (true, _) => Ok(Some(LabelChange::Set(pod_name.to_owned()))),
        (false, Some(_)) => Ok(Some(LabelChange::Remove)),
        (false, None) => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEYS: Keys<'static> =
        Keys { annotation: "kopper.dev/add-pod-name-label", label: "kopper.dev/pod-name" };

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    /// The decision for a pod with these annotations and labels, as the labeler makes it.
    fn decide(
        pod_name: &str,
        annotations: &BTreeMap<String, String>,
        labels: &BTreeMap<String, String>,
        keys: Keys<'_>,
    ) -> Result<Option<LabelChange>, NameTooLongForLabel> {
        label_change(pod_name, wants_label(annotations, keys), labels.get(keys.label).map(String::as_str))
    }

    #[test]
    fn annotated_pod_gets_its_name_as_label() {
        let annotations = map(&[("kopper.dev/add-pod-name-label", "true")]);
        let change = decide("web-1", &annotations, &map(&[("app", "web")]), KEYS);
        assert_eq!(change, Ok(Some(LabelChange::Set("web-1".into()))));
    }

    #[test]
    fn already_labelled_pod_needs_no_write() {
        let annotations = map(&[("kopper.dev/add-pod-name-label", "true")]);
        let labels = map(&[("kopper.dev/pod-name", "web-1")]);
        assert_eq!(decide("web-1", &annotations, &labels, KEYS), Ok(None));
    }

    #[test]
    fn stale_label_value_is_corrected() {
        let annotations = map(&[("kopper.dev/add-pod-name-label", "true")]);
        let labels = map(&[("kopper.dev/pod-name", "someone-else")]);
        assert_eq!(decide("web-1", &annotations, &labels, KEYS), Ok(Some(LabelChange::Set("web-1".into()))));
    }

    #[test]
    fn label_is_removed_when_annotation_is_gone() {
        let labels = map(&[("kopper.dev/pod-name", "web-1")]);
        assert_eq!(decide("web-1", &map(&[]), &labels, KEYS), Ok(Some(LabelChange::Remove)));
    }

    #[test]
    fn label_is_removed_when_annotation_is_not_exactly_true() {
        let labels = map(&[("kopper.dev/pod-name", "web-1")]);
        for value in ["false", "True", "yes", ""] {
            let annotations = map(&[("kopper.dev/add-pod-name-label", value)]);
            assert_eq!(
                decide("web-1", &annotations, &labels, KEYS),
                Ok(Some(LabelChange::Remove)),
                "{value}"
            );
        }
    }

    #[test]
    fn unannotated_unlabelled_pod_is_left_alone() {
        assert_eq!(decide("web-1", &map(&[("other", "true")]), &map(&[]), KEYS), Ok(None));
    }

    #[test]
    fn configured_keys_are_used_instead_of_the_defaults() {
        let keys = Keys { annotation: "padok.fr/add-pod-name-label", label: "padok.fr/pod-name" };
        let annotations =
            map(&[("padok.fr/add-pod-name-label", "true"), ("kopper.dev/add-pod-name-label", "true")]);
        assert_eq!(
            decide("web-1", &annotations, &map(&[]), keys),
            Ok(Some(LabelChange::Set("web-1".into())))
        );
    }

    #[test]
    fn name_too_long_for_a_label_value_is_refused() {
        let name = "p".repeat(64);
        let annotations = map(&[("kopper.dev/add-pod-name-label", "true")]);
        assert_eq!(decide(&name, &annotations, &map(&[]), KEYS), Err(NameTooLongForLabel(name.clone())));
    }
}
