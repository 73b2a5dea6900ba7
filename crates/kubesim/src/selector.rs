//! Label and field selectors as kube-apiserver parses and applies them.
//!
//! The grammar, the matching rules and the error messages follow
//! `k8s.io/apimachinery/pkg/labels` and `k8s.io/apimachinery/pkg/fields`, so a client that
//! sends a bad `labelSelector` or `fieldSelector` sees the same 400 message it would see
//! from a real cluster, and a client that relies on a selector subtlety (`notin` matching
//! objects without the label, `spec.hostNetwork=false` matching pods that never set it)
//! sees the same result.

use std::collections::BTreeSet;

use serde_json::{Map, Value};

/// A parsed `labelSelector` query parameter: the AND of its requirements.
///
/// Accepts what `labels.Parse` accepts: `a=b`, `a==b`, `a!=b`, `a in (x,y)`,
/// `a notin (x)`, `a`, `!a`, `a>1`, `a<1`, joined with commas. The empty selector matches
/// every object.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LabelSelector {
    requirements: Vec<Requirement>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Requirement {
    key: String,
    operator: Operator,
    /// Sorted and de-duplicated, as `sets.String.List()` hands them to `NewRequirement`.
    values: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Operator {
    In,
    NotIn,
    Equals,
    DoubleEquals,
    NotEquals,
    GreaterThan,
    LessThan,
    Exists,
    DoesNotExist,
}

impl LabelSelector {
    /// Parses a `labelSelector` query string. The error is kube-apiserver's 400 message,
    /// e.g. `unable to parse requirement: found '', expected: identifier`.
    pub fn parse(selector: &str) -> Result<Self, String> {
        let mut requirements = Parser::new(selector).parse()?;
        requirements.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(Self { requirements })
    }

    /// Builds the selector a `metav1.LabelSelector` object (`matchLabels` and
    /// `matchExpressions`, as found in ClusterRole aggregation rules) stands for, as
    /// `metav1.LabelSelectorAsSelector` does: an empty object selects everything.
    pub fn from_label_selector_object(selector: &Value) -> Result<Self, String> {
        let mut requirements = Vec::new();
        if let Some(match_labels) = selector.get("matchLabels").and_then(Value::as_object) {
            for (key, value) in match_labels {
                let value = value.as_str().unwrap_or_default().to_string();
                requirements.push(new_requirement(key, Operator::Equals, vec![value])?);
            }
        }
        if let Some(expressions) = selector.get("matchExpressions").and_then(Value::as_array) {
            for expression in expressions {
                requirements.push(requirement_from_expression(expression)?);
            }
        }
        requirements.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(Self { requirements })
    }

    /// Whether an object with these `metadata.labels` is selected. `None` (no labels at
    /// all) behaves as an empty label set.
    pub fn matches(&self, labels: Option<&Map<String, Value>>) -> bool {
        self.requirements.iter().all(|requirement| requirement.matches(labels))
    }

    /// Whether the selector places no restriction at all.
    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }
}

fn requirement_from_expression(expression: &Value) -> Result<Requirement, String> {
    let key = expression.get("key").and_then(Value::as_str).unwrap_or_default();
    let operator = expression.get("operator").and_then(Value::as_str).unwrap_or_default();
    let values: Vec<String> = expression
        .get("values")
        .and_then(Value::as_array)
        .map(|values| values.iter().filter_map(Value::as_str).map(str::to_string).collect())
        .unwrap_or_default();
    let operator = match operator {
        "In" => Operator::In,
        "NotIn" => Operator::NotIn,
        "Exists" => Operator::Exists,
        "DoesNotExist" => Operator::DoesNotExist,
        other => return Err(format!("{} is not a valid label selector operator", go_quote(other))),
    };
    let values: BTreeSet<String> = values.into_iter().collect();
    new_requirement(key, operator, values.into_iter().collect())
}

impl Requirement {
    fn matches(&self, labels: Option<&Map<String, Value>>) -> bool {
        let value = labels.and_then(|labels| labels.get(&self.key));
        let has_value = |candidate: &str| self.values.iter().any(|value| value == candidate);
        match self.operator {
            Operator::In | Operator::Equals | Operator::DoubleEquals => {
                value.and_then(Value::as_str).is_some_and(has_value)
            }
            Operator::NotIn | Operator::NotEquals => match value {
                None => true,
                Some(value) => !value.as_str().is_some_and(has_value),
            },
            Operator::Exists => value.is_some(),
            Operator::DoesNotExist => value.is_none(),
            Operator::GreaterThan | Operator::LessThan => self.compares_numerically(value),
        }
    }

    /// `gt`/`lt` select only labels whose value parses as an integer.
    fn compares_numerically(&self, value: Option<&Value>) -> bool {
        let Some(actual) = value.and_then(Value::as_str).and_then(|v| v.parse::<i64>().ok()) else {
            return false;
        };
        let Some(bound) = self.values.first().and_then(|v| v.parse::<i64>().ok()) else {
            return false;
        };
        match self.operator {
            Operator::GreaterThan => actual > bound,
            _ => actual < bound,
        }
    }
}

