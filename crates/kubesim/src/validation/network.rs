//! NetworkPolicy, as `pkg/apis/networking/validation` (v1.32) checks it: ports, peers,
//! ipBlocks, policyTypes and the label selectors of the policy and its peers.

use serde_json::{Value, json};

use super::objects::{list_at, map_at, sorted_keys, str_at};
use super::{Cause, FieldPath, names};

/// `ValidateNetworkPolicySpec`.
pub(super) fn network_policy_causes(obj: &Value) -> Vec<Cause> {
    let spec_path = FieldPath::new("spec");
    let spec = obj.get("spec").unwrap_or(&Value::Null);
    let mut causes = label_selector_causes(spec.get("podSelector"), &spec_path.child("podSelector"));
    for (direction, peers) in [("ingress", "from"), ("egress", "to")] {
        for (i, rule) in list_at(spec, &[direction]).iter().enumerate() {
            let rule_path = spec_path.child(direction).index(i);
            for (j, port) in list_at(rule, &["ports"]).iter().enumerate() {
                causes.extend(port_causes(port, &rule_path.child("ports").index(j)));
            }
            for (j, peer) in list_at(rule, &[peers]).iter().enumerate() {
                causes.extend(peer_causes(peer, &rule_path.child(peers).index(j)));
            }
        }
    }
    let types = list_at(spec, &["policyTypes"]);
    let types_path = spec_path.child("policyTypes");
    if types.len() > 2 {
        causes.push(Cause::invalid(
            types_path,
            &Value::Array(types.to_vec()),
            "may not specify more than two policyTypes",
        ));
        return causes;
    }
    for (i, policy_type) in types.iter().enumerate() {
        if !matches!(policy_type.as_str(), Some("Ingress" | "Egress")) {
            causes.push(Cause::not_supported(types_path.index(i), policy_type, &["Ingress", "Egress"]));
        }
    }
    causes
}

/// `ValidateNetworkPolicyPort`.
fn port_causes(port: &Value, path: &FieldPath) -> Vec<Cause> {
    let mut causes = Vec::new();
    if let Some(protocol) = port.get("protocol").filter(|p| !p.is_null())
        && !matches!(protocol.as_str(), Some("TCP" | "UDP" | "SCTP"))
    {
        causes.push(Cause::not_supported(path.child("protocol"), protocol, &["TCP", "UDP", "SCTP"]));
    }
    let end_port = port.get("endPort").and_then(Value::as_i64);
    match port.get("port").filter(|p| !p.is_null()) {
        Some(Value::Number(number)) => {
            let number = number.as_i64().unwrap_or(i64::MAX);
            causes.extend(
                port_number_problems(number)
                    .iter()
                    .map(|m| Cause::invalid(path.child("port"), &json!(number), m)),
            );
            if let Some(end) = end_port {
                if end < number {
                    causes.push(Cause::invalid(
                        path.child("endPort"),
                        &json!(end),
                        "must be greater than or equal to `port`",
                    ));
                }
                causes.extend(
                    port_number_problems(end)
                        .iter()
                        .map(|m| Cause::invalid(path.child("endPort"), &json!(end), m)),
                );
            }
        }
        Some(name) => {
            if let Some(end) = end_port {
                causes.push(Cause::invalid(
                    path.child("endPort"),
                    &json!(end),
                    "may not be specified when `port` is non-numeric",
                ));
            }
            let name = name.as_str().unwrap_or_default();
            causes.extend(
                port_name_problems(name).iter().map(|m| Cause::invalid_str(path.child("port"), name, m)),
            );
        }
        None => {
            if let Some(end) = end_port {
                causes.push(Cause::invalid(
                    path.child("endPort"),
                    &json!(end),
                    "may not be specified when `port` is not specified",
                ));
            }
        }
    }
    causes
}

/// `IsValidPortNum`.
fn port_number_problems(port: i64) -> Vec<String> {
    if (1..=65535).contains(&port) {
        Vec::new()
    } else {
        vec!["must be between 1 and 65535, inclusive".to_owned()]
    }
}

/// `IsValidPortName`: an IANA service name.
fn port_name_problems(name: &str) -> Vec<String> {
    let mut problems = Vec::new();
    if name.len() > 15 {
        problems.push(names::max_len_error(15));
    }
    if name.is_empty() || !name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-') {
        problems.push("must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)".to_owned());
    }
    if !name.bytes().any(|b| b.is_ascii_lowercase()) {
        problems.push("must contain at least one letter (a-z)".to_owned());
    }
    if name.contains("--") {
        problems.push("must not contain consecutive hyphens".to_owned());
    }
    if name.starts_with('-') || name.ends_with('-') {
        problems.push("must not begin or end with a hyphen".to_owned());
    }
    problems
}

