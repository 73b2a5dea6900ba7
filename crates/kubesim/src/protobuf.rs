//! Kubernetes' protobuf request bodies, decoded into the JSON kubesim stores.
//!
//! client-go's typed clientsets (and so kubectl's generator commands such as
//! `kubectl create configmap --from-literal`) send `application/vnd.kubernetes.protobuf`.
//! Such a body is the prefix `k8s\0` followed by a `runtime.Unknown` message whose `raw`
//! field holds the object encoded with the messages of k8s.io/api's `generated.proto`.
//!
//! Only the kinds those commands create are described here; the schemas are tables of
//! field numbers and JSON names, so adding a kind is adding a table. Responses stay JSON,
//! which every client that sends protobuf also accepts.

use base64::Engine;
use chrono::{DateTime, SecondsFormat};
use serde_json::{Map, Value};

use crate::error::ApiError;

/// The media type client-go sends protobuf bodies with.
pub const MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf";

/// Every Kubernetes protobuf body starts with these bytes, so it is never mistaken for JSON.
const MAGIC: &[u8] = b"k8s\0";

#[derive(Debug, PartialEq, thiserror::Error)]
pub enum ProtobufError {
    #[error("the body does not start with the Kubernetes protobuf prefix \"k8s\\x00\"")]
    MissingMagic,
    #[error("the body ends in the middle of a field")]
    Truncated,
    #[error("a varint is longer than 64 bits")]
    VarintOverflow,
    #[error("field number 0 is not valid protobuf")]
    FieldZero,
    #[error("wire type {0} is not used by Kubernetes messages")]
    UnsupportedWireType(u8),
    #[error("field {field} has wire type {found}, its schema says {expected}")]
    WrongWireType { field: &'static str, found: u8, expected: u8 },
    #[error("field {0} is not valid UTF-8")]
    InvalidUtf8(&'static str),
    #[error("field {0} holds a timestamp out of range")]
    InvalidTime(&'static str),
    #[error("managedFields fieldsV1 is not JSON: {0}")]
    InvalidFieldsV1(String),
    #[error("the object is wrapped with content encoding {0:?}, which kubesim does not decode")]
    ContentEncoding(String),
    #[error("the object is wrapped as {0:?}, not protobuf")]
    ContentType(String),
    #[error("kubesim does not decode kind {kind:?} of {api_version:?} from protobuf")]
    UnsupportedKind { api_version: String, kind: String },
}

impl From<ProtobufError> for ApiError {
    /// An undescribed kind is answered like any undecodable media type (415, so the client can
    /// tell it should send JSON); a malformed body is a bad request.
    fn from(error: ProtobufError) -> Self {
        match error {
            ProtobufError::UnsupportedKind { .. } => {
                ApiError::unsupported_media_type(MEDIA_TYPE, &["application/json", "application/yaml"])
            }
            other => ApiError::bad_request(format!("the body of the request could not be decoded: {other}")),
        }
    }
}

/// Decodes a protobuf request body into the object's JSON form, as kube-apiserver would
/// serialize the same object.
pub fn decode(body: &[u8]) -> Result<Value, ProtobufError> {
    let envelope = body.strip_prefix(MAGIC).ok_or(ProtobufError::MissingMagic)?;
    let unknown = Unknown::decode(envelope)?;
    if !unknown.content_encoding.is_empty() {
        return Err(ProtobufError::ContentEncoding(unknown.content_encoding));
    }
    if !unknown.content_type.is_empty() && unknown.content_type != MEDIA_TYPE {
        return Err(ProtobufError::ContentType(unknown.content_type));
    }
    let schema =
        schema_for(&unknown.api_version, &unknown.kind).ok_or_else(|| ProtobufError::UnsupportedKind {
            api_version: unknown.api_version.clone(),
            kind: unknown.kind.clone(),
        })?;
    let mut object = Map::new();
    object.insert("apiVersion".into(), Value::String(unknown.api_version));
    object.insert("kind".into(), Value::String(unknown.kind));
    object.extend(message(unknown.raw, schema)?);
    Ok(Value::Object(object))
}

/// The schema of the kinds kubesim decodes, by the envelope's type meta.
fn schema_for(api_version: &str, kind: &str) -> Option<&'static [Field]> {
    let schema = match (api_version, kind) {
        ("v1", "ConfigMap") => CONFIG_MAP,
        ("v1", "Secret") => SECRET,
        ("v1", "Namespace") => NAMESPACE,
        ("v1", "ServiceAccount") => SERVICE_ACCOUNT,
        ("rbac.authorization.k8s.io/v1", "Role") => ROLE,
        ("rbac.authorization.k8s.io/v1", "ClusterRole") => CLUSTER_ROLE,
        ("rbac.authorization.k8s.io/v1", "RoleBinding" | "ClusterRoleBinding") => ROLE_BINDING,
        // kubectl auth can-i and client-go's typed authorization client.
        ("authorization.k8s.io/v1", "SelfSubjectAccessReview") => SELF_SUBJECT_ACCESS_REVIEW,
        ("authorization.k8s.io/v1", "SubjectAccessReview") => SUBJECT_ACCESS_REVIEW,
        ("authorization.k8s.io/v1", "SelfSubjectRulesReview") => SELF_SUBJECT_RULES_REVIEW,
        // kubectl auth whoami: nothing but (empty) metadata.
        ("authentication.k8s.io/v1", "SelfSubjectReview") => SELF_SUBJECT_REVIEW,
        // Sent with the group version of the object being deleted.
        (_, "DeleteOptions") => DELETE_OPTIONS,
        _ => return None,
    };
    Some(schema)
}

/// `runtime.Unknown`: the envelope naming the object's kind around its encoded bytes.
struct Unknown<'a> {
    api_version: String,
    kind: String,
    raw: &'a [u8],
    content_encoding: String,
    content_type: String,
}

impl<'a> Unknown<'a> {
    fn decode(bytes: &'a [u8]) -> Result<Self, ProtobufError> {
        let mut unknown = Unknown {
            api_version: String::new(),
            kind: String::new(),
            raw: &[],
            content_encoding: String::new(),
            content_type: String::new(),
        };
        let mut reader = Reader(bytes);
        while let Some((number, wire)) = reader.key()? {
            match number {
                1 => {
                    let type_meta = message(reader.delimited(wire, "typeMeta")?, TYPE_META)?;
                    let text = |name: &str| type_meta.get(name).and_then(Value::as_str).map(str::to_owned);
                    unknown.api_version = text("apiVersion").unwrap_or_default();
                    unknown.kind = text("kind").unwrap_or_default();
                }
                2 => unknown.raw = reader.delimited(wire, "raw")?,
                3 => unknown.content_encoding = reader.string(wire, "contentEncoding")?,
                4 => unknown.content_type = reader.string(wire, "contentType")?,
                _ => reader.skip(wire)?,
            }
        }
        Ok(unknown)
    }
}

/// One field of a message: its protobuf number, its JSON name, and how it is encoded.
struct Field {
    number: u32,
    name: &'static str,
    kind: Kind,
    shape: Shape,
}

#[derive(Clone, Copy)]
enum Shape {
    One,
    /// `repeated`: each element is its own field occurrence (Kubernetes packs no lists of these kinds).
    List,
    /// `map<string, V>`: each entry is a message with the key as field 1 and the value as field 2.
    Map,
}

#[derive(Clone, Copy)]
enum Kind {
    String,
    /// Bytes, which JSON carries as base64.
    Bytes,
    Bool,
    /// int32 or int64, both varints.
    Int,
    /// `metav1.Time`: seconds and nanos since the epoch, an RFC 3339 string in JSON.
    Time,
    /// `metav1.FieldsV1`: JSON bytes, embedded as JSON.
    FieldsV1,
    Message(&'static [Field]),
}

const fn one(number: u32, name: &'static str, kind: Kind) -> Field {
    Field { number, name, kind, shape: Shape::One }
}

const fn list(number: u32, name: &'static str, kind: Kind) -> Field {
    Field { number, name, kind, shape: Shape::List }
}

const fn map(number: u32, name: &'static str, kind: Kind) -> Field {
    Field { number, name, kind, shape: Shape::Map }
}

use Kind::{Bool, Bytes, FieldsV1, Int, Message, String as Str, Time};

const TYPE_META: &[Field] = &[one(1, "apiVersion", Str), one(2, "kind", Str)];

const OBJECT_META: &[Field] = &[
    one(1, "name", Str),
    one(2, "generateName", Str),
    one(3, "namespace", Str),
    one(4, "selfLink", Str),
    one(5, "uid", Str),
    one(6, "resourceVersion", Str),
    one(7, "generation", Int),
    one(8, "creationTimestamp", Time),
    one(9, "deletionTimestamp", Time),
    one(10, "deletionGracePeriodSeconds", Int),
    map(11, "labels", Str),
    map(12, "annotations", Str),
    list(13, "ownerReferences", Message(OWNER_REFERENCE)),
    list(14, "finalizers", Str),
    list(17, "managedFields", Message(MANAGED_FIELDS_ENTRY)),
];

const OWNER_REFERENCE: &[Field] = &[
    one(5, "apiVersion", Str),
    one(1, "kind", Str),
    one(3, "name", Str),
    one(4, "uid", Str),
    one(6, "controller", Bool),
    one(7, "blockOwnerDeletion", Bool),
];

const MANAGED_FIELDS_ENTRY: &[Field] = &[
    one(1, "manager", Str),
    one(2, "operation", Str),
    one(3, "apiVersion", Str),
    one(4, "time", Time),
    one(6, "fieldsType", Str),
    one(7, "fieldsV1", FieldsV1),
    one(8, "subresource", Str),
];

const CONFIG_MAP: &[Field] = &[
    one(1, "metadata", Message(OBJECT_META)),
    map(2, "data", Str),
    map(3, "binaryData", Bytes),
    one(4, "immutable", Bool),
];

const SECRET: &[Field] = &[
    one(1, "metadata", Message(OBJECT_META)),
    map(2, "data", Bytes),
    one(3, "type", Str),
    map(4, "stringData", Str),
    one(5, "immutable", Bool),
];

const NAMESPACE: &[Field] = &[
    one(1, "metadata", Message(OBJECT_META)),
    one(2, "spec", Message(&[list(1, "finalizers", Str)])),
    one(3, "status", Message(NAMESPACE_STATUS)),
];

const NAMESPACE_STATUS: &[Field] = &[
    one(1, "phase", Str),
    list(
        2,
        "conditions",
        Message(&[
            one(1, "type", Str),
            one(2, "status", Str),
            one(4, "lastTransitionTime", Time),
            one(5, "reason", Str),
            one(6, "message", Str),
        ]),
    ),
];

const SERVICE_ACCOUNT: &[Field] = &[
    one(1, "metadata", Message(OBJECT_META)),
    list(2, "secrets", Message(OBJECT_REFERENCE)),
    list(3, "imagePullSecrets", Message(&[one(1, "name", Str)])),
    one(4, "automountServiceAccountToken", Bool),
];

const OBJECT_REFERENCE: &[Field] = &[
    one(1, "kind", Str),
    one(2, "namespace", Str),
    one(3, "name", Str),
    one(4, "uid", Str),
    one(5, "apiVersion", Str),
    one(6, "resourceVersion", Str),
    one(7, "fieldPath", Str),
];

const POLICY_RULE: &[Field] = &[
    list(1, "verbs", Str),
    list(2, "apiGroups", Str),
    list(3, "resources", Str),
    list(4, "resourceNames", Str),
    list(5, "nonResourceURLs", Str),
];

const ROLE: &[Field] = &[one(1, "metadata", Message(OBJECT_META)), list(2, "rules", Message(POLICY_RULE))];

const CLUSTER_ROLE: &[Field] = &[
    one(1, "metadata", Message(OBJECT_META)),
    list(2, "rules", Message(POLICY_RULE)),
    one(3, "aggregationRule", Message(&[list(1, "clusterRoleSelectors", Message(LABEL_SELECTOR))])),
];

const LABEL_SELECTOR: &[Field] = &[
    map(1, "matchLabels", Str),
    list(
        2,
        "matchExpressions",
        Message(&[one(1, "key", Str), one(2, "operator", Str), list(3, "values", Str)]),
    ),
];

/// `DeleteOptions` as client-go sends it with a DELETE.
const DELETE_OPTIONS: &[Field] = &[
    one(1, "gracePeriodSeconds", Int),
    one(2, "preconditions", Message(&[one(1, "uid", Str), one(2, "resourceVersion", Str)])),
    one(3, "orphanDependents", Bool),
    one(4, "propagationPolicy", Str),
    list(5, "dryRun", Str),
];

/// RoleBinding and ClusterRoleBinding share one encoding.
const ROLE_BINDING: &[Field] = &[
    one(1, "metadata", Message(OBJECT_META)),
    list(
        2,
        "subjects",
        Message(&[
            one(1, "kind", Str),
            one(2, "apiGroup", Str),
            one(3, "name", Str),
            one(4, "namespace", Str),
        ]),
    ),
    one(3, "roleRef", Message(&[one(1, "apiGroup", Str), one(2, "kind", Str), one(3, "name", Str)])),
];

/// `ResourceAttributes` without the field and label selectors, which kubesim's RBAC ignores
/// as kube-apiserver's does.
const RESOURCE_ATTRIBUTES: &[Field] = &[
    one(1, "namespace", Str),
    one(2, "verb", Str),
    one(3, "group", Str),
    one(4, "version", Str),
    one(5, "resource", Str),
    one(6, "subresource", Str),
    one(7, "name", Str),
];

const NON_RESOURCE_ATTRIBUTES: &[Field] = &[one(1, "path", Str), one(2, "verb", Str)];

const SELF_SUBJECT_ACCESS_REVIEW: &[Field] = &[
    one(1, "metadata", Message(OBJECT_META)),
    one(
        2,
        "spec",
        Message(&[
            one(1, "resourceAttributes", Message(RESOURCE_ATTRIBUTES)),
            one(2, "nonResourceAttributes", Message(NON_RESOURCE_ATTRIBUTES)),
        ]),
    ),
];

const SELF_SUBJECT_REVIEW: &[Field] = &[one(1, "metadata", Message(OBJECT_META))];

const SELF_SUBJECT_RULES_REVIEW: &[Field] =
    &[one(1, "metadata", Message(OBJECT_META)), one(2, "spec", Message(&[one(1, "namespace", Str)]))];

/// Without `spec.extra`, which RBAC never consults.
const SUBJECT_ACCESS_REVIEW: &[Field] = &[
    one(1, "metadata", Message(OBJECT_META)),
    one(
        2,
        "spec",
        Message(&[
            one(1, "resourceAttributes", Message(RESOURCE_ATTRIBUTES)),
            one(2, "nonResourceAttributes", Message(NON_RESOURCE_ATTRIBUTES)),
            one(3, "user", Str),
            list(4, "groups", Str),
            one(6, "uid", Str),
        ]),
    ),
];

/// Decodes one message by its schema. Fields the schema does not name are skipped, as
/// protobuf decoders do.
///
/// Go writes every non-pointer field, set or not, and its JSON encoding then omits the empty
/// ones (`omitempty`). So an empty string, a zero number or a zero time in a singular field
/// means "unset" and is left out; booleans (always optional pointers in these kinds), nested
/// messages, and list elements are kept as sent (`apiGroups: [""]` names the core group).
fn message(bytes: &[u8], schema: &[Field]) -> Result<Map<String, Value>, ProtobufError> {
    let mut object = Map::new();
    let mut reader = Reader(bytes);
    while let Some((number, wire)) = reader.key()? {
        let Some(field) = schema.iter().find(|f| f.number == number) else {
            reader.skip(wire)?;
            continue;
        };
        match field.shape {
            Shape::One => {
                let value = value(&mut reader, wire, field.name, field.kind)?;
                if is_unset(&value) {
                    object.remove(field.name);
                } else {
                    object.insert(field.name.into(), value);
                }
            }
            Shape::List => {
                let value = value(&mut reader, wire, field.name, field.kind)?;
                let items = object.entry(field.name).or_insert_with(|| Value::Array(Vec::new()));
                if let Value::Array(items) = items {
                    items.push(value);
                }
            }
            Shape::Map => {
                let (key, value) = map_entry(reader.delimited(wire, field.name)?, field)?;
                let entries = object.entry(field.name).or_insert_with(|| Value::Object(Map::new()));
                if let Value::Object(entries) = entries {
                    entries.insert(key, value);
                }
            }
        }
    }
    Ok(object)
}

fn is_unset(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::String(s) => s.is_empty(),
        Value::Number(n) => n.as_i64() == Some(0),
        _ => false,
    }
}

/// One entry of a `map<string, V>` field; a missing key or value is the empty one.
fn map_entry(bytes: &[u8], field: &Field) -> Result<(String, Value), ProtobufError> {
    let mut key = String::new();
    let mut value = None;
    let mut reader = Reader(bytes);
    while let Some((number, wire)) = reader.key()? {
        match number {
            1 => key = reader.string(wire, field.name)?,
            2 => value = Some(self::value(&mut reader, wire, field.name, field.kind)?),
            _ => reader.skip(wire)?,
        }
    }
    let value = value.unwrap_or_else(|| match field.kind {
        Str | Bytes => Value::String(String::new()),
        _ => Value::Null,
    });
    Ok((key, value))
}

fn value(reader: &mut Reader<'_>, wire: u8, name: &'static str, kind: Kind) -> Result<Value, ProtobufError> {
    Ok(match kind {
        Str => Value::String(reader.string(wire, name)?),
        Bytes => {
            Value::String(base64::engine::general_purpose::STANDARD.encode(reader.delimited(wire, name)?))
        }
        Bool => Value::Bool(reader.varint_field(wire, name)? != 0),
        // int32 and int64 alike are sent as the two's complement of their 64-bit extension.
        Int => Value::from(reader.varint_field(wire, name)? as i64),
        Time => time(reader.delimited(wire, name)?, name)?,
        FieldsV1 => fields_v1(reader.delimited(wire, name)?)?,
        Message(schema) => Value::Object(message(reader.delimited(wire, name)?, schema)?),
    })
}

/// `metav1.Time` as kube-apiserver writes it in JSON: RFC 3339 to the second; the zero time
/// (which Go sends for an unset timestamp) is null.
fn time(bytes: &[u8], name: &'static str) -> Result<Value, ProtobufError> {
    let fields = message(bytes, &[one(1, "seconds", Int), one(2, "nanos", Int)])?;
    let Some(seconds) = fields.get("seconds").and_then(Value::as_i64) else {
        return Ok(Value::Null);
    };
    let time = DateTime::from_timestamp(seconds, 0).ok_or(ProtobufError::InvalidTime(name))?;
    Ok(Value::String(time.to_rfc3339_opts(SecondsFormat::Secs, true)))
}

/// `metav1.FieldsV1`: field 1 holds the managed-fields set as JSON bytes.
fn fields_v1(bytes: &[u8]) -> Result<Value, ProtobufError> {
    let mut reader = Reader(bytes);
    let mut raw: &[u8] = b"{}";
    while let Some((number, wire)) = reader.key()? {
        match number {
            1 => raw = reader.delimited(wire, "fieldsV1")?,
            _ => reader.skip(wire)?,
        }
    }
    serde_json::from_slice(raw).map_err(|e| ProtobufError::InvalidFieldsV1(e.to_string()))
}

const VARINT: u8 = 0;
const FIXED64: u8 = 1;
const DELIMITED: u8 = 2;
const FIXED32: u8 = 5;

/// Reads the protobuf wire format from the front of a byte slice.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    /// The next field's number and wire type, or `None` at the end of the message.
    fn key(&mut self) -> Result<Option<(u32, u8)>, ProtobufError> {
        if self.0.is_empty() {
            return Ok(None);
        }
        let key = self.varint()?;
        let number = u32::try_from(key >> 3).map_err(|_| ProtobufError::VarintOverflow)?;
        if number == 0 {
            return Err(ProtobufError::FieldZero);
        }
        Ok(Some((number, (key & 7) as u8)))
    }