/// `labels.NewRequirement`: validates the key, the operator's arity and every value.
fn new_requirement(key: &str, operator: Operator, values: Vec<String>) -> Result<Requirement, String> {
    let mut errors = Vec::new();
    let key_errors = label_key_errors(key);
    if !key_errors.is_empty() {
        errors.push(invalid_value("key", key, &key_errors.join("; ")));
    }
    match operator {
        Operator::In | Operator::NotIn if values.is_empty() => errors.push(format!(
            "values: Invalid value: {}: for 'in', 'notin' operators, values set can't be empty",
            go_string_slice(&values)
        )),
        Operator::Equals | Operator::DoubleEquals | Operator::NotEquals if values.len() != 1 => {
            errors.push(format!(
                "values: Invalid value: {}: exact-match compatibility requires one single value",
                go_string_slice(&values)
            ))
        }
        Operator::Exists | Operator::DoesNotExist if !values.is_empty() => errors.push(format!(
            "values: Invalid value: {}: values set must be empty for exists and does not exist",
            go_string_slice(&values)
        )),
        Operator::GreaterThan | Operator::LessThan => {
            if values.len() != 1 {
                errors.push(format!(
                    "values: Invalid value: {}: for 'Gt', 'Lt' operators, exactly one value is required",
                    go_string_slice(&values)
                ));
            }
            for (index, value) in values.iter().enumerate() {
                if value.parse::<i64>().is_err() {
                    errors.push(invalid_value(
                        &format!("values[{index}]"),
                        value,
                        "for 'Gt', 'Lt' operators, the value must be an integer",
                    ));
                }
            }
        }
        _ => {}
    }
    for (index, value) in values.iter().enumerate() {
        let value_errors = label_value_errors(value);
        if !value_errors.is_empty() {
            errors.push(invalid_value(&format!("values[{index}][{key}]"), value, &value_errors.join("; ")));
        }
    }
    if errors.is_empty() {
        Ok(Requirement { key: key.to_string(), operator, values })
    } else {
        Err(aggregate(errors))
    }
}

/// `field.Invalid(path, value, detail).Error()`.
fn invalid_value(path: &str, value: &str, detail: &str) -> String {
    format!("{path}: Invalid value: {}: {detail}", go_quote(value))
}

/// `utilerrors.NewAggregate(...).Error()`: one message bare, several in brackets.
fn aggregate(mut errors: Vec<String>) -> String {
    let mut seen = BTreeSet::new();
    errors.retain(|error| seen.insert(error.clone()));
    if errors.len() == 1 { errors.remove(0) } else { format!("[{}]", errors.join(", ")) }
}

/// Go's `%q` for the strings that can reach a message; close enough for printable text.
fn go_quote(value: &str) -> String {
    format!("{value:?}")
}

/// Go's `%#v` of a `[]string`, as `field.Invalid` prints a values slice.
fn go_string_slice(values: &[String]) -> String {
    let quoted: Vec<String> = values.iter().map(|value| go_quote(value)).collect();
    format!("[]string{{{}}}", quoted.join(", "))
}

const LABEL_NAME_REGEX: &str = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]";
const LABEL_NAME_MESSAGE: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";
const LABEL_NAME_EXAMPLES: &str =
    "(e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is";
const SUBDOMAIN_MESSAGE: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
const LABEL_VALUE_MESSAGE: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')";

/// `content.IsLabelKey`: an optional DNS subdomain prefix and `/`, then a name of at most
/// 63 characters.
fn label_key_errors(key: &str) -> Vec<String> {
    let parts: Vec<&str> = key.split('/').collect();
    let mut errors = Vec::new();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                errors.push("prefix part must be non-empty".to_string());
            } else {
                errors.extend(subdomain_errors(prefix).into_iter().map(|e| format!("prefix part {e}")));
            }
            *name
        }
        _ => {
            return vec![format!(
                "a valid label key {LABEL_NAME_MESSAGE} {LABEL_NAME_EXAMPLES} '{LABEL_NAME_REGEX}') with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
            )];
        }
    };
    if name.is_empty() {
        errors.push("name part must be non-empty".to_string());
    } else if name.len() > 63 {
        errors.push("name part must be no more than 63 bytes".to_string());
    }
    if !is_label_name(name) {
        errors.push(format!("name part {LABEL_NAME_MESSAGE} {LABEL_NAME_EXAMPLES} '{LABEL_NAME_REGEX}')"));
    }
    errors
}

/// `content.IsLabelValue`: empty, or a label name of at most 63 characters.
fn label_value_errors(value: &str) -> Vec<String> {
    let mut errors = Vec::new();
    if value.len() > 63 {
        errors.push("must be no more than 63 bytes".to_string());
    }
    if !value.is_empty() && !is_label_name(value) {
        errors.push(LABEL_VALUE_MESSAGE.to_string());
    }
    errors
}