/// `ValidateNetworkPolicyPeer`: exactly one kind of peer when it is an ipBlock.
fn peer_causes(peer: &Value, path: &FieldPath) -> Vec<Cause> {
    let mut causes = Vec::new();
    let present = |field: &str| peer.get(field).is_some_and(|v| !v.is_null());
    for selector in ["podSelector", "namespaceSelector"] {
        if present(selector) {
            causes.extend(label_selector_causes(peer.get(selector), &path.child(selector)));
        }
    }
    if present("ipBlock") {
        causes.extend(ip_block_causes(&peer["ipBlock"], &path.child("ipBlock")));
    }
    let count = ["podSelector", "namespaceSelector", "ipBlock"].iter().filter(|f| present(f)).count();
    if count == 0 {
        causes.push(Cause::required(path.clone(), "must specify a peer"));
    } else if count > 1 && present("ipBlock") {
        causes.push(Cause::forbidden(path.clone(), "may not specify both ipBlock and another peer"));
    }
    causes
}

/// `ValidateIPBlock`: a CIDR, and exceptions strictly inside it.
fn ip_block_causes(block: &Value, path: &FieldPath) -> Vec<Cause> {
    let cidr = str_at(block, &["cidr"]);
    if cidr.is_empty() {
        return vec![Cause::required(path.child("cidr"), "")];
    }
    let Some(network) = Cidr::parse(cidr) else {
        return vec![Cause::invalid_str(path.child("cidr"), cidr, "not a valid CIDR")];
    };
    let mut causes = Vec::new();
    for (i, except) in list_at(block, &["except"]).iter().enumerate() {
        let except_path = path.child("except").index(i);
        let text = except.as_str().unwrap_or_default();
        let Some(excepted) = Cidr::parse(text) else {
            causes.push(Cause::invalid_str(except_path, text, "not a valid CIDR"));
            return causes;
        };
        if !network.contains(&excepted) || network.prefix >= excepted.prefix {
            causes.push(Cause::invalid_str(except_path, text, "must be a strict subset of `cidr`"));
        }
    }
    causes
}

/// A CIDR as `netutils.ParseCIDRSloppy` reads it: IPv4 octets may have leading zeros.
#[derive(Debug, PartialEq)]
struct Cidr {
    bits: u32,
    network: u128,
    prefix: u32,
}

impl Cidr {
    fn parse(text: &str) -> Option<Self> {
        let (address, prefix) = text.split_once('/')?;
        if prefix.is_empty() || !prefix.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let (bits, address) = match parse_ipv4_sloppy(address) {
            Some(v4) => (32, u128::from(v4)),
            None => (128, u128::from(address.parse::<std::net::Ipv6Addr>().ok()?)),
        };
        let prefix: u32 = prefix.parse().ok().filter(|p| *p <= bits)?;
        Some(Self { bits, network: address & mask(bits, prefix), prefix })
    }

    /// `IPNet.Contains` of the other network's address.
    fn contains(&self, other: &Cidr) -> bool {
        self.bits == other.bits && other.network & mask(self.bits, self.prefix) == self.network
    }
}

fn mask(bits: u32, prefix: u32) -> u128 {
    let all = if bits == 128 { u128::MAX } else { (1u128 << bits) - 1 };
    if prefix == 0 { 0 } else { all & !((1u128 << (bits - prefix)) - 1) }
}

fn parse_ipv4_sloppy(address: &str) -> Option<u32> {
    let octets: Vec<&str> = address.split('.').collect();
    if octets.len() != 4 {
        return None;
    }
    octets.iter().try_fold(0u32, |acc, octet| {
        if octet.is_empty() || octet.len() > 3 || !octet.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let value: u32 = octet.parse().ok().filter(|v| *v <= 255)?;
        Some(acc << 8 | value)
    })
}

