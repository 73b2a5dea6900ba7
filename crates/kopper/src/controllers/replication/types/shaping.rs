//! What a copy carries of its source, and what becomes of copies when their rule goes:
//! fields every replication kind has ([`CopyShaping`]). Doc comments here are user
//! documentation: they become the CRDs' descriptions and what `kubectl explain` prints.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// How a rule shapes its copies and what becomes of them when it goes: the fields every
/// replication kind carries in its spec (flattened into it, so users write them there).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CopyShaping {
    /// Only these keys of each source are copied (`data` and `binaryData` of a ConfigMap,
    /// `data` of a Secret); empty: every key. A listed key a source lacks is reported in the
    /// Ready condition (reason `SourceKeysMissing`) and the copy holds the others; a source
    /// holding none of them is not copied (its copies are left as they are). Only data is
    /// filtered: labels and annotations follow `copyLabels` and `copyAnnotations`, and an
    /// annotation that embeds the whole object (kapp's `kapp.k14s.io/original`, kept only
    /// with `keepToolMarks: [Kapp]`) would carry every key. At most 256 keys.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 256), inner(length(min = 1, max = 253), pattern(r"^[-._a-zA-Z0-9]+$")))]
    pub keys: Vec<String>,

    /// Which labels of the source the copies carry, and labels added to every copy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub copy_labels: Option<CopiedLabels>,

    /// Which annotations of the source the copies carry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub copy_annotations: Option<CopiedMetadata>,

    /// Tools whose ownership and tracking marks the copies keep. By default copies carry
    /// none of them: `meta.helm.sh/*` and `app.kubernetes.io/managed-by: Helm` (Helm),
    /// `argocd.argoproj.io/*` and `app.kubernetes.io/instance` (ArgoCD),
    /// `kustomize.toolkit.fluxcd.io/*` and `helm.toolkit.fluxcd.io/*` (Flux),
    /// `kapp.k14s.io/*` (Kapp): each tool would take the copies for objects it manages.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 4))]
    pub keep_tool_marks: Vec<ToolMarks>,

    /// What becomes of the copies when this object is deleted: `Delete` (the default) or
    /// `Orphan`: they stay, no longer updated, labelled `kopper.dev/orphaned: "true"`, for a
    /// rule copying the same source into the same place to take over (with one metadata patch
    /// if the source did not change meanwhile; rewritten otherwise, deleted and created again
    /// if immutable or of another Secret type). Nothing deletes a ReplicationRule's orphans
    /// automatically (`kubectl get cm,secret -A -l kopper.dev/orphaned=true` lists them); a
    /// ConfigMapSync's or SecretSync's go when their namespace no longer accepts copies from
    /// its namespace.
    #[serde(default, skip_serializing_if = "DeletionPolicy::is_default")]
    pub deletion_policy: DeletionPolicy,
}

/// Which labels (or annotations) of the source its copies carry. Keys are matched by prefix
/// (`example.com/` matches `example.com/team`; a whole key matches itself). kopper's own
/// marks (`kopper.dev/*`, `app.kubernetes.io/managed-by`) are set by kopper whatever these
/// say.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CopiedMetadata {
    /// Only keys that start with one of these prefixes are copied; empty: every key. At most
    /// 32 prefixes of at most 317 characters.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32), inner(length(min = 1, max = 317)))]
    pub include: Vec<String>,

    /// Keys that start with one of these prefixes are not copied, even if `include` matches
    /// them. At most 32 prefixes of at most 317 characters.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32), inner(length(min = 1, max = 317)))]
    pub exclude: Vec<String>,
}

/// Which labels of the source its copies carry, and labels added to every copy.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CopiedLabels {
    /// Which label keys are copied.
    #[serde(flatten)]
    pub copied: CopiedMetadata,

    /// Labels every copy carries besides those copied (they win over a source label of the
    /// same key): at most 32, keys and values as Kubernetes accepts them (a key it would
    /// refuse makes the rule Ready=False, reason `InvalidShape`). kopper's own labels
    /// (`kopper.dev/*`, `app.kubernetes.io/managed-by`) cannot be set here.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend(
        "maxProperties" = 32,
        "additionalProperties" = {
            "type": "string",
            "maxLength": 63,
            "pattern": r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$"
        },
        "x-kubernetes-validations" = [
            {
                "rule": "self.all(key, size(key) <= 317)",
                "message": "label keys must have at most 317 characters"
            },
            {
                "rule": "self.all(key, !key.startsWith('kopper.dev/') && !(key.startsWith('app.kubernetes.io/') && key.endsWith('/managed-by')))",
                "message": "kopper.dev/* and app.kubernetes.io/managed-by are kopper's own labels and cannot be added"
            }
        ]
    ))]
    pub add: BTreeMap<String, String>,
}

/// A tool whose ownership and tracking marks copies leave out unless `keepToolMarks` names
/// it.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, JsonSchema)]
pub enum ToolMarks {
    /// `meta.helm.sh/*` and `app.kubernetes.io/managed-by: Helm`: Helm's record that it owns
    /// the object; on a copy, in a namespace Helm never installed into, it would mislead Helm
    /// and anyone reading it.
    Helm,
    /// `argocd.argoproj.io/*` (with the `argocd.argoproj.io/tracking-id` annotation, Argo CD's
    /// default tracking since 3.0) and `app.kubernetes.io/instance` (its tracking label before
    /// 3.0, and with label tracking): Argo CD would count the copies as part of the application and prune them,
    /// and kopper would make them again, for ever.
    ArgoCD,
    /// `kustomize.toolkit.fluxcd.io/*` and `helm.toolkit.fluxcd.io/*`: Flux's ownership
    /// labels; Flux would garbage-collect copies it never applied.
    Flux,
    /// `kapp.k14s.io/*`: kapp's app and ownership labels; kapp would count the copies as
    /// its own.
    Kapp,
}

/// What becomes of a rule's copies when the rule is deleted.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum DeletionPolicy {
    /// The copies are deleted.
    #[default]
    Delete,
    /// The copies stay as they are, are no longer updated, and carry the label
    /// `kopper.dev/orphaned: "true"` instead of the rule's. A rule that copies the same source
    /// object into the same place takes such a copy over: with one metadata patch when it
    /// holds what the rule would write, otherwise by rewriting it (deleting and creating it
    /// when it cannot change in place). An admin's ReplicationRule also rewrites what a
    /// tenant's ConfigMapSync or SecretSync left; those orphans go once their namespace no
    /// longer accepts copies from the tenant's namespace. Nothing else deletes an orphan: list them with
    /// `kubectl get cm,secret -A -l kopper.dev/orphaned=true` and delete them once not needed
    /// (an orphaned Secret keeps its data until then).
    Orphan,
}

impl DeletionPolicy {
    /// Whether `policy` is the default, for `skip_serializing_if`.
    pub fn is_default(policy: &Self) -> bool {
        *policy == Self::default()
    }
}