/// Matches `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`.
fn is_label_name(name: &str) -> bool {
    let bytes = name.as_bytes();
    let (Some(first), Some(last)) = (bytes.first(), bytes.last()) else {
        return false;
    };
    first.is_ascii_alphanumeric()
        && last.is_ascii_alphanumeric()
        && bytes.iter().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

fn subdomain_errors(value: &str) -> Vec<String> {
    let mut errors = Vec::new();
    if value.len() > 253 {
        errors.push("must be no more than 253 bytes".to_string());
    }
    let is_dns_label = |label: &str| {
        let bytes = label.as_bytes();
        matches!((bytes.first(), bytes.last()), (Some(f), Some(l))
            if (f.is_ascii_lowercase() || f.is_ascii_digit()) && (l.is_ascii_lowercase() || l.is_ascii_digit()))
            && bytes.iter().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
    };
    if !value.split('.').all(is_dns_label) {
        errors.push(SUBDOMAIN_MESSAGE.to_string());
    }
    errors
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Token {
    EndOfString,
    ClosedPar,
    Comma,
    DoesNotExist,
    DoubleEquals,
    Equals,
    GreaterThan,
    Identifier,
    In,
    LessThan,
    NotEquals,
    NotIn,
    OpenPar,
}

fn keyword_token(literal: &str) -> Option<Token> {
    Some(match literal {
        ")" => Token::ClosedPar,
        "," => Token::Comma,
        "!" => Token::DoesNotExist,
        "==" => Token::DoubleEquals,
        "=" => Token::Equals,
        ">" => Token::GreaterThan,
        "in" => Token::In,
        "<" => Token::LessThan,
        "!=" => Token::NotEquals,
        "notin" => Token::NotIn,
        "(" => Token::OpenPar,
        _ => return None,
    })
}

fn is_whitespace(byte: u8) -> bool {
    matches!(byte, b' ' | b'\t' | b'\r' | b'\n')
}

/// The operator a single special symbol stands for; `None` for identifier characters.
fn special_symbol_token(byte: u8) -> Option<Token> {
    Some(match byte {
        b'=' => Token::Equals,
        b'!' => Token::DoesNotExist,
        b'(' => Token::OpenPar,
        b')' => Token::ClosedPar,
        b',' => Token::Comma,
        b'>' => Token::GreaterThan,
        b'<' => Token::LessThan,
        _ => return None,
    })
}

fn is_special_symbol(byte: u8) -> bool {
    special_symbol_token(byte).is_some()
}

/// Splits a selector into the tokens `labels.Lexer` produces.
fn lex(input: &str) -> Vec<(Token, String)> {
    let bytes = input.as_bytes();
    let mut position = 0;
    let mut items = Vec::new();
    loop {
        while position < bytes.len() && is_whitespace(bytes[position]) {
            position += 1;
        }
        let Some(&first) = bytes.get(position) else {
            items.push((Token::EndOfString, String::new()));
            return items;
        };
        let start = position;
        position += 1;
        let token = if let Some(mut token) = special_symbol_token(first) {
            // The longest run of special symbols that still forms an operator: `!=`, `==`.
            while position < bytes.len() && is_special_symbol(bytes[position]) {
                let Some(longer) = keyword_token(&input[start..=position]) else { break };
                token = longer;
                position += 1;
            }
            token
        } else {
            while position < bytes.len()
                && !is_special_symbol(bytes[position])
                && !is_whitespace(bytes[position])
            {
                position += 1;
            }
            keyword_token(&input[start..position]).unwrap_or(Token::Identifier)
        };
        items.push((token, input[start..position].to_string()));
    }
}

/// Whether `in`/`notin` are operators here or plain words (`x in (in)`).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Context {
    KeyAndOperator,
    Values,
}

/// A port of `labels.Parser`, kept close to the original so messages match.
struct Parser {
    items: Vec<(Token, String)>,
    position: usize,
}

impl Parser {
    fn new(input: &str) -> Self {
        Self { items: lex(input), position: 0 }
    }

    fn lookahead(&self, context: Context) -> (Token, String) {
        let index = self.position.min(self.items.len().saturating_sub(1));
        let (token, literal) = self.items.get(index).cloned().unwrap_or((Token::EndOfString, String::new()));
        (Self::in_context(token, context), literal)
    }

    fn consume(&mut self, context: Context) -> (Token, String) {
        let item = self.lookahead(context);
        self.position += 1;
        item
    }

    fn in_context(token: Token, context: Context) -> Token {
        match (context, token) {
            (Context::Values, Token::In | Token::NotIn) => Token::Identifier,
            _ => token,
        }
    }

    fn parse(&mut self) -> Result<Vec<Requirement>, String> {
        let mut requirements = Vec::new();
        loop {
            let (token, literal) = self.lookahead(Context::Values);
            match token {
                Token::Identifier | Token::DoesNotExist => {
                    let requirement =
                        self.parse_requirement().map_err(|e| format!("unable to parse requirement: {e}"))?;
                    requirements.push(requirement);
                    let (token, literal) = self.consume(Context::Values);
                    match token {
                        Token::EndOfString => return Ok(requirements),
                        Token::Comma => {
                            let (next, next_literal) = self.lookahead(Context::Values);
                            if next != Token::Identifier && next != Token::DoesNotExist {
                                return Err(format!(
                                    "found '{next_literal}', expected: identifier after ','"
                                ));
                            }
                        }
                        _ => return Err(format!("found '{literal}', expected: ',' or 'end of string'")),
                    }
                }
                Token::EndOfString => return Ok(requirements),
                _ => return Err(format!("found '{literal}', expected: !, identifier, or 'end of string'")),
            }
        }
    }

    fn parse_requirement(&mut self) -> Result<Requirement, String> {
        let (key, operator) = self.parse_key_and_infer_operator()?;
        if let Some(operator @ (Operator::Exists | Operator::DoesNotExist)) = operator {
            return new_requirement(&key, operator, Vec::new());
        }
        let operator = self.parse_operator()?;
        let values = match operator {
            Operator::In | Operator::NotIn => self.parse_values()?,
            _ => self.parse_exact_value()?,
        };
        new_requirement(&key, operator, values.into_iter().collect())
    }

    fn parse_key_and_infer_operator(&mut self) -> Result<(String, Option<Operator>), String> {
        let mut operator = None;
        let (mut token, mut literal) = self.consume(Context::Values);
        if token == Token::DoesNotExist {
            operator = Some(Operator::DoesNotExist);
            (token, literal) = self.consume(Context::Values);
        }
        if token != Token::Identifier {
            return Err(format!("found '{literal}', expected: identifier"));
        }
        let key_errors = label_key_errors(&literal);
        if !key_errors.is_empty() {
            return Err(invalid_value("<nil>", &literal, &key_errors.join("; ")));
        }
        let (next, _) = self.lookahead(Context::Values);
        if matches!(next, Token::EndOfString | Token::Comma) && operator.is_none() {
            operator = Some(Operator::Exists);
        }
        Ok((literal, operator))
    }

    fn parse_operator(&mut self) -> Result<Operator, String> {
        let (token, literal) = self.consume(Context::KeyAndOperator);
        Ok(match token {
            Token::In => Operator::In,
            Token::Equals => Operator::Equals,
            Token::DoubleEquals => Operator::DoubleEquals,
            Token::GreaterThan => Operator::GreaterThan,
            Token::LessThan => Operator::LessThan,
            Token::NotIn => Operator::NotIn,
            Token::NotEquals => Operator::NotEquals,
            _ => return Err(format!("found '{literal}', expected: in, notin, =, ==, !=, gt, lt")),
        })
    }

    fn parse_values(&mut self) -> Result<BTreeSet<String>, String> {
        let (token, literal) = self.consume(Context::Values);
        if token != Token::OpenPar {
            return Err(format!("found '{literal}' expected: '('"));
        }
        let (token, literal) = self.lookahead(Context::Values);
        match token {
            Token::Identifier | Token::Comma => {
                let values = self.parse_identifiers_list()?;
                let (token, _) = self.consume(Context::Values);
                if token != Token::ClosedPar {
                    return Err(format!("found '{literal}', expected: ')'"));
                }
                Ok(values)
            }
            Token::ClosedPar => {
                self.consume(Context::Values);
                Ok(BTreeSet::from([String::new()]))
            }
            _ => Err(format!("found '{literal}', expected: ',', ')' or identifier")),
        }
    }

    /// A comma-separated list of possibly empty identifiers: `(a,,b)` holds `""` too.
    fn parse_identifiers_list(&mut self) -> Result<BTreeSet<String>, String> {
        let mut values = BTreeSet::new();
        loop {
            let (token, literal) = self.consume(Context::Values);
            match token {
                Token::Identifier => {
                    values.insert(literal);
                    let (next, next_literal) = self.lookahead(Context::Values);
                    match next {
                        Token::Comma => continue,
                        Token::ClosedPar => return Ok(values),
                        _ => return Err(format!("found '{next_literal}', expected: ',' or ')'")),
                    }
                }
                Token::Comma => {
                    if values.is_empty() {
                        values.insert(String::new());
                    }
                    let (next, _) = self.lookahead(Context::Values);
                    if next == Token::ClosedPar {
                        values.insert(String::new());
                        return Ok(values);
                    }
                    if next == Token::Comma {
                        values.insert(String::new());
                    }
                }
                _ => return Err(format!("found '{literal}', expected: ',', or identifier")),
            }
        }
    }

    fn parse_exact_value(&mut self) -> Result<BTreeSet<String>, String> {
        let (token, _) = self.lookahead(Context::Values);
        if matches!(token, Token::EndOfString | Token::Comma) {
            return Ok(BTreeSet::from([String::new()]));
        }
        let (token, literal) = self.consume(Context::Values);
        if token == Token::Identifier {
            Ok(BTreeSet::from([literal]))
        } else {
            Err(format!("found '{literal}', expected: identifier"))
        }
    }
}

/// A parsed `fieldSelector` query parameter: the AND of `field=value` and
/// `field!=value` terms. Values may escape `\`, `,` and `=` with a backslash.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldSelector {
    terms: Vec<FieldTerm>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct FieldTerm {
    field: String,
    value: String,
    equal: bool,
}

impl FieldSelector {
    /// Parses a `fieldSelector` query string as `fields.ParseSelector` does. Whether the
    /// fields exist for a resource is a separate question: see [`Self::check_supported`].
    pub fn parse(selector: &str) -> Result<Self, String> {
        let mut parts = split_terms(selector);
        parts.sort();
        let mut terms = Vec::new();
        for part in parts.into_iter().filter(|part| !part.is_empty()) {
            let Some((field, operator, raw_value)) = split_term(part) else {
                return Err(format!("invalid selector: '{selector}'; can't understand '{part}'"));
            };
            let value = unescape_value(raw_value)?;
            terms.push(FieldTerm { field: field.to_string(), value, equal: operator != "!=" });
        }
        Ok(Self { terms })
    }

    /// Whether the selector places no restriction at all.
    pub fn is_empty(&self) -> bool {
        self.terms.is_empty()
    }

    /// Rejects fields the resource cannot be selected by, with kube-apiserver's message.
    ///
    /// Resources with their own field-label conversion (pods, namespaces, secrets, core
    /// and `events.k8s.io` events, nodes, services, replication controllers) answer
    /// `field label not supported: F`; every other resource, custom resources included,
    /// supports only `metadata.name` and `metadata.namespace` and answers
    /// `"F" is not a known field selector: only "metadata.name", "metadata.namespace"`.
    pub fn check_supported(&self, group: &str, resource: &str, is_custom: bool) -> Result<(), String> {
        let supported = if is_custom { None } else { supported_fields(group, resource) };
        for term in &self.terms {
            match supported {
                Some(fields) if fields.contains(&term.field.as_str()) => {}
                Some(_) => return Err(format!("field label not supported: {}", term.field)),
                None if matches!(term.field.as_str(), "metadata.name" | "metadata.namespace") => {}
                None => {
                    return Err(format!(
                        "{} is not a known field selector: only \"metadata.name\", \"metadata.namespace\"",
                        go_quote(&term.field)
                    ));
                }
            }
        }
        Ok(())
    }

    /// Whether an object at `namespace`/`name` is selected, when every term is about
    /// `metadata.name` or `metadata.namespace`; `None` when the object itself is needed.
    pub fn matches_place(&self, namespace: &str, name: &str) -> Option<bool> {
        self.terms.iter().try_fold(true, |all, term| {
            let value = match term.field.as_str() {
                "metadata.name" => name,
                "metadata.namespace" => namespace,
                _ => return None,
            };
            Some(all && ((value == term.value) == term.equal))
        })
    }

    /// Whether the object (as stored JSON) is selected. Field values compare as strings:
    /// booleans as `true`/`false`, absent fields as the empty string.
    pub fn matches(&self, object: &Value) -> bool {
        self.terms.iter().all(|term| (field_value(object, &term.field) == term.value) == term.equal)
    }

    /// The value every object must have for `field`, if an `=`/`==` term requires one:
    /// RBAC treats `list`/`watch` with `metadata.name=x` as a request for the object `x`.
    pub fn required_value(&self, field: &str) -> Option<&str> {
        self.terms.iter().find(|term| term.equal && term.field == field).map(|term| term.value.as_str())
    }
}

/// The field labels each built-in resource's conversion function accepts.
fn supported_fields(group: &str, resource: &str) -> Option<&'static [&'static str]> {
    Some(match (group, resource) {
        ("", "pods") => &[
            "metadata.name",
            "metadata.namespace",
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "spec.hostNetwork",
            "status.phase",
            "status.podIP",
            "status.podIPs",
            "status.nominatedNodeName",
            "spec.host",
        ],
        ("", "namespaces") => &["status.phase", "metadata.name"],
        ("", "secrets") => &["type", "metadata.namespace", "metadata.name"],
        ("", "nodes") => &["metadata.name", "spec.unschedulable"],
        ("", "services") => &["metadata.namespace", "metadata.name", "spec.clusterIP", "spec.type"],
        ("", "replicationcontrollers") => &["metadata.name", "metadata.namespace", "status.replicas"],
        ("", "events") => &[
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source",
            "type",
            "metadata.namespace",
            "metadata.name",
        ],
        ("events.k8s.io", "events") => &[
            "reason",
            "regarding.kind",
            "regarding.namespace",
            "regarding.name",
            "regarding.uid",
            "regarding.apiVersion",
            "regarding.resourceVersion",
            "regarding.fieldPath",
            "reportingController",
            "source",
            "type",
            "metadata.namespace",
            "metadata.name",
        ],
        _ => return None,
    })
}

