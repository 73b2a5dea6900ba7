//! Field paths and field sets in structured-merge-diff's model, and the `FieldsV1`
//! encoding kube-apiserver stores them in (`{"f:data":{"f:key":{}}}`).
//!
//! A field set names the leaves of an object (scalars, atomic lists and maps, empty
//! containers), every item of a non-atomic list, and, in sets computed by comparing two
//! objects, the containers that appeared or disappeared.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde_json::{Map, Value};

use super::{ListType, ListTypes};

/// One step of a field path.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PathElement {
    /// An object field, `.name`.
    Field(String),
    /// An item of a map-type list: key field names with their JSON-encoded values, sorted
    /// by name, `[name="app"]`.
    Key(Vec<(String, String)>),
    /// An item of a set-type list, JSON-encoded, `[="finalizer"]`.
    Value(String),
    /// A list position, `[0]` (only found in managed fields written by others).
    Index(usize),
}

/// A path from the object root.
pub type FieldPath = Vec<PathElement>;

impl fmt::Display for PathElement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PathElement::Field(name) => write!(f, ".{name}"),
            PathElement::Key(pairs) => {
                let parts: Vec<String> = pairs.iter().map(|(k, v)| format!("{k}={v}")).collect();
                write!(f, "[{}]", parts.join(","))
            }
            PathElement::Value(value) => write!(f, "[={value}]"),
            PathElement::Index(index) => write!(f, "[{index}]"),
        }
    }
}

/// Renders a path as kube-apiserver does in conflict messages, e.g. `.data.key`.
pub fn path_to_string(path: &[PathElement]) -> String {
    path.iter().map(ToString::to_string).collect()
}

impl PathElement {
    /// The `FieldsV1` key of this element: `f:name`, `k:{"name":"app"}`, `v:"x"`, `i:0`.
    fn encode(&self) -> String {
        match self {
            PathElement::Field(name) => format!("f:{name}"),
            PathElement::Key(pairs) => {
                let parts: Vec<String> =
                    pairs.iter().map(|(k, v)| format!("{}:{v}", Value::String(k.clone()))).collect();
                format!("k:{{{}}}", parts.join(","))
            }
            PathElement::Value(value) => format!("v:{value}"),
            PathElement::Index(index) => format!("i:{index}"),
        }
    }

    fn decode(encoded: &str) -> Option<PathElement> {
        let (prefix, rest) = encoded.split_once(':')?;
        match prefix {
            "f" => Some(PathElement::Field(rest.to_owned())),
            "k" => match serde_json::from_str::<Value>(rest).ok()? {
                Value::Object(map) => Some(PathElement::Key(key_pairs(map.iter()))),
                _ => None,
            },
            "v" => serde_json::from_str::<Value>(rest).ok().map(|v| PathElement::Value(v.to_string())),
            "i" => rest.parse().ok().map(PathElement::Index),
            _ => None,
        }
    }
}

/// Sorted `(name, JSON value)` pairs for a map-list key.
fn key_pairs<'a>(fields: impl Iterator<Item = (&'a String, &'a Value)>) -> Vec<(String, String)> {
    let mut pairs: Vec<(String, String)> = fields.map(|(k, v)| (k.clone(), v.to_string())).collect();
    pairs.sort();
    pairs
}

/// A set of field paths.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldSet(BTreeSet<FieldPath>);

impl FieldSet {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn insert(&mut self, path: FieldPath) {
        self.0.insert(path);
    }

