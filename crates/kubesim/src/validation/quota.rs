//! LimitRange and ResourceQuota, as `pkg/apis/core/validation` (v1.32) checks them, and the
//! resource quantities both are made of.
//!
//! Quantities are compared exactly (in nano units) but echoed as written: kube-apiserver
//! serves them in canonical form (`1000m` as `1`), which kubesim does not.

use serde_json::{Map, Value};

use super::objects::{list_at, map_at, sorted_keys, str_at};
use super::{Cause, FieldPath, names};

/// `resource.ErrFormatWrong`, the decode error of a quantity that cannot be parsed.
pub const QUANTITY_FORMAT_ERROR: &str =
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'";

/// A parsed quantity, in nano units (what `resource.Quantity` keeps precisely), rounded up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Quantity(i128);

impl Quantity {
    const ONE: Quantity = Quantity(1_000_000_000);

    /// `resource.ParseQuantity`; `None` when kube-apiserver would refuse to decode it.
    pub fn parse(text: &str) -> Option<Self> {
        let (negative, rest) = match text.as_bytes().first()? {
            b'-' => (true, &text[1..]),
            b'+' => (false, &text[1..]),
            _ => (false, text),
        };
        let number_end = rest.find(|c: char| !c.is_ascii_digit() && c != '.').unwrap_or(rest.len());
        let (number, suffix) = rest.split_at(number_end);
        let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
        if whole.is_empty() && fraction.is_empty() || fraction.contains('.') {
            return None;
        }
        let (base2, mut exponent10) = suffix_scale(suffix)?;
        let mut mantissa: i128 = 0;
        for digit in whole.bytes().chain(fraction.bytes()) {
            mantissa = mantissa.saturating_mul(10).saturating_add(i128::from(digit - b'0'));
        }
        exponent10 += 9 - fraction.len() as i32;
        mantissa = mantissa.saturating_mul(1i128 << base2.min(100));
        let nano = if exponent10 >= 0 {
            (0..exponent10).fold(mantissa, |value, _| value.saturating_mul(10))
        } else {
            let divisor = (0..-exponent10).fold(1i128, |value, _| value.saturating_mul(10));
            (mantissa + divisor - 1) / divisor
        };
        Some(Self(if negative { -nano } else { nano }))
    }

    fn is_integer(self) -> bool {
        self.0 % Self::ONE.0 == 0
    }

    fn as_f64(self) -> f64 {
        self.0 as f64 / Self::ONE.0 as f64
    }
}

/// The binary power and decimal exponent of a suffix (`Ki` is 2^10, `m` is 10^-3, `e3` 10^3).
fn suffix_scale(suffix: &str) -> Option<(u32, i32)> {
    let scale = match suffix {
        "" => (0, 0),
        "Ki" => (10, 0),
        "Mi" => (20, 0),
        "Gi" => (30, 0),
        "Ti" => (40, 0),
        "Pi" => (50, 0),
        "Ei" => (60, 0),
        "n" => (0, -9),
        "u" => (0, -6),
        "m" => (0, -3),
        "k" => (0, 3),
        "M" => (0, 6),
        "G" => (0, 9),
        "T" => (0, 12),
        "P" => (0, 15),
        "E" => (0, 18),
        exponent => {
            let digits = exponent.strip_prefix(['e', 'E'])?;
            let unsigned = digits.strip_prefix(['+', '-']).unwrap_or(digits);
            if unsigned.is_empty() || !unsigned.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            (0, digits.parse::<i32>().ok().filter(|e| e.abs() <= 40)?)
        }
    };
    Some(scale)
}

/// The first quantity in these resource lists kube-apiserver could not decode.
pub(super) fn undecodable_quantity<'a>(lists: impl Iterator<Item = Option<&'a Value>>) -> Option<String> {
    for list in lists.flatten().filter_map(Value::as_object) {
        for value in list.values() {
            let parsed = match value {
                Value::String(text) => Quantity::parse(text),
                Value::Number(number) => Quantity::parse(&number.to_string()),
                _ => None,
            };
            if parsed.is_none() {
                return Some(QUANTITY_FORMAT_ERROR.to_owned());
            }
        }
    }
    None
}