/// The selectable value of `field` on a stored object, the way each resource's
/// `ToSelectableFields` derives it. Core and `events.k8s.io` events are one resource in
/// kube-apiserver, so either vocabulary reads either shape.
fn field_value(object: &Value, field: &str) -> String {
    match field {
        "spec.host" => scalar_at(object, "spec.nodeName").unwrap_or_default(),
        "spec.hostNetwork" => scalar_at(object, field).unwrap_or_else(|| "false".to_string()),
        "status.podIP" => scalar_at(object, "status.podIPs.0.ip")
            .or_else(|| scalar_at(object, "status.podIP"))
            .unwrap_or_default(),
        // Accepted by the conversion but never part of the pod's field set.
        "status.podIPs" => String::new(),
        "source" => first_scalar(object, &["source.component", "deprecatedSource.component"]),
        "reportingComponent" | "reportingController" => {
            first_scalar(object, &["reportingComponent", "reportingController"])
        }
        _ => {
            if let Some(rest) =
                field.strip_prefix("involvedObject.").or_else(|| field.strip_prefix("regarding."))
            {
                first_scalar(object, &[&format!("involvedObject.{rest}"), &format!("regarding.{rest}")])
            } else {
                scalar_at(object, field).unwrap_or_default()
            }
        }
    }
}