/// `ValidateLabelSelector`: matchLabels as labels, and each matchExpression's operator,
/// values and key.
pub(super) fn label_selector_causes(selector: Option<&Value>, path: &FieldPath) -> Vec<Cause> {
    let Some(selector) = selector.filter(|s| !s.is_null()) else { return Vec::new() };
    let mut causes = Vec::new();
    for (i, requirement) in list_at(selector, &["matchExpressions"]).iter().enumerate() {
        let item = path.child("matchExpressions").index(i);
        let values = list_at(requirement, &["values"]);
        let operator = requirement.get("operator").cloned().unwrap_or(json!(""));
        match operator.as_str() {
            Some("In" | "NotIn") if values.is_empty() => causes.push(Cause::required(
                item.child("values"),
                "must be specified when `operator` is 'In' or 'NotIn'",
            )),
            Some("Exists" | "DoesNotExist") if !values.is_empty() => causes.push(Cause::forbidden(
                item.child("values"),
                "may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
            )),
            Some("In" | "NotIn" | "Exists" | "DoesNotExist") => {}
            _ => causes.push(Cause::invalid(
                item.child("operator"),
                &operator,
                "not a valid selector operator",
            )),
        }
        let key = str_at(requirement, &["key"]);
        causes
            .extend(names::qualified_name(key).iter().map(|m| Cause::invalid_str(item.child("key"), key, m)));
        for (j, value) in values.iter().enumerate() {
            let value = value.as_str().unwrap_or_default();
            let problems = names::label_value(value);
            causes
                .extend(problems.iter().map(|m| Cause::invalid_str(item.child("values").index(j), value, m)));
        }
    }
    if let Some(labels) = map_at(selector, &["matchLabels"]) {
        let labels_path = path.child("matchLabels");
        for key in sorted_keys(labels) {
            causes
                .extend(names::qualified_name(key).iter().map(|m| Cause::invalid_str(&labels_path, key, m)));
            let value = labels[key].as_str().unwrap_or_default();
            causes
                .extend(names::label_value(value).iter().map(|m| Cause::invalid_str(&labels_path, value, m)));
        }
    }
    causes
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::validation::objects::validate_builtin;

    fn messages(spec: Value) -> Vec<String> {
        let policy = json!({"metadata": {"name": "p", "namespace": "n"}, "spec": spec});
        validate_builtin("networking.k8s.io", "networkpolicies", &policy)
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    #[test]
    fn ports_need_a_known_protocol_and_a_valid_number_or_name() {
        let spec = json!({"podSelector": {}, "ingress": [{"ports": [
            {"protocol": "ICMP", "port": 80},
            {"port": 0},
            {"port": 80, "endPort": 79},
            {"port": "Web--", "endPort": 90},
        ]}]});
        assert_eq!(
            messages(spec),
            vec![
                "spec.ingress[0].ports[0].protocol: Unsupported value: \"ICMP\": supported values: \"TCP\", \"UDP\", \"SCTP\"",
                "spec.ingress[0].ports[1].port: Invalid value: 0: must be between 1 and 65535, inclusive",
                "spec.ingress[0].ports[2].endPort: Invalid value: 79: must be greater than or equal to `port`",
                "spec.ingress[0].ports[3].endPort: Invalid value: 90: may not be specified when `port` is non-numeric",
                "spec.ingress[0].ports[3].port: Invalid value: \"Web--\": must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)",
                "spec.ingress[0].ports[3].port: Invalid value: \"Web--\": must not contain consecutive hyphens",
                "spec.ingress[0].ports[3].port: Invalid value: \"Web--\": must not begin or end with a hyphen",
            ]
        );
    }

    #[test]
    fn ip_blocks_need_a_cidr_with_exceptions_strictly_inside() {
        let spec = json!({"podSelector": {}, "egress": [{"to": [
            {"ipBlock": {"cidr": "10.0.0.0/33"}},
            {"ipBlock": {"cidr": "10.0.0.0/8", "except": ["10.1.0.0/16", "192.168.0.0/16", "10.0.0.0/8"]}},
            {"ipBlock": {"cidr": "010.0.0.0/8"}, "podSelector": {}},
            {},
        ]}]});
        assert_eq!(
            messages(spec),
            vec![
                "spec.egress[0].to[0].ipBlock.cidr: Invalid value: \"10.0.0.0/33\": not a valid CIDR",
                "spec.egress[0].to[1].ipBlock.except[1]: Invalid value: \"192.168.0.0/16\": must be a strict subset of `cidr`",
                "spec.egress[0].to[1].ipBlock.except[2]: Invalid value: \"10.0.0.0/8\": must be a strict subset of `cidr`",
                "spec.egress[0].to[2]: Forbidden: may not specify both ipBlock and another peer",
                "spec.egress[0].to[3]: Required value: must specify a peer",
            ]
        );
    }

    #[test]
    fn policy_types_are_ingress_or_egress_and_selectors_are_checked() {
        let spec = json!({"podSelector": {"matchExpressions": [{"key": "app", "operator": "In"}]},
                          "policyTypes": ["Ingress", "Sideways"]});
        assert_eq!(
            messages(spec),
            vec![
                "spec.podSelector.matchExpressions[0].values: Required value: must be specified when `operator` is 'In' or 'NotIn'",
                "spec.policyTypes[1]: Unsupported value: \"Sideways\": supported values: \"Ingress\", \"Egress\"",
            ]
        );
    }

    #[test]
    fn ipv6_cidrs_are_understood() {
        let spec = json!({"podSelector": {}, "ingress": [{"from": [
            {"ipBlock": {"cidr": "fd00::/8", "except": ["fd00:1::/32", "10.0.0.0/8"]}},
        ]}]});
        assert_eq!(
            messages(spec),
            vec![
                "spec.ingress[0].from[0].ipBlock.except[1]: Invalid value: \"10.0.0.0/8\": must be a strict subset of `cidr`"
            ]
        );
    }
}