fn quantity_text(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

fn quantity_of(value: &Value) -> Quantity {
    Quantity::parse(&quantity_text(value)).unwrap_or(Quantity(0))
}

/// Resource names every quota may limit (`standardQuotaResources`), and those that count
/// objects and so must be whole numbers (`integerResources`).
const QUOTA_RESOURCES: &[&str] = &[
    "cpu",
    "memory",
    "ephemeral-storage",
    "requests.cpu",
    "requests.memory",
    "requests.storage",
    "requests.ephemeral-storage",
    "limits.cpu",
    "limits.memory",
    "limits.ephemeral-storage",
    "pods",
    "services",
    "replicationcontrollers",
    "resourcequotas",
    "secrets",
    "persistentvolumeclaims",
    "configmaps",
    "services.nodeports",
    "services.loadbalancers",
];
const INTEGER_RESOURCES: &[&str] = &[
    "pods",
    "services",
    "replicationcontrollers",
    "resourcequotas",
    "secrets",
    "configmaps",
    "persistentvolumeclaims",
    "services.nodeports",
    "services.loadbalancers",
];
/// `standardResources`: the names a resource list may use without a domain.
const STANDARD_RESOURCES: &[&str] = &[
    "cpu",
    "memory",
    "ephemeral-storage",
    "requests.cpu",
    "requests.memory",
    "requests.ephemeral-storage",
    "limits.cpu",
    "limits.memory",
    "limits.ephemeral-storage",
    "pods",
    "services",
    "replicationcontrollers",
    "resourcequotas",
    "services.nodeports",
    "services.loadbalancers",
    "requests.storage",
    "persistentvolumeclaims",
    "storage",
    "secrets",
    "configmaps",
];
const SCOPES: &[&str] = &[
    "Terminating",
    "NotTerminating",
    "BestEffort",
    "NotBestEffort",
    "PriorityClass",
    "CrossNamespacePodAffinity",
];
const POD_COMPUTE_RESOURCES: &[&str] =
    &["cpu", "memory", "limits.cpu", "limits.memory", "requests.cpu", "requests.memory"];

fn is_huge_pages(name: &str) -> bool {
    ["hugepages-", "requests.hugepages-", "limits.hugepages-"].iter().any(|prefix| name.starts_with(prefix))
}

/// `IsExtendedResourceName`: a domain-prefixed name outside `kubernetes.io`, which counts.
fn is_extended(name: &str) -> bool {
    let native = !name.contains('/') || name.contains("kubernetes.io/");
    !native && !name.starts_with("requests.") && names::qualified_name(&format!("requests.{name}")).is_empty()
}

/// `validateResourceName`: a qualified name, and a standard one when it has no domain.
fn resource_name_causes(name: &str, path: &FieldPath) -> Vec<Cause> {
    let problems = names::qualified_name(name);
    if !problems.is_empty() {
        return problems.iter().map(|m| Cause::invalid_str(path, name, m)).collect();
    }
    if !name.contains('/') && !STANDARD_RESOURCES.contains(&name) && !is_huge_pages(name) {
        return vec![Cause::invalid_str(path, name, "must be a standard resource type or fully qualified")];
    }
    Vec::new()
}

/// `ValidateResourceQuotaSpec` and the quantities of `status`.
pub(super) fn resource_quota_causes(obj: &Value) -> Vec<Cause> {
    let spec_path = FieldPath::new("spec");
    let spec = obj.get("spec").unwrap_or(&Value::Null);
    let hard = map_at(spec, &["hard"]).cloned().unwrap_or_default();
    let mut causes = quota_list_causes(&hard, &spec_path.child("hard"));
    causes.extend(scope_causes(spec, &hard, &spec_path));
    causes.extend(scope_selector_causes(spec, &hard, &spec_path.child("scopeSelector")));
    for list in ["hard", "used"] {
        let status_list = map_at(obj, &["status", list]).cloned().unwrap_or_default();
        causes.extend(quota_list_causes(&status_list, &FieldPath::new("status").child(list)));
    }
    causes
}

/// `ValidateResourceQuotaResourceName` and `validateResourceQuantityValue` for each entry.
fn quota_list_causes(list: &Map<String, Value>, list_path: &FieldPath) -> Vec<Cause> {
    let mut causes = Vec::new();
    for name in sorted_keys(list) {
        let path = list_path.key(name);
        causes.extend(resource_name_causes(name, &path));
        if !name.contains('/') && !is_quota_resource(name) {
            causes.push(Cause::invalid_str(&path, name, "must be a standard resource for quota"));
        }
        causes.extend(quantity_value_causes(name, &list[name], &path));
    }
    causes
}

/// `validateResourceQuantityValue`: not negative, and whole for the resources that count.
fn quantity_value_causes(name: &str, value: &Value, path: &FieldPath) -> Vec<Cause> {
    let quantity = quantity_of(value);
    let mut causes = Vec::new();
    if quantity < Quantity(0) {
        causes.push(Cause::invalid_str(path, &quantity_text(value), "must be greater than or equal to 0"));
    }
    if (INTEGER_RESOURCES.contains(&name) || is_extended(name)) && !quantity.is_integer() {
        causes.push(Cause::invalid(path, value, "must be an integer"));
    }
    causes
}

/// `IsResourceQuotaScopeValidForResource`.
fn scope_allows(scope: &str, resource: &str) -> bool {
    match scope {
        "Terminating"
        | "NotTerminating"
        | "NotBestEffort"
        | "PriorityClass"
        | "CrossNamespacePodAffinity" => resource == "pods" || POD_COMPUTE_RESOURCES.contains(&resource),
        "BestEffort" => resource == "pods",
        _ => true,
    }
}

fn is_quota_resource(name: &str) -> bool {
    QUOTA_RESOURCES.contains(&name) || is_huge_pages(name)
}

/// Scopes that cannot be asked for together.
fn conflicting(scopes: &[&str]) -> usize {
    [["BestEffort", "NotBestEffort"], ["Terminating", "NotTerminating"]]
        .iter()
        .filter(|pair| pair.iter().all(|scope| scopes.contains(scope)))
        .count()
}

/// `validateResourceQuotaScopes`.
fn scope_causes(spec: &Value, hard: &Map<String, Value>, spec_path: &FieldPath) -> Vec<Cause> {
    let scopes_value = spec.get("scopes").cloned().unwrap_or(Value::Null);
    let scopes: Vec<&str> =
        list_at(spec, &["scopes"]).iter().map(|s| s.as_str().unwrap_or_default()).collect();
    let path = spec_path.child("scopes");
    let mut causes = Vec::new();
    for scope in &scopes {
        if !SCOPES.contains(scope) {
            causes.push(Cause::invalid(&path, &scopes_value, "unsupported scope"));
        }
        for resource in sorted_keys(hard) {
            if is_quota_resource(resource) && !scope_allows(scope, resource) {
                causes.push(Cause::invalid(&path, &scopes_value, "unsupported scope applied to resource"));
            }
        }
    }
    for _ in 0..conflicting(&scopes) {
        causes.push(Cause::invalid(&path, &scopes_value, "conflicting scopes"));
    }
    causes
}

/// `validateScopedResourceSelectorRequirement`.
fn scope_selector_causes(spec: &Value, hard: &Map<String, Value>, path: &FieldPath) -> Vec<Cause> {
    let Some(selector) = spec.get("scopeSelector").filter(|s| !s.is_null()) else { return Vec::new() };
    let path = path.child("matchExpressions");
    let mut causes = Vec::new();
    let mut scopes = Vec::new();
    for requirement in list_at(selector, &["matchExpressions"]) {
        let scope = str_at(requirement, &["scopeName"]);
        if !SCOPES.contains(&scope) {
            causes.push(Cause::invalid_str(path.child("scopeName"), scope, "unsupported scope"));
        }
        for resource in sorted_keys(hard) {
            if is_quota_resource(resource) && !scope_allows(scope, resource) {
                causes.push(Cause::invalid(&path, selector, "unsupported scope applied to resource"));
            }
        }
        let operator = str_at(requirement, &["operator"]);
        let exists_only =
            ["BestEffort", "NotBestEffort", "Terminating", "NotTerminating", "CrossNamespacePodAffinity"];
        if exists_only.contains(&scope) && operator != "Exists" {
            causes.push(Cause::invalid_str(
                path.child("operator"),
                operator,
                "must be 'Exist' when scope is any of ResourceQuotaScopeTerminating, ResourceQuotaScopeNotTerminating, \
                 ResourceQuotaScopeBestEffort, ResourceQuotaScopeNotBestEffort or ResourceQuotaScopeCrossNamespacePodAffinity",
            ));
        }
        let values = list_at(requirement, &["values"]);
        match operator {
            "In" | "NotIn" if values.is_empty() => causes.push(Cause::required(
                path.child("values"),
                "must be at least one value when `operator` is 'In' or 'NotIn' for scope selector",
            )),
            "Exists" | "DoesNotExist" if !values.is_empty() => causes.push(Cause::invalid(
                path.child("values"),
                &Value::Array(values.to_vec()),
                "must be no value when `operator` is 'Exist' or 'DoesNotExist' for scope selector",
            )),
            "In" | "NotIn" | "Exists" | "DoesNotExist" => {}
            _ => causes.push(Cause::invalid_str(
                path.child("operator"),
                operator,
                "not a valid selector operator",
            )),
        }
        scopes.push(scope);
    }
    let scopes_value = spec.get("scopes").cloned().unwrap_or(Value::Null);
    for _ in 0..conflicting(&scopes) {
        causes.push(Cause::invalid(&path, &scopes_value, "conflicting scopes"));
    }
    causes
}

/// `ValidateLimitRange`.
pub(super) fn limit_range_causes(obj: &Value) -> Vec<Cause> {
    let limits_path = FieldPath::new("spec").child("limits");
    let mut causes = Vec::new();
    let mut seen_types: Vec<&str> = Vec::new();
    for (i, limit) in list_at(obj, &["spec", "limits"]).iter().enumerate() {
        let item = limits_path.index(i);
        let limit_type = str_at(limit, &["type"]);
        let type_value = limit.get("type").cloned().unwrap_or(Value::String(String::new()));
        causes.extend(limit_type_causes(limit_type, &type_value, &item.child("type")));
        if seen_types.contains(&limit_type) {
            causes.push(Cause::duplicate(item.child("type"), &type_value));
        }
        seen_types.push(limit_type);
        let list = |field: &str| map_at(limit, &[field]).cloned().unwrap_or_default();
        let (max, min, maxratio) = (list("max"), list("min"), list("maxLimitRequestRatio"));
        let (mut default, mut default_request) = (Map::new(), Map::new());
        let mut keys: Vec<String> = Vec::new();
        let mut names_of = |field: &str, values: &Map<String, Value>, causes: &mut Vec<Cause>| {
            for name in sorted_keys(values) {
                causes.extend(limit_resource_causes(limit_type, name, &item.child(field).key(name)));
                if !keys.contains(name) {
                    keys.push(name.clone());
                }
            }
        };
        names_of("max", &max, &mut causes);
        names_of("min", &min, &mut causes);
        if limit_type == "Pod" {
            for field in ["default", "defaultRequest"] {
                if !list(field).is_empty() {
                    causes.push(Cause::forbidden(
                        item.child(field),
                        "may not be specified when `type` is 'Pod'",
                    ));
                }
            }
        } else {
            default = list("default");
            default_request = list("defaultRequest");
            names_of("default", &default, &mut causes);
            names_of("defaultRequest", &default_request, &mut causes);
        }
        if limit_type == "PersistentVolumeClaim"
            && !min.contains_key("storage")
            && !max.contains_key("storage")
        {
            causes.push(Cause::required(
                item.child("limits"),
                "either minimum or maximum storage value is required, but neither was provided",
            ));
        }
        names_of("maxLimitRequestRatio", &maxratio, &mut causes);
        keys.sort();
        for key in &keys {
            let at = |list: &Map<String, Value>| {
                list.get(key).map(|v| (quantity_of(v), quantity_text(v), v.clone()))
            };
            let (min, max, default, request, ratio) =
                (at(&min), at(&max), at(&default), at(&default_request), at(&maxratio));
            let path = |field: &str| item.child(field).key(key);
            if let (Some(min), Some(max)) = (&min, &max)
                && min.0 > max.0
            {
                let detail = format!("min value {} is greater than max value {}", min.1, max.1);
                causes.push(Cause::invalid(path("min"), &min.2, &detail));
            }
            if let (Some(request), Some(min)) = (&request, &min)
                && min.0 > request.0
            {
                let detail =
                    format!("min value {} is greater than default request value {}", min.1, request.1);
                causes.push(Cause::invalid(path("defaultRequest"), &request.2, &detail));
            }
            if let (Some(request), Some(max)) = (&request, &max)
                && request.0 > max.0
            {
                let detail =
                    format!("default request value {} is greater than max value {}", request.1, max.1);
                causes.push(Cause::invalid(path("defaultRequest"), &request.2, &detail));
            }
            if let (Some(request), Some(default)) = (&request, &default)
                && request.0 > default.0
            {
                let detail = format!(
                    "default request value {} is greater than default limit value {}",
                    request.1, default.1
                );
                causes.push(Cause::invalid(path("defaultRequest"), &request.2, &detail));
            }
            if let (Some(default), Some(min)) = (&default, &min)
                && min.0 > default.0
            {
                let detail = format!("min value {} is greater than default value {}", min.1, default.1);
                causes.push(Cause::invalid(path("default"), &min.2, &detail));
            }
            if let (Some(default), Some(max)) = (&default, &max)
                && default.0 > max.0
            {
                let detail = format!("default value {} is greater than max value {}", default.1, max.1);
                causes.push(Cause::invalid(path("default"), &max.2, &detail));
            }
            if let Some(ratio) = &ratio {
                if ratio.0 < Quantity::ONE {
                    let detail = format!("ratio {} is less than 1", ratio.1);
                    causes.push(Cause::invalid(path("maxLimitRequestRatio"), &ratio.2, &detail));
                }
                if let (Some(min), Some(max)) = (&min, &max) {
                    // Go divides the milli values as float64 and prints the quotient with `%f`.
                    let limit = max.0.as_f64() / min.0.as_f64();
                    if ratio.0.as_f64() > limit {
                        let detail = format!("ratio {} is greater than max/min = {limit:.6}", ratio.1);
                        causes.push(Cause::invalid(path("maxLimitRequestRatio"), &ratio.2, &detail));
                    }
                }
            }
        }
    }
    causes
}

/// `validateLimitRangeTypeName`: a qualified name, and a known type when it has no domain.
fn limit_type_causes(limit_type: &str, value: &Value, path: &FieldPath) -> Vec<Cause> {
    let problems = names::qualified_name(limit_type);
    if !problems.is_empty() {
        return problems.iter().map(|m| Cause::invalid(path, value, m)).collect();
    }
    if !limit_type.contains('/') && !matches!(limit_type, "Pod" | "Container" | "PersistentVolumeClaim") {
        return vec![Cause::invalid(path, value, "must be a standard limit type or fully qualified")];
    }
    Vec::new()
}

/// `validateLimitRangeResourceName`: Pod and Container limits name container resources
/// (`validateContainerResourceName`), other types any valid resource name.
fn limit_resource_causes(limit_type: &str, name: &str, path: &FieldPath) -> Vec<Cause> {
    let mut causes = resource_name_causes(name, path);
    if !matches!(limit_type, "Pod" | "Container") {
        return causes;
    }
    if !name.contains('/') {
        if !matches!(name, "cpu" | "memory" | "ephemeral-storage") && !name.starts_with("hugepages-") {
            causes.push(Cause::invalid_str(path, name, "must be a standard resource for containers"));
        }
    } else if !name.contains("kubernetes.io/") && !is_extended(name) {
        causes.push(Cause::invalid_str(path, name, "doesn't follow extended resource name standard"));
    }
    causes
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::validation::objects::validate_builtin;
    use serde_json::json;

    fn messages(resource: &str, spec: Value) -> Vec<String> {
        let obj = json!({"metadata": {"name": "x", "namespace": "n"}, "spec": spec});
        validate_builtin("", resource, &obj).iter().map(ToString::to_string).collect()
    }

    #[test]
    fn quantities_compare_across_suffixes() {
        let q = |text: &str| Quantity::parse(text).unwrap();
        assert_eq!(q("1Gi"), q("1073741824"));
        assert_eq!(q("100m"), q("0.1"));
        assert_eq!(q("1e3"), q("1k"));
        assert_eq!(q("1.5"), q("1500m"));
        assert!(q("2") > q("1999m"));
        assert!(q("-1") < Quantity(0));
        for bad in ["", "abc", "1..2", "1Qi", "1e", "--1", "."] {
            assert_eq!(Quantity::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn limit_range_min_above_max_and_default_above_max_are_invalid() {
        let spec = json!({"limits": [
            {"type": "Container", "min": {"cpu": "2"}, "max": {"cpu": "1"}},
            {"type": "Container", "default": {"memory": "2Gi"}, "max": {"memory": "1Gi"}},
        ]});
        assert_eq!(
            messages("limitranges", spec),
            vec![
                "spec.limits[0].min[cpu]: Invalid value: \"2\": min value 2 is greater than max value 1",
                "spec.limits[1].type: Duplicate value: \"Container\"",
                "spec.limits[1].default[memory]: Invalid value: \"1Gi\": default value 2Gi is greater than max value 1Gi",
            ]
        );
    }

    #[test]
    fn limit_range_types_and_resources_are_checked() {
        let spec = json!({"limits": [
            {"type": "Node", "max": {"cpu": "1"}},
            {"type": "Pod", "default": {"cpu": "1"}},
            {"type": "PersistentVolumeClaim", "max": {"cpu": "1"}},
            {"type": "Container", "maxLimitRequestRatio": {"cpu": "500m"}, "max": {"gpu": "1"}},
            {"type": "Container", "maxLimitRequestRatio": {"cpu": "4"}, "min": {"cpu": "100m"}, "max": {"cpu": "200m"}},
        ]});
        assert_eq!(
            messages("limitranges", spec),
            vec![
                "spec.limits[0].type: Invalid value: \"Node\": must be a standard limit type or fully qualified",
                "spec.limits[1].default: Forbidden: may not be specified when `type` is 'Pod'",
                "spec.limits[2].limits: Required value: either minimum or maximum storage value is required, but neither was provided",
                "spec.limits[3].max[gpu]: Invalid value: \"gpu\": must be a standard resource type or fully qualified",
                "spec.limits[3].max[gpu]: Invalid value: \"gpu\": must be a standard resource for containers",
                "spec.limits[3].maxLimitRequestRatio[cpu]: Invalid value: \"500m\": ratio 500m is less than 1",
                "spec.limits[4].type: Duplicate value: \"Container\"",
                "spec.limits[4].maxLimitRequestRatio[cpu]: Invalid value: \"4\": ratio 4 is greater than max/min = 2.000000",
            ]
        );
    }

    #[test]
    fn resource_quota_quantities_and_names_are_checked() {
        let spec =
            json!({"hard": {"pods": "1500m", "requests.cpu": "-1", "widgets": "1", "example.com/gpus": "1"}});
        assert_eq!(
            messages("resourcequotas", spec),
            vec![
                "spec.hard[pods]: Invalid value: \"1500m\": must be an integer",
                "spec.hard[requests.cpu]: Invalid value: \"-1\": must be greater than or equal to 0",
                "spec.hard[widgets]: Invalid value: \"widgets\": must be a standard resource type or fully qualified",
                "spec.hard[widgets]: Invalid value: \"widgets\": must be a standard resource for quota",
            ]
        );
    }

    #[test]
    fn resource_quota_scopes_must_be_known_apply_to_its_resources_and_not_conflict() {
        let spec = json!({"hard": {"configmaps": "1"}, "scopes": ["BestEffort", "NotBestEffort"]});
        assert_eq!(
            messages("resourcequotas", spec),
            vec![
                "spec.scopes: Invalid value: [\"BestEffort\",\"NotBestEffort\"]: unsupported scope applied to resource",
                "spec.scopes: Invalid value: [\"BestEffort\",\"NotBestEffort\"]: unsupported scope applied to resource",
                "spec.scopes: Invalid value: [\"BestEffort\",\"NotBestEffort\"]: conflicting scopes",
            ]
        );
        let selector = json!({"hard": {"pods": "1"}, "scopeSelector": {"matchExpressions": [
            {"scopeName": "PriorityClass", "operator": "In"},
            {"scopeName": "Terminating", "operator": "In", "values": ["x"]},
        ]}});
        assert_eq!(
            messages("resourcequotas", selector),
            vec![
                "spec.scopeSelector.matchExpressions.values: Required value: must be at least one value when `operator` is 'In' or 'NotIn' for scope selector",
                "spec.scopeSelector.matchExpressions.operator: Invalid value: \"In\": must be 'Exist' when scope is any of ResourceQuotaScopeTerminating, ResourceQuotaScopeNotTerminating, ResourceQuotaScopeBestEffort, ResourceQuotaScopeNotBestEffort or ResourceQuotaScopeCrossNamespacePodAffinity",
            ]
        );
    }
}