fn first_scalar(object: &Value, paths: &[&str]) -> String {
    paths.iter().find_map(|path| scalar_at(object, path)).unwrap_or_default()
}

/// The string form of the scalar at a dotted path (array indexes as numbers), if any.
fn scalar_at(object: &Value, path: &str) -> Option<String> {
    let mut current = object;
    for segment in path.split('.') {
        current = match current {
            Value::Object(map) => map.get(segment)?,
            Value::Array(items) => items.get(segment.parse::<usize>().ok()?)?,
            _ => return None,
        };
    }
    match current {
        Value::String(s) => Some(s.clone()),
        Value::Bool(b) => Some(b.to_string()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// Splits on commas that are not escaped with a backslash; escapes stay in the terms.
fn split_terms(selector: &str) -> Vec<&str> {
    if selector.is_empty() {
        return Vec::new();
    }
    let mut terms = Vec::new();
    let mut start = 0;
    let mut in_slash = false;
    for (index, c) in selector.char_indices() {
        if in_slash {
            in_slash = false;
        } else if c == '\\' {
            in_slash = true;
        } else if c == ',' {
            terms.push(&selector[start..index]);
            start = index + 1;
        }
    }
    terms.push(&selector[start..]);
    terms
}

/// Splits `lhs op rhs` at the first operator; `!=` and `==` win over `=` at one position.
fn split_term(term: &str) -> Option<(&str, &'static str, &str)> {
    term.char_indices().find_map(|(index, _)| {
        let remaining = &term[index..];
        ["!=", "==", "="]
            .into_iter()
            .find(|operator| remaining.starts_with(operator))
            .map(|operator| (&term[..index], operator, &remaining[operator.len()..]))
    })
}

/// `fields.UnescapeValue`: `\\`, `\,` and `\=` are the only escapes, and bare `,`/`=`
/// are errors.
fn unescape_value(raw: &str) -> Result<String, String> {
    let mut value = String::with_capacity(raw.len());
    let mut in_slash = false;
    for c in raw.chars() {
        if in_slash {
            if !matches!(c, '\\' | ',' | '=') {
                return Err(format!("invalid field selector: invalid escape sequence: \\{c}"));
            }
            value.push(c);
            in_slash = false;
            continue;
        }
        match c {
            '\\' => in_slash = true,
            // Go prints the rune with %v, i.e. as its code point.
            ',' | '=' => {
                return Err(format!(
                    "invalid field selector: unescaped character in value: {}",
                    u32::from(c)
                ));
            }
            _ => value.push(c),
        }
    }
    if in_slash {
        return Err("invalid field selector: invalid escape sequence: \\".to_string());
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn labels(value: Value) -> Map<String, Value> {
        value.as_object().cloned().unwrap_or_default()
    }

    fn selects(selector: &str, object_labels: Value) -> bool {
        LabelSelector::parse(selector).unwrap().matches(Some(&labels(object_labels)))
    }

    #[test]
    fn empty_label_selector_matches_everything() {
        let selector = LabelSelector::parse("").unwrap();
        assert!(selector.is_empty());
        assert!(selector.matches(None));
        assert!(selector.matches(Some(&labels(json!({"a": "b"})))));
    }

    #[test]
    fn equality_operators_match_only_the_exact_value() {
        for selector in ["app=web", "app==web", " app = web "] {
            assert!(selects(selector, json!({"app": "web"})), "{selector}");
            assert!(!selects(selector, json!({"app": "db"})), "{selector}");
            assert!(!selects(selector, json!({})), "{selector}");
        }
    }

    #[test]
    fn not_equals_matches_objects_without_the_label() {
        assert!(selects("app!=web", json!({})));
        assert!(selects("app!=web", json!({"app": "db"})));
        assert!(!selects("app!=web", json!({"app": "web"})));
        assert!(LabelSelector::parse("app!=web").unwrap().matches(None));
    }

    #[test]
    fn in_operator_matches_any_listed_value() {
        assert!(selects("tier in (web, db)", json!({"tier": "db"})));
        assert!(selects("tier in (web,db)", json!({"tier": "web"})));
        assert!(!selects("tier in (web,db)", json!({"tier": "cache"})));
        assert!(!selects("tier in (web,db)", json!({})));
    }

    #[test]
    fn notin_operator_matches_missing_label_and_unlisted_values() {
        assert!(selects("tier notin (web)", json!({})));
        assert!(selects("tier notin (web)", json!({"tier": "db"})));
        assert!(!selects("tier notin (web,db)", json!({"tier": "db"})));
    }

    #[test]
    fn bare_key_requires_existence_and_bang_requires_absence() {
        assert!(selects("managed", json!({"managed": ""})));
        assert!(!selects("managed", json!({})));
        assert!(selects("!managed", json!({})));
        assert!(!selects("!managed", json!({"managed": "yes"})));
    }

    #[test]
    fn comma_joined_requirements_must_all_hold() {
        let selector = "app=web,tier in (a,b),!legacy";
        assert!(selects(selector, json!({"app": "web", "tier": "a"})));
        assert!(!selects(selector, json!({"app": "web", "tier": "a", "legacy": "1"})));
        assert!(!selects(selector, json!({"app": "web", "tier": "c"})));
    }

    #[test]
    fn empty_value_and_empty_set_select_empty_label_values() {
        assert!(selects("a=", json!({"a": ""})));
        assert!(!selects("a=", json!({"a": "x"})));
        assert!(selects("a in ()", json!({"a": ""})));
        assert!(selects("a in (x,,y)", json!({"a": ""})));
    }

    #[test]
    fn in_and_notin_are_plain_words_inside_value_sets() {
        assert!(selects("x in (in,notin)", json!({"x": "notin"})));
        assert!(selects("in=in", json!({"in": "in"})));
    }

    #[test]
    fn greater_and_less_than_compare_integers() {
        assert!(selects("replicas>2", json!({"replicas": "3"})));
        assert!(!selects("replicas>2", json!({"replicas": "2"})));
        assert!(selects("replicas<2", json!({"replicas": "1"})));
        assert!(!selects("replicas<2", json!({"replicas": "many"})));
        assert!(!selects("replicas<2", json!({})));
    }

    #[test]
    fn prefixed_keys_are_accepted() {
        assert!(selects("app.kubernetes.io/name=kopper", json!({"app.kubernetes.io/name": "kopper"})));
    }

    #[test]
    fn trailing_comma_is_rejected_with_apiserver_message() {
        assert_eq!(LabelSelector::parse("a=b,").unwrap_err(), "found '', expected: identifier after ','");
    }

    #[test]
    fn missing_operator_is_rejected_with_apiserver_message() {
        assert_eq!(
            LabelSelector::parse("a b").unwrap_err(),
            "unable to parse requirement: found 'b', expected: in, notin, =, ==, !=, gt, lt"
        );
    }

    #[test]
    fn unclosed_value_set_is_rejected() {
        assert_eq!(
            LabelSelector::parse("a in (x").unwrap_err(),
            "unable to parse requirement: found '', expected: ',' or ')'"
        );
        assert_eq!(
            LabelSelector::parse("a in x").unwrap_err(),
            "unable to parse requirement: found 'x' expected: '('"
        );
    }

    #[test]
    fn leftover_tokens_after_a_requirement_are_rejected() {
        assert_eq!(LabelSelector::parse("!a=b").unwrap_err(), "found '=', expected: ',' or 'end of string'");
        assert_eq!(
            LabelSelector::parse("=a").unwrap_err(),
            "found '=', expected: !, identifier, or 'end of string'"
        );
    }

    #[test]
    fn invalid_label_key_is_rejected_with_validation_detail() {
        assert_eq!(
            LabelSelector::parse("a+b=c").unwrap_err(),
            "unable to parse requirement: <nil>: Invalid value: \"a+b\": name part must consist of alphanumeric \
             characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  \
             or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
        );
    }

    #[test]
    fn invalid_label_value_is_rejected_with_its_path() {
        let error = LabelSelector::parse("a=-x").unwrap_err();
        assert!(
            error.starts_with(
                "unable to parse requirement: values[0][a]: Invalid value: \"-x\": a valid label must"
            ),
            "{error}"
        );
    }

    #[test]
    fn non_integer_bound_for_gt_is_rejected() {
        let error = LabelSelector::parse("a>x").unwrap_err();
        assert_eq!(
            error,
            "unable to parse requirement: values[0]: Invalid value: \"x\": for 'Gt', 'Lt' operators, the value \
             must be an integer"
        );
    }

    #[test]
    fn label_selector_object_combines_match_labels_and_expressions() {
        let selector = LabelSelector::from_label_selector_object(&json!({
            "matchLabels": {"aggregate": "true"},
            "matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["db"]}]
        }))
        .unwrap();
        assert!(selector.matches(Some(&labels(json!({"aggregate": "true", "tier": "web"})))));
        assert!(!selector.matches(Some(&labels(json!({"aggregate": "true", "tier": "db"})))));
        assert!(!selector.matches(Some(&labels(json!({"tier": "web"})))));
    }

    #[test]
    fn empty_label_selector_object_selects_everything() {
        let selector = LabelSelector::from_label_selector_object(&json!({})).unwrap();
        assert!(selector.is_empty());
        assert!(selector.matches(None));
    }

    #[test]
    fn unknown_expression_operator_is_rejected() {
        let error = LabelSelector::from_label_selector_object(&json!({
            "matchExpressions": [{"key": "a", "operator": "Gt", "values": ["1"]}]
        }))
        .unwrap_err();
        assert_eq!(error, "\"Gt\" is not a valid label selector operator");
    }

    fn pod() -> Value {
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "web-0", "namespace": "prod"},
            "spec": {"nodeName": "node-a", "restartPolicy": "Always"},
            "status": {"phase": "Running", "podIP": "10.0.0.9", "podIPs": [{"ip": "10.0.0.9"}]}
        })
    }

    fn field_selects(selector: &str, object: &Value) -> bool {
        FieldSelector::parse(selector).unwrap().matches(object)
    }

    #[test]
    fn empty_field_selector_matches_everything() {
        let selector = FieldSelector::parse("").unwrap();
        assert!(selector.is_empty());
        assert!(selector.matches(&pod()));
    }

    #[test]
    fn field_equality_and_inequality_compare_string_values() {
        assert!(field_selects("metadata.name=web-0", &pod()));
        assert!(field_selects("metadata.name==web-0", &pod()));
        assert!(!field_selects("metadata.name!=web-0", &pod()));
        assert!(field_selects("status.phase=Running,spec.nodeName=node-a", &pod()));
        assert!(!field_selects("status.phase=Running,spec.nodeName=node-b", &pod()));
    }

    #[test]
    fn missing_fields_compare_as_empty_strings() {
        assert!(field_selects("status.nominatedNodeName=", &pod()));
        assert!(field_selects("spec.schedulerName!=default-scheduler", &pod()));
    }

    #[test]
    fn host_network_defaults_to_false() {
        assert!(field_selects("spec.hostNetwork=false", &pod()));
        let mut host_pod = pod();
        host_pod["spec"]["hostNetwork"] = json!(true);
        assert!(field_selects("spec.hostNetwork=true", &host_pod));
    }

    #[test]
    fn pod_ip_comes_from_the_first_pod_ip() {
        assert!(field_selects("status.podIP=10.0.0.9", &pod()));
        assert!(field_selects("spec.host=node-a", &pod()));
    }

    #[test]
    fn escaped_commas_and_equals_are_part_of_the_value() {
        let object = json!({"metadata": {"name": "a,b=c\\d"}});
        assert!(field_selects("metadata.name=a\\,b\\=c\\\\d", &object));
    }

    #[test]
    fn unescaped_equals_in_value_is_rejected() {
        assert_eq!(
            FieldSelector::parse("metadata.name=a=b").unwrap_err(),
            "invalid field selector: unescaped character in value: 61"
        );
    }

    #[test]
    fn unknown_escape_is_rejected() {
        assert_eq!(
            FieldSelector::parse("metadata.name=a\\x").unwrap_err(),
            "invalid field selector: invalid escape sequence: \\x"
        );
        assert_eq!(
            FieldSelector::parse("metadata.name=a\\").unwrap_err(),
            "invalid field selector: invalid escape sequence: \\"
        );
    }

    #[test]
    fn term_without_operator_is_rejected() {
        assert_eq!(
            FieldSelector::parse("metadata.name").unwrap_err(),
            "invalid selector: 'metadata.name'; can't understand 'metadata.name'"
        );
    }

    #[test]
    fn pods_support_their_spec_and_status_fields() {
        let selector =
            FieldSelector::parse("spec.nodeName=a,status.phase=Running,spec.hostNetwork=false").unwrap();
        assert_eq!(selector.check_supported("", "pods", false), Ok(()));
    }

    #[test]
    fn unsupported_pod_field_is_rejected_as_not_supported() {
        let selector = FieldSelector::parse("spec.containers=x").unwrap();
        assert_eq!(
            selector.check_supported("", "pods", false),
            Err("field label not supported: spec.containers".to_string())
        );
    }

    #[test]
    fn namespaces_cannot_be_selected_by_namespace() {
        let selector = FieldSelector::parse("metadata.namespace=x").unwrap();
        assert_eq!(
            selector.check_supported("", "namespaces", false),
            Err("field label not supported: metadata.namespace".to_string())
        );
        let phase = FieldSelector::parse("status.phase=Active").unwrap();
        assert_eq!(phase.check_supported("", "namespaces", false), Ok(()));
    }

    #[test]
    fn configmaps_support_only_metadata_fields() {
        assert_eq!(
            FieldSelector::parse("metadata.name=a,metadata.namespace=b").unwrap().check_supported(
                "",
                "configmaps",
                false
            ),
            Ok(())
        );
        assert_eq!(
            FieldSelector::parse("data.key=x").unwrap().check_supported("", "configmaps", false),
            Err("\"data.key\" is not a known field selector: only \"metadata.name\", \"metadata.namespace\""
                .to_string())
        );
    }

    #[test]
    fn custom_resources_support_only_metadata_fields_even_with_builtin_names() {
        let selector = FieldSelector::parse("status.phase=Running").unwrap();
        assert!(selector.check_supported("", "pods", true).is_err());
        assert!(selector.check_supported("example.com", "widgets", true).is_err());
        let by_name = FieldSelector::parse("metadata.name=w").unwrap();
        assert_eq!(by_name.check_supported("example.com", "widgets", true), Ok(()));
    }

    #[test]
    fn secrets_can_be_selected_by_type() {
        let secret = json!({"metadata": {"name": "s"}, "type": "kubernetes.io/tls"});
        let selector = FieldSelector::parse("type=kubernetes.io/tls").unwrap();
        assert_eq!(selector.check_supported("", "secrets", false), Ok(()));
        assert!(selector.matches(&secret));
    }

    #[test]
    fn core_events_are_selected_by_involved_object() {
        let event = json!({
            "apiVersion": "v1", "kind": "Event",
            "involvedObject": {"kind": "Pod", "name": "web-0"},
            "reason": "Started", "source": {"component": "kubelet"}, "reportingComponent": "kubelet"
        });
        let selector =
            FieldSelector::parse("involvedObject.kind=Pod,involvedObject.name=web-0,source=kubelet").unwrap();
        assert_eq!(selector.check_supported("", "events", false), Ok(()));
        assert!(selector.matches(&event));
        assert!(field_selects("reportingComponent=kubelet", &event));
    }

    #[test]
    fn events_k8s_io_events_are_selected_by_regarding() {
        let event = json!({
            "apiVersion": "events.k8s.io/v1", "kind": "Event",
            "regarding": {"kind": "Widget", "name": "w"},
            "reportingController": "kopper", "type": "Warning"
        });
        let selector =
            FieldSelector::parse("regarding.kind=Widget,reportingController=kopper,type=Warning").unwrap();
        assert_eq!(selector.check_supported("events.k8s.io", "events", false), Ok(()));
        assert!(selector.matches(&event));
        assert_eq!(
            FieldSelector::parse("involvedObject.kind=Widget").unwrap().check_supported(
                "events.k8s.io",
                "events",
                false
            ),
            Err("field label not supported: involvedObject.kind".to_string())
        );
    }

    #[test]
    fn required_name_is_exposed_for_authorization() {
        let selector = FieldSelector::parse("metadata.name=x,status.phase!=y").unwrap();
        assert_eq!(selector.required_value("metadata.name"), Some("x"));
        assert_eq!(selector.required_value("status.phase"), None);
    }
}