    fn varint(&mut self) -> Result<u64, ProtobufError> {
        let mut value = 0u64;
        for (index, byte) in self.0.iter().enumerate().take(10) {
            let bits = u64::from(byte & 0x7f);
            if index == 9 && bits > 1 {
                return Err(ProtobufError::VarintOverflow);
            }
            value |= bits << (7 * index);
            if byte & 0x80 == 0 {
                self.0 = &self.0[index + 1..];
                return Ok(value);
            }
        }
        Err(if self.0.len() < 10 { ProtobufError::Truncated } else { ProtobufError::VarintOverflow })
    }

    fn take(&mut self, len: usize) -> Result<&'a [u8], ProtobufError> {
        if len > self.0.len() {
            return Err(ProtobufError::Truncated);
        }
        let (taken, rest) = self.0.split_at(len);
        self.0 = rest;
        Ok(taken)
    }

    fn expect(wire: u8, expected: u8, field: &'static str) -> Result<(), ProtobufError> {
        if wire == expected {
            Ok(())
        } else {
            Err(ProtobufError::WrongWireType { field, found: wire, expected })
        }
    }

    fn varint_field(&mut self, wire: u8, field: &'static str) -> Result<u64, ProtobufError> {
        Self::expect(wire, VARINT, field)?;
        self.varint()
    }

    fn delimited(&mut self, wire: u8, field: &'static str) -> Result<&'a [u8], ProtobufError> {
        Self::expect(wire, DELIMITED, field)?;
        let len = usize::try_from(self.varint()?).map_err(|_| ProtobufError::Truncated)?;
        self.take(len)
    }

    fn string(&mut self, wire: u8, field: &'static str) -> Result<String, ProtobufError> {
        let bytes = self.delimited(wire, field)?;
        String::from_utf8(bytes.to_vec()).map_err(|_| ProtobufError::InvalidUtf8(field))
    }

    /// Passes over a field the schema does not describe.
    fn skip(&mut self, wire: u8) -> Result<(), ProtobufError> {
        match wire {
            VARINT => self.varint().map(drop),
            FIXED64 => self.take(8).map(drop),
            DELIMITED => self.delimited(wire, "").map(drop),
            FIXED32 => self.take(4).map(drop),
            other => Err(ProtobufError::UnsupportedWireType(other)),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// Bodies kubectl v1.33 sent for its generator commands, captured on the wire.
    mod kubectl {
        /// `kubectl create configmap x --from-literal=a=b --from-literal=c=d`
        pub const CONFIG_MAP: &[u8] = b"k8s\x00\x0a\x0f\x0a\x02v1\x12\x09ConfigMap\x12#\x0a\x11\x0a\x01x\x12\x00\x1a\x00\"\x00*\x002\x008\x00B\x00\x12\x06\x0a\x01a\x12\x01b\x12\x06\x0a\x01c\x12\x01d\x1a\x00\"\x00";
        /// `kubectl create secret generic s --from-literal=a=b --type=Opaque`
        pub const SECRET: &[u8] = b"k8s\x00\x0a\x0c\x0a\x02v1\x12\x06Secret\x12#\x0a\x11\x0a\x01s\x12\x00\x1a\x00\"\x00*\x002\x008\x00B\x00\x12\x06\x0a\x01a\x12\x01b\x1a\x06Opaque\x1a\x00\"\x00";
        /// `kubectl create namespace ns1`
        pub const NAMESPACE: &[u8] = b"k8s\x00\x0a\x0f\x0a\x02v1\x12\x09Namespace\x12\x1b\x0a\x13\x0a\x03ns1\x12\x00\x1a\x00\"\x00*\x002\x008\x00B\x00\x12\x00\x1a\x02\x0a\x00\x1a\x00\"\x00";
        /// `kubectl create serviceaccount sa1`
        pub const SERVICE_ACCOUNT: &[u8] = b"k8s\x00\x0a\x14\x0a\x02v1\x12\x0eServiceAccount\x12\x15\x0a\x13\x0a\x03sa1\x12\x00\x1a\x00\"\x00*\x002\x008\x00B\x00\x1a\x00\"\x00";
        /// `kubectl create role r1 --verb=get,list --resource=pods,configmaps --resource-name=x`
        pub const ROLE: &[u8] = b"k8s\x00\x0a$\x0a\x1crbac.authorization.k8s.io/v1\x12\x04Role\x128\x0a\x12\x0a\x02r1\x12\x00\x1a\x00\"\x00*\x002\x008\x00B\x00\x12\"\x0a\x03get\x0a\x04list\x12\x00\x1a\x04pods\x1a\x0aconfigmaps\"\x01x\x1a\x00\"\x00";
        /// `kubectl create clusterrole cr1 --verb=get --non-resource-url=/logs`
        pub const CLUSTER_ROLE: &[u8] = b"k8s\x00\x0a+\x0a\x1crbac.authorization.k8s.io/v1\x12\x0bClusterRole\x12#\x0a\x13\x0a\x03cr1\x12\x00\x1a\x00\"\x00*\x002\x008\x00B\x00\x12\x0c\x0a\x03get*\x05/logs\x1a\x00\"\x00";
        /// `kubectl create clusterrole agg --aggregation-rule=foo=bar`
        pub const AGGREGATED_CLUSTER_ROLE: &[u8] = b"k8s\x00\x0a+\x0a\x1crbac.authorization.k8s.io/v1\x12\x0bClusterRole\x12%\x0a\x13\x0a\x03agg\x12\x00\x1a\x00\"\x00*\x002\x008\x00B\x00\x1a\x0e\x0a\x0c\x0a\x0a\x0a\x03foo\x12\x03bar\x1a\x00\"\x00";
        /// `kubectl create rolebinding rb1 --clusterrole=edit --group=g --user=u --serviceaccount=default:sa1`
        pub const ROLE_BINDING: &[u8] = b"k8s\x00\x0a+\x0a\x1crbac.authorization.k8s.io/v1\x12\x0bRoleBinding\x12\xb8\x01\x0a\x13\x0a\x03rb1\x12\x00\x1a\x00\"\x00*\x002\x008\x00B\x00\x12&\x0a\x04User\x12\x19rbac.authorization.k8s.io\x1a\x01u\"\x00\x12'\x0a\x05Group\x12\x19rbac.authorization.k8s.io\x1a\x01g\"\x00\x12 \x0a\x0eServiceAccount\x12\x00\x1a\x03sa1\"\x07default\x1a.\x0a\x19rbac.authorization.k8s.io\x12\x0bClusterRole\x1a\x04edit\x1a\x00\"\x00";
        /// `kubectl create clusterrolebinding crb1 --clusterrole=edit --group=g`
        pub const CLUSTER_ROLE_BINDING: &[u8] = b"k8s\x00\x0a2\x0a\x1crbac.authorization.k8s.io/v1\x12\x12ClusterRoleBinding\x12o\x0a\x14\x0a\x04crb1\x12\x00\x1a\x00\"\x00*\x002\x008\x00B\x00\x12'\x0a\x05Group\x12\x19rbac.authorization.k8s.io\x1a\x01g\"\x00\x1a.\x0a\x19rbac.authorization.k8s.io\x12\x0bClusterRole\x1a\x04edit\x1a\x00\"\x00";
        /// `kubectl auth can-i update deployments.apps/web -n team --subresource=scale`
        pub const SELF_SUBJECT_ACCESS_REVIEW: &[u8] = b"k8s\x00\x0a2\x0a\x17authorization.k8s.io/v1\x12\x17SelfSubjectAccessReview\x12O\x0a\x10\x0a\x00\x12\x00\x1a\x00\"\x00*\x002\x008\x00B\x00\x121\x0a/\x0a\x04team\x12\x06update\x1a\x04apps\"\x00*\x0bdeployments2\x05scale:\x03web\x1a\x08\x08\x00\x12\x00\x1a\x00 \x00\x1a\x00\"\x00";
    }

    const RBAC: &str = "rbac.authorization.k8s.io/v1";

    fn encode_varint(mut value: u64) -> Vec<u8> {
        let mut out = Vec::new();
        while value >= 0x80 {
            out.push((value as u8) | 0x80);
            value >>= 7;
        }
        out.push(value as u8);
        out
    }

    fn varint_field(number: u32, value: u64) -> Vec<u8> {
        let mut out = encode_varint(u64::from(number) << 3);
        out.extend(encode_varint(value));
        out
    }

    fn delimited_field(number: u32, payload: &[u8]) -> Vec<u8> {
        let mut out = encode_varint(u64::from(number) << 3 | u64::from(DELIMITED));
        out.extend(encode_varint(payload.len() as u64));
        out.extend_from_slice(payload);
        out
    }

    fn entry(number: u32, key: &str, value: &[u8]) -> Vec<u8> {
        delimited_field(number, &[delimited_field(1, key.as_bytes()), delimited_field(2, value)].concat())
    }

    fn envelope(api_version: &str, kind: &str, raw: &[u8]) -> Vec<u8> {
        let type_meta =
            [delimited_field(1, api_version.as_bytes()), delimited_field(2, kind.as_bytes())].concat();
        [MAGIC, &delimited_field(1, &type_meta), &delimited_field(2, raw)].concat()
    }

    fn named(name: &str) -> Vec<u8> {
        delimited_field(1, &delimited_field(1, name.as_bytes()))
    }

    #[test]
    fn delete_options_from_client_go_decode_with_preconditions_and_policy() {
        let preconditions = [delimited_field(1, b"uid-1"), delimited_field(2, b"42")].concat();
        let raw = [
            varint_field(1, 0),
            delimited_field(2, &preconditions),
            delimited_field(4, b"Background"),
            delimited_field(5, b"All"),
        ]
        .concat();
        assert_eq!(
            decode(&envelope("v1", "DeleteOptions", &raw)).unwrap(),
            json!({"apiVersion": "v1", "kind": "DeleteOptions",
                   "preconditions": {"uid": "uid-1", "resourceVersion": "42"},
                   "propagationPolicy": "Background", "dryRun": ["All"]})
        );
    }

    #[test]
    fn configmap_from_literals_decodes_to_its_json_without_unset_metadata() {
        assert_eq!(
            decode(kubectl::CONFIG_MAP).unwrap(),
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}, "data": {"a": "b", "c": "d"}})
        );
    }

    #[test]
    fn secret_data_comes_out_as_base64_of_the_literal() {
        assert_eq!(
            decode(kubectl::SECRET).unwrap(),
            json!({
                "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"},
                "data": {"a": "Yg=="}, "type": "Opaque",
            })
        );
    }

    #[test]
    fn namespace_keeps_its_empty_spec_and_status() {
        assert_eq!(
            decode(kubectl::NAMESPACE).unwrap(),
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ns1"}, "spec": {}, "status": {}})
        );
    }

    #[test]
    fn service_account_decodes_to_metadata_only() {
        assert_eq!(
            decode(kubectl::SERVICE_ACCOUNT).unwrap(),
            json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "sa1"}})
        );
    }

    #[test]
    fn can_i_review_decodes_every_resource_attribute_and_drops_the_unset_status() {
        assert_eq!(
            decode(kubectl::SELF_SUBJECT_ACCESS_REVIEW).unwrap(),
            json!({
                "apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview", "metadata": {},
                "spec": {"resourceAttributes": {
                    "namespace": "team", "verb": "update", "group": "apps", "resource": "deployments",
                    "subresource": "scale", "name": "web",
                }},
            })
        );
    }

    #[test]
    fn subject_access_review_decodes_the_user_and_groups() {
        let non_resource = [delimited_field(1, b"/healthz"), delimited_field(2, b"get")].concat();
        let spec = [
            delimited_field(2, &non_resource),
            delimited_field(3, b"bob"),
            delimited_field(4, b"devs"),
            delimited_field(4, b"ops"),
        ]
        .concat();
        let raw = delimited_field(2, &spec);
        assert_eq!(
            decode(&envelope("authorization.k8s.io/v1", "SubjectAccessReview", &raw)).unwrap(),
            json!({
                "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
                "spec": {"nonResourceAttributes": {"path": "/healthz", "verb": "get"},
                         "user": "bob", "groups": ["devs", "ops"]},
            })
        );
    }

    #[test]
    fn role_rules_keep_the_empty_core_api_group() {
        assert_eq!(
            decode(kubectl::ROLE).unwrap(),
            json!({
                "apiVersion": RBAC, "kind": "Role", "metadata": {"name": "r1"},
                "rules": [{
                    "verbs": ["get", "list"], "apiGroups": [""],
                    "resources": ["pods", "configmaps"], "resourceNames": ["x"],
                }],
            })
        );
    }

    #[test]
    fn cluster_role_decodes_non_resource_urls_and_aggregation_rules() {
        assert_eq!(
            decode(kubectl::CLUSTER_ROLE).unwrap()["rules"],
            json!([{"verbs": ["get"], "nonResourceURLs": ["/logs"]}])
        );
        assert_eq!(
            decode(kubectl::AGGREGATED_CLUSTER_ROLE).unwrap(),
            json!({
                "apiVersion": RBAC, "kind": "ClusterRole", "metadata": {"name": "agg"},
                "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {"foo": "bar"}}]},
            })
        );
    }

    #[test]
    fn role_binding_decodes_every_subject_kind_and_the_role_ref() {
        assert_eq!(
            decode(kubectl::ROLE_BINDING).unwrap(),
            json!({
                "apiVersion": RBAC, "kind": "RoleBinding", "metadata": {"name": "rb1"},
                "subjects": [
                    {"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": "u"},
                    {"kind": "Group", "apiGroup": "rbac.authorization.k8s.io", "name": "g"},
                    {"kind": "ServiceAccount", "name": "sa1", "namespace": "default"},
                ],
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
            })
        );
    }

    #[test]
    fn cluster_role_binding_decodes_like_a_role_binding() {
        let decoded = decode(kubectl::CLUSTER_ROLE_BINDING).unwrap();
        assert_eq!(decoded["kind"], "ClusterRoleBinding");
        assert_eq!(decoded["metadata"], json!({"name": "crb1"}));
        assert_eq!(decoded["subjects"][0]["name"], "g");
        assert_eq!(decoded["roleRef"]["name"], "edit");
    }

    #[test]
    fn object_meta_decodes_maps_owners_times_and_managed_fields() {
        let owner = [
            delimited_field(5, b"apps/v1"),
            delimited_field(1, b"Deployment"),
            delimited_field(3, b"web"),
            delimited_field(4, b"u-1"),
            varint_field(6, 1),
            varint_field(7, 0),
        ]
        .concat();
        let managed = [
            delimited_field(1, b"kopper"),
            delimited_field(2, b"Apply"),
            delimited_field(4, &varint_field(1, 1_767_225_600)),
            delimited_field(6, b"FieldsV1"),
            delimited_field(7, &delimited_field(1, br#"{"f:data":{}}"#)),
        ]
        .concat();
        let meta = [
            delimited_field(1, b"settings"),
            delimited_field(3, b"team-a"),
            varint_field(7, 300),
            delimited_field(8, &varint_field(1, 1_767_225_600)),
            entry(11, "tier", b"db"),
            entry(11, "empty", b""),
            entry(12, "note", b"x"),
            delimited_field(13, &owner),
            delimited_field(14, b"example.com/hold"),
            delimited_field(17, &managed),
        ]
        .concat();
        let decoded = decode(&envelope("v1", "ConfigMap", &delimited_field(1, &meta))).unwrap();
        assert_eq!(
            decoded["metadata"],
            json!({
                "name": "settings", "namespace": "team-a", "generation": 300,
                "creationTimestamp": "2026-01-01T00:00:00Z",
                "labels": {"tier": "db", "empty": ""}, "annotations": {"note": "x"},
                "ownerReferences": [{
                    "apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "uid": "u-1",
                    "controller": true, "blockOwnerDeletion": false,
                }],
                "finalizers": ["example.com/hold"],
                "managedFields": [{
                    "manager": "kopper", "operation": "Apply", "time": "2026-01-01T00:00:00Z",
                    "fieldsType": "FieldsV1", "fieldsV1": {"f:data": {}},
                }],
            })
        );
    }

    #[test]
    fn binary_data_is_base64_and_an_explicit_false_is_kept() {
        let raw = [named("bin"), entry(3, "blob", &[0, 0xff, 0x10]), varint_field(4, 0)].concat();
        let decoded = decode(&envelope("v1", "ConfigMap", &raw)).unwrap();
        assert_eq!(decoded["binaryData"], json!({"blob": "AP8Q"}));
        assert_eq!(decoded["immutable"], json!(false));
    }

    #[test]
    fn secret_string_data_and_image_pull_secrets_decode() {
        let secret = [named("s"), entry(4, "token", b"plain"), varint_field(5, 1)].concat();
        let decoded = decode(&envelope("v1", "Secret", &secret)).unwrap();
        assert_eq!(decoded["stringData"], json!({"token": "plain"}));
        assert_eq!(decoded["immutable"], json!(true));

        let account =
            [named("sa"), delimited_field(3, &delimited_field(1, b"registry")), varint_field(4, 0)].concat();
        let decoded = decode(&envelope("v1", "ServiceAccount", &account)).unwrap();
        assert_eq!(decoded["imagePullSecrets"], json!([{"name": "registry"}]));
        assert_eq!(decoded["automountServiceAccountToken"], json!(false));
    }

    #[test]
    fn map_entry_without_a_value_has_the_empty_value() {
        let raw = [named("x"), delimited_field(2, &delimited_field(1, b"k"))].concat();
        assert_eq!(decode(&envelope("v1", "ConfigMap", &raw)).unwrap()["data"], json!({"k": ""}));
    }

    #[test]
    fn long_values_use_multi_byte_lengths() {
        let long = "v".repeat(300);
        let raw = [named("x"), entry(2, "k", long.as_bytes())].concat();
        assert_eq!(decode(&envelope("v1", "ConfigMap", &raw)).unwrap()["data"]["k"], long.as_str());
    }

    #[test]
    fn fields_the_schema_does_not_name_are_skipped_whatever_their_wire_type() {
        let unknown = [
            varint_field(90, 7),
            [encode_varint(91 << 3 | u64::from(FIXED64)), vec![1; 8]].concat(),
            delimited_field(92, b"future"),
            [encode_varint(93 << 3 | u64::from(FIXED32)), vec![1; 4]].concat(),
        ]
        .concat();
        let raw = [unknown.clone(), named("x"), unknown.clone(), entry(2, "a", b"b")].concat();
        let body = [envelope("v1", "ConfigMap", &raw), unknown].concat();
        assert_eq!(
            decode(&body).unwrap(),
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}, "data": {"a": "b"}})
        );
    }

    #[test]
    fn a_later_occurrence_of_a_field_replaces_an_earlier_one() {
        let raw = [named("x"), delimited_field(3, b"Opaque"), delimited_field(3, b"")].concat();
        let decoded = decode(&envelope("v1", "Secret", &raw)).unwrap();
        assert_eq!(decoded, json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "x"}}));
    }

    #[test]
    fn a_body_without_the_prefix_is_rejected() {
        assert_eq!(decode(br#"{"kind":"ConfigMap"}"#), Err(ProtobufError::MissingMagic));
        assert_eq!(decode(&kubectl::CONFIG_MAP[1..]), Err(ProtobufError::MissingMagic));
    }

    #[test]
    fn a_cut_off_body_is_truncated_not_a_panic() {
        let body = kubectl::ROLE_BINDING;
        assert_eq!(decode(&body[..body.len() - 1]), Err(ProtobufError::Truncated));
        for end in MAGIC.len()..body.len() {
            // A cut at a field boundary of the envelope can still be a valid (emptier) message.
            let _ = decode(&body[..end]);
        }
        let nested_cut = envelope("v1", "ConfigMap", &delimited_field(1, b"\x0a\x05ab"));
        assert_eq!(decode(&nested_cut), Err(ProtobufError::Truncated));
    }

    #[test]
    fn malformed_wire_data_is_an_error() {
        let name_as_number = delimited_field(1, &varint_field(1, 5));
        assert_eq!(
            decode(&envelope("v1", "ConfigMap", &name_as_number)),
            Err(ProtobufError::WrongWireType { field: "name", found: VARINT, expected: DELIMITED })
        );
        let bad_utf8 = delimited_field(1, &delimited_field(1, &[0xff, 0xfe]));
        assert_eq!(decode(&envelope("v1", "ConfigMap", &bad_utf8)), Err(ProtobufError::InvalidUtf8("name")));
        let overlong = [MAGIC, &[0x28], &[0xff; 10], &[0x01]].concat();
        assert_eq!(decode(&overlong), Err(ProtobufError::VarintOverflow));
        let group = [MAGIC, &[0x2b][..]].concat();
        assert_eq!(decode(&group), Err(ProtobufError::UnsupportedWireType(3)));
        assert_eq!(decode(&[MAGIC, &[0x02, 0x00][..]].concat()), Err(ProtobufError::FieldZero));
        let bad_fields =
            delimited_field(1, &delimited_field(17, &delimited_field(7, &delimited_field(1, b"{"))));
        assert!(matches!(
            decode(&envelope("v1", "ConfigMap", &bad_fields)),
            Err(ProtobufError::InvalidFieldsV1(_))
        ));
    }

    #[test]
    fn wrapped_encodings_other_than_plain_protobuf_are_rejected() {
        let gzipped = [envelope("v1", "ConfigMap", &named("x")), delimited_field(3, b"gzip")].concat();
        assert_eq!(decode(&gzipped), Err(ProtobufError::ContentEncoding("gzip".into())));
        let json = [envelope("v1", "ConfigMap", b"{}"), delimited_field(4, b"application/json")].concat();
        assert_eq!(decode(&json), Err(ProtobufError::ContentType("application/json".into())));
        let explicit =
            [envelope("v1", "ConfigMap", &named("x")), delimited_field(4, MEDIA_TYPE.as_bytes())].concat();
        assert_eq!(decode(&explicit).unwrap()["metadata"]["name"], "x");
    }

    #[test]
    fn kinds_without_a_schema_are_unsupported_media_not_bad_requests() {
        let pod = envelope("v1", "Pod", &named("p"));
        let error = decode(&pod).unwrap_err();
        assert_eq!(error, ProtobufError::UnsupportedKind { api_version: "v1".into(), kind: "Pod".into() });
        assert_eq!(ApiError::from(error).code, 415);
        // The right kind name in another group is not the same kind.
        assert!(decode(&envelope("example.com/v1", "ConfigMap", &named("x"))).is_err());
        assert_eq!(ApiError::from(ProtobufError::Truncated).code, 400);
    }
}