    pub fn contains(&self, path: &[PathElement]) -> bool {
        self.0.contains(path)
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn iter(&self) -> impl Iterator<Item = &FieldPath> {
        self.0.iter()
    }

    /// Whether some path in the set lies strictly below `prefix`.
    pub fn has_descendant_of(&self, prefix: &[PathElement]) -> bool {
        self.0
            .range::<[PathElement], _>((std::ops::Bound::Excluded(prefix), std::ops::Bound::Unbounded))
            .next()
            .is_some_and(|p| p.starts_with(prefix))
    }

    pub fn union(&self, other: &FieldSet) -> FieldSet {
        FieldSet(self.0.union(&other.0).cloned().collect())
    }

    pub fn difference(&self, other: &FieldSet) -> FieldSet {
        FieldSet(self.0.difference(&other.0).cloned().collect())
    }

    pub fn intersection(&self, other: &FieldSet) -> FieldSet {
        FieldSet(self.0.intersection(&other.0).cloned().collect())
    }

    /// Parses a `fieldsV1` object.
    pub fn from_fields_v1(fields: &Value) -> Result<FieldSet, String> {
        let mut set = FieldSet::new();
        let mut path = Vec::new();
        decode_into(fields, &mut path, &mut set)?;
        Ok(set)
    }

    /// Encodes the set as a `fieldsV1` object: every path is a nested key; a path that is
    /// itself in the set and also has children carries a `".": {}` marker.
    pub fn to_fields_v1(&self) -> Value {
        let mut root = TrieNode::default();
        for path in &self.0 {
            let mut node = &mut root;
            for element in path {
                node = node.children.entry(element.encode()).or_default();
            }
            node.member = true;
        }
        root.to_value()
    }
}

impl FromIterator<FieldPath> for FieldSet {
    fn from_iter<T: IntoIterator<Item = FieldPath>>(iter: T) -> Self {
        FieldSet(iter.into_iter().collect())
    }
}

#[derive(Default)]
struct TrieNode {
    member: bool,
    children: BTreeMap<String, TrieNode>,
}

impl TrieNode {
    fn to_value(&self) -> Value {
        let mut map = Map::new();
        if self.member && !self.children.is_empty() {
            map.insert(".".into(), Value::Object(Map::new()));
        }
        for (key, child) in &self.children {
            map.insert(key.clone(), child.to_value());
        }
        Value::Object(map)
    }
}

fn decode_into(node: &Value, path: &mut FieldPath, set: &mut FieldSet) -> Result<(), String> {
    let Value::Object(children) = node else { return Err(format!("expected an object, got {node}")) };
    if children.is_empty() && !path.is_empty() {
        set.insert(path.clone());
    }
    for (key, child) in children {
        if key == "." {
            set.insert(path.clone());
            continue;
        }
        let element =
            PathElement::decode(key).ok_or_else(|| format!("invalid field path element {key:?}"))?;
        path.push(element);
        decode_into(child, path, set)?;
        path.pop();
    }
    Ok(())
}

/// Field names along a path with list items left out, as `ListTypes` expects them.
#[derive(Debug, Default, Clone)]
pub(crate) struct Names(Vec<String>);

impl Names {
    pub(crate) fn push(&mut self, name: &str) {
        self.0.push(name.to_owned());
    }

    pub(crate) fn pop(&mut self) {
        self.0.pop();
    }

    fn as_strs(&self) -> Vec<&str> {
        self.0.iter().map(String::as_str).collect()
    }

    pub(crate) fn list_type(&self, lists: &dyn ListTypes) -> ListType {
        lists.list_type(&self.as_strs())
    }

    pub(crate) fn map_is_atomic(&self, lists: &dyn ListTypes) -> bool {
        lists.map_is_atomic(&self.as_strs())
    }
}

/// The path element identifying `item` in a list of type `list_type`.
pub(crate) fn item_element(item: &Value, list_type: &ListType) -> Result<PathElement, String> {
    match list_type {
        ListType::Atomic => Err("atomic lists have no item paths".into()),
        ListType::Set => match item {
            Value::Object(_) | Value::Array(_) => Err(format!("set items must be scalars, got {item}")),
            scalar => Ok(PathElement::Value(scalar.to_string())),
        },
        ListType::Map(keys) => {
            let Value::Object(fields) = item else {
                return Err(format!("associative list items must be objects, got {item}"));
            };
            let present = fields.iter().filter(|(k, v)| keys.contains(*k) && !v.is_null());
            let pairs = key_pairs(present);
            if pairs.is_empty() {
                return Err(format!(
                    "associative list with keys has an element that omits all key fields {keys:?}"
                ));
            }
            Ok(PathElement::Key(pairs))
        }
    }
}

/// Path elements of every item of a non-atomic list, in order, without duplicates.
///
/// Fails on items that cannot be identified or are repeated; callers walking stored
/// objects fall back to treating such a list as atomic.
pub(crate) fn item_elements(items: &[Value], list_type: &ListType) -> Result<Vec<PathElement>, String> {
    let mut seen = BTreeSet::new();
    let mut elements = Vec::with_capacity(items.len());
    for (index, item) in items.iter().enumerate() {
        let element = item_element(item, list_type).map_err(|e| format!("element {index}: {e}"))?;
        if !seen.insert(element.clone()) {
            return Err(format!("duplicate entries for key {element}"));
        }
        elements.push(element);
    }
    Ok(elements)
}

/// The fields an applied configuration sets: what its manager will own.
///
/// `null` values are left out because server-side apply drops them from the result.
pub(crate) fn applied_field_set(config: &Value, lists: &dyn ListTypes) -> Result<FieldSet, String> {
    let mut set = FieldSet::new();
    if let Value::Object(fields) = config {
        collect_object(fields, &mut Vec::new(), &mut Names::default(), lists, &mut set)?;
    }
    Ok(set)
}

fn collect_object(
    fields: &Map<String, Value>,
    path: &mut FieldPath,
    names: &mut Names,
    lists: &dyn ListTypes,
    set: &mut FieldSet,
) -> Result<(), String> {
    for (name, value) in fields {
        path.push(PathElement::Field(name.clone()));
        names.push(name);
        collect_value(value, path, names, lists, set)?;
        names.pop();
        path.pop();
    }
    Ok(())
}

fn collect_value(
    value: &Value,
    path: &mut FieldPath,
    names: &mut Names,
    lists: &dyn ListTypes,
    set: &mut FieldSet,
) -> Result<(), String> {
    match value {
        Value::Null => {}
        Value::Object(fields) if fields.is_empty() || names.map_is_atomic(lists) => set.insert(path.clone()),
        Value::Object(fields) => collect_object(fields, path, names, lists, set)?,
        Value::Array(items) => match names.list_type(lists) {
            ListType::Atomic => set.insert(path.clone()),
            list_type => {
                let elements =
                    item_elements(items, &list_type).map_err(|e| format!("{}: {e}", path_to_string(path)))?;
                for (item, element) in items.iter().zip(elements) {
                    path.push(element);
                    set.insert(path.clone());
                    if let Value::Object(fields) = item {
                        collect_object(fields, path, names, lists, set)?;
                    }
                    path.pop();
                }
            }
        },
        _ => set.insert(path.clone()),
    }
    Ok(())
}

/// What changed between two versions of an object, as structured-merge-diff computes it.
#[derive(Debug, Default)]
pub(crate) struct Comparison {
    /// Leaves and containers present only in the new object.
    pub added: FieldSet,
    /// Leaves and containers present only in the old object.
    pub removed: FieldSet,
    /// Leaves present in both with different values.
    pub modified: FieldSet,
}

impl Comparison {
    /// Fields whose new value differs from the old one: a write to these takes ownership.
    pub(crate) fn changed(&self) -> FieldSet {
        self.added.union(&self.modified)
    }
}

/// Compares two objects. Lists in them that cannot be keyed are compared as atomic.
pub(crate) fn compare(old: &Value, new: &Value, lists: &dyn ListTypes) -> Comparison {
    let mut comparison = Comparison::default();
    compare_node(Some(old), Some(new), &mut Vec::new(), &mut Names::default(), lists, &mut comparison);
    comparison
}

/// How the comparison descends into a value.
enum Shape<'v> {
    Leaf,
    Object(&'v Map<String, Value>),
    List(Vec<(PathElement, &'v Value)>),
}

fn shape<'v>(value: &'v Value, names: &Names, lists: &dyn ListTypes) -> Shape<'v> {
    match value {
        Value::Object(fields) if !names.map_is_atomic(lists) => Shape::Object(fields),
        Value::Array(items) => match names.list_type(lists) {
            ListType::Atomic => Shape::Leaf,
            list_type => match item_elements(items, &list_type) {
                Ok(elements) => Shape::List(elements.into_iter().zip(items.iter()).collect()),
                Err(_) => Shape::Leaf,
            },
        },
        _ => Shape::Leaf,
    }
}

fn is_empty_container(shape: &Option<Shape<'_>>) -> bool {
    match shape {
        None => true,
        Some(Shape::Object(fields)) => fields.is_empty(),
        Some(Shape::List(items)) => items.is_empty(),
        Some(Shape::Leaf) => false,
    }
}

fn compare_node(
    old: Option<&Value>,
    new: Option<&Value>,
    path: &mut FieldPath,
    names: &mut Names,
    lists: &dyn ListTypes,
    out: &mut Comparison,
) {
    let old_shape = old.map(|v| shape(v, names, lists));
    let new_shape = new.map(|v| shape(v, names, lists));
    let both_empty = is_empty_container(&old_shape) && is_empty_container(&new_shape);
    match (old_shape, new_shape) {
        (Some(Shape::Object(o)), Some(Shape::Object(n))) if !both_empty => {
            compare_objects(Some(o), Some(n), path, names, lists, out)
        }
        (Some(Shape::Object(o)), None) if !both_empty => {
            compare_objects(Some(o), None, path, names, lists, out)
        }
        (None, Some(Shape::Object(n))) if !both_empty => {
            compare_objects(None, Some(n), path, names, lists, out)
        }
        (Some(Shape::List(o)), Some(Shape::List(n))) if !both_empty => {
            compare_lists(&o, &n, path, names, lists, out)
        }
        (Some(Shape::List(o)), None) if !both_empty => compare_lists(&o, &[], path, names, lists, out),
        (None, Some(Shape::List(n))) if !both_empty => compare_lists(&[], &n, path, names, lists, out),
        _ => {
            if old != new {
                compare_leaf(old, new, path, out);
            }
            return;
        }
    }
    if !path.is_empty() {
        match (old, new) {
            (None, Some(_)) => out.added.insert(path.clone()),
            (Some(_), None) => out.removed.insert(path.clone()),
            _ => {}
        }
    }
}

fn compare_leaf(old: Option<&Value>, new: Option<&Value>, path: &FieldPath, out: &mut Comparison) {
    if path.is_empty() {
        return;
    }
    match (old, new) {
        (None, Some(_)) => out.added.insert(path.clone()),
        (Some(_), None) => out.removed.insert(path.clone()),
        _ => out.modified.insert(path.clone()),
    }
}

fn compare_objects(
    old: Option<&Map<String, Value>>,
    new: Option<&Map<String, Value>>,
    path: &mut FieldPath,
    names: &mut Names,
    lists: &dyn ListTypes,
    out: &mut Comparison,
) {
    let keys: BTreeSet<&String> = old.iter().chain(new.iter()).flat_map(|m| m.keys()).collect();
    for key in keys {
        path.push(PathElement::Field(key.clone()));
        names.push(key);
        compare_node(old.and_then(|m| m.get(key)), new.and_then(|m| m.get(key)), path, names, lists, out);
        names.pop();
        path.pop();
    }
}

fn compare_lists(
    old: &[(PathElement, &Value)],
    new: &[(PathElement, &Value)],
    path: &mut FieldPath,
    names: &mut Names,
    lists: &dyn ListTypes,
    out: &mut Comparison,
) {
    let old_items: BTreeMap<&PathElement, &Value> = old.iter().map(|(e, v)| (e, *v)).collect();
    let new_items: BTreeMap<&PathElement, &Value> = new.iter().map(|(e, v)| (e, *v)).collect();
    let elements: BTreeSet<&PathElement> = old_items.keys().chain(new_items.keys()).copied().collect();
    for element in elements {
        path.push(element.clone());
        compare_node(
            old_items.get(element).copied(),
            new_items.get(element).copied(),
            path,
            names,
            lists,
            out,
        );
        path.pop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::patch::BuiltinListTypes;
    use serde_json::json;

    fn field(name: &str) -> PathElement {
        PathElement::Field(name.into())
    }

    fn pod_lists() -> BuiltinListTypes {
        BuiltinListTypes::new("", "Pod")
    }

    #[test]
    fn fields_v1_marks_members_with_children_with_a_dot() {
        let mut set = FieldSet::new();
        set.insert(vec![field("data"), field("key")]);
        let container = vec![
            field("spec"),
            field("containers"),
            PathElement::Key(vec![("name".into(), "\"app\"".into())]),
        ];
        set.insert(container.clone());
        set.insert([container.clone(), vec![field("image")]].concat());
        set.insert(vec![field("metadata"), field("finalizers"), PathElement::Value("\"a/b\"".into())]);
        assert_eq!(
            set.to_fields_v1(),
            json!({
                "f:data": {"f:key": {}},
                "f:metadata": {"f:finalizers": {"v:\"a/b\"": {}}},
                "f:spec": {"f:containers": {"k:{\"name\":\"app\"}": {".": {}, "f:image": {}}}}
            })
        );
    }

    #[test]
    fn fields_v1_round_trips() {
        let encoded = json!({
            "f:data": {".": {}, "f:a": {}, "f:b": {}},
            "f:spec": {"f:ports": {"k:{\"containerPort\":80,\"protocol\":\"TCP\"}": {".": {}, "f:name": {}}}},
            "f:list": {"i:0": {}},
        });
        let set = FieldSet::from_fields_v1(&encoded).unwrap();
        assert_eq!(set.len(), 6);
        assert!(set.contains(&[field("data")]));
        assert_eq!(set.to_fields_v1(), encoded);
    }

    #[test]
    fn malformed_fields_v1_is_rejected() {
        assert!(FieldSet::from_fields_v1(&json!({"x:y": {}})).is_err());
        assert!(FieldSet::from_fields_v1(&json!({"f:a": 1})).is_err());
    }

    #[test]
    fn paths_render_like_structured_merge_diff() {
        let path = vec![
            field("spec"),
            field("containers"),
            PathElement::Key(vec![("name".into(), "\"app\"".into())]),
            field("ports"),
            PathElement::Key(vec![
                ("containerPort".into(), "80".into()),
                ("protocol".into(), "\"TCP\"".into()),
            ]),
        ];
        assert_eq!(
            path_to_string(&path),
            r#".spec.containers[name="app"].ports[containerPort=80,protocol="TCP"]"#
        );
        assert_eq!(
            path_to_string(&[field("metadata"), field("finalizers"), PathElement::Value("\"x\"".into())]),
            r#".metadata.finalizers[="x"]"#
        );
    }

    #[test]
    fn applied_field_set_owns_leaves_and_list_items() {
        let config = json!({
            "metadata": {"name": "p", "labels": {"app": "x"}, "finalizers": ["f"]},
            "spec": {"containers": [{"name": "c", "image": "i", "args": ["a"]}], "nodeSelector": {"k": "v"}, "empty": {}},
        });
        let set = applied_field_set(&config, &pod_lists()).unwrap();
        assert_eq!(
            set.to_fields_v1(),
            json!({
                "f:metadata": {"f:name": {}, "f:labels": {"f:app": {}}, "f:finalizers": {"v:\"f\"": {}}},
                "f:spec": {
                    "f:containers": {"k:{\"name\":\"c\"}": {".": {}, "f:name": {}, "f:image": {}, "f:args": {}}},
                    "f:nodeSelector": {},
                    "f:empty": {},
                },
            })
        );
    }

    #[test]
    fn applied_field_set_rejects_duplicate_and_keyless_items() {
        let dup = json!({"spec": {"containers": [{"name": "c"}, {"name": "c"}]}});
        let err = applied_field_set(&dup, &pod_lists()).unwrap_err();
        assert_eq!(err, r#".spec.containers: duplicate entries for key [name="c"]"#);
        let keyless = json!({"spec": {"containers": [{"image": "i"}]}});
        assert!(applied_field_set(&keyless, &pod_lists()).is_err());
    }

    #[test]
    fn compare_reports_added_removed_and_modified_fields() {
        let old = json!({"data": {"a": "1", "b": "2"}, "metadata": {"labels": {"x": "1"}}});
        let new = json!({"data": {"a": "9", "c": "3"}, "spec": {"k": "v"}, "metadata": {}});
        let cmp = compare(&old, &new, &pod_lists());
        let paths = |set: &FieldSet| set.iter().map(|p| path_to_string(p)).collect::<Vec<_>>();
        assert_eq!(paths(&cmp.modified), vec![".data.a"]);
        assert_eq!(paths(&cmp.added), vec![".data.c", ".spec", ".spec.k"]);
        assert_eq!(paths(&cmp.removed), vec![".data.b", ".metadata.labels", ".metadata.labels.x"]);
    }

    #[test]
    fn compare_walks_keyed_list_items() {
        let old = json!({"spec": {"containers": [{"name": "a", "image": "1"}, {"name": "b", "image": "1"}]}});
        let new = json!({"spec": {"containers": [{"name": "b", "image": "2"}, {"name": "c"}]}});
        let cmp = compare(&old, &new, &pod_lists());
        let paths = |set: &FieldSet| set.iter().map(|p| path_to_string(p)).collect::<Vec<_>>();
        assert_eq!(paths(&cmp.modified), vec![r#".spec.containers[name="b"].image"#]);
        assert_eq!(
            paths(&cmp.added),
            vec![r#".spec.containers[name="c"]"#, r#".spec.containers[name="c"].name"#]
        );
        assert_eq!(
            paths(&cmp.removed),
            vec![
                r#".spec.containers[name="a"]"#,
                r#".spec.containers[name="a"].image"#,
                r#".spec.containers[name="a"].name"#
            ]
        );
    }

    #[test]
    fn compare_treats_atomic_lists_and_unkeyable_lists_as_leaves() {
        let old = json!({"spec": {"tolerations": [{"key": "a"}], "containers": [{"image": "x"}]}});
        let new = json!({"spec": {"tolerations": [{"key": "b"}], "containers": [{"image": "y"}]}});
        let cmp = compare(&old, &new, &pod_lists());
        let paths: Vec<String> = cmp.modified.iter().map(|p| path_to_string(p)).collect();
        assert_eq!(paths, vec![".spec.containers", ".spec.tolerations"]);
    }

    #[test]
    fn has_descendant_of_finds_paths_below_a_prefix_only() {
        let mut set = FieldSet::new();
        set.insert(vec![field("data"), field("a")]);
        set.insert(vec![field("datax")]);
        assert!(set.has_descendant_of(&[field("data")]));
        assert!(!set.has_descendant_of(&[field("data"), field("a")]));
        assert!(!set.has_descendant_of(&[field("spec")]));
    }
}
