//! The writes: thin calls to the API server, one per planned action.

use k8s_openapi::api::rbac::v1::RoleBinding;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams, Preconditions};
use kube::{Api, Client, Resource};

use super::desired::{DesiredBinding, Problem, ProblemKind};
use super::diff::Action;

/// A write that failed in a way worth retrying (network, 5xx, 409, a stale cache).
#[derive(Debug, thiserror::Error)]
#[error("{verb} RoleBinding {namespace}/{name}: {source}")]
pub struct WriteError {
    pub verb: &'static str,
    pub namespace: String,
    pub name: String,
    #[source]
    pub source: kube::Error,
}

/// What a pass over a namespace's actions achieved.
#[derive(Debug, Default)]
pub struct Applied {
    /// Successful writes.
    pub writes: usize,
    /// The name and resource version of each binding written, so that the watch event of
    /// kopper's own write does not wake the namespace again.
    pub written: Vec<(String, String)>,
    /// Bindings the API server refused for good (403, 422): retrying cannot help until the
    /// policy or kopper's permissions change, so they are reported rather than retried hot.
    pub refused: Vec<Problem>,
    /// The first retryable failure; the other actions were still attempted.
    pub retry: Option<WriteError>,
}

/// Reads the namespace's RoleBindings fresh from the API server: what a binding someone
/// else made, or one changed a moment ago, holds is found here, never guessed.
pub async fn list_bindings(client: &Client, namespace: &str) -> Result<Vec<RoleBinding>, kube::Error> {
    let api: Api<RoleBinding> = Api::namespaced(client.clone(), namespace);
    Ok(api.list(&ListParams::default()).await?.items)
}

/// Performs every action, so one failure does not hold back the others.
pub async fn execute(client: &Client, field_manager: &str, namespace: &str, actions: Vec<Action>) -> Applied {
    let api: Api<RoleBinding> = Api::namespaced(client.clone(), namespace);
    let mut applied = Applied::default();
    for action in actions {
        let (verb, name, policy) = (action.verb(), action.binding_name().to_owned(), action.policy());
        let result = perform(client, &api, field_manager, action).await;
        match (result, policy) {
            (Ok(version), _) => {
                tracing::info!(namespace, binding = %name, verb, "RoleBinding written");
                applied.writes += 1;
                applied.written.extend(version.map(|version| (name, version)));
            }
            (Err(kube::Error::Api(status)), Some(policy)) if is_refusal(&status) => {
                tracing::warn!(namespace, binding = %name, verb, reason = %status.message, "RoleBinding refused");
                applied.refused.push(Problem {
                    policy,
                    namespace: namespace.to_owned(),
                    name,
                    kind: ProblemKind::Refused,
                    message: status.message.clone(),
                });
            }
            (Err(source), _) => {
                let error = WriteError { verb, namespace: namespace.to_owned(), name, source };
                applied.retry.get_or_insert(error);
            }
        }
    }
    applied
}

/// 403 (kopper may not grant that role, or may not write there) and 422 (the object is
/// invalid) will not change by retrying. Judged by code, whatever reason string the server sent.
fn is_refusal(status: &kube::core::Status) -> bool {
    matches!(status.code, 403 | 422)
}

/// Performs one action; the resource version of the binding written, if one was.
async fn perform(
    client: &Client,
    api: &Api<RoleBinding>,
    field_manager: &str,
    action: Action,
) -> Result<Option<String>, kube::Error> {
    let namespace = api_namespace(api);
    let written = match action {
        Action::Create(desired) => create(client, namespace, field_manager, &desired).await?,
        Action::Update(desired) => apply(client, namespace, field_manager, &desired).await?,
        Action::Replace { desired, uid } => {
            delete(api, &desired.binding.name, uid).await?;
            create(client, namespace, field_manager, &desired).await?
        }
        Action::Delete { name, uid } => return delete(api, &name, uid).await.map(|()| None),
    };
    Ok(written.metadata.resource_version)
}

/// What kopper reads of the object the API server answers a write with: its resource version.
/// The answer is the whole binding, managed fields included; decoding it into this type skips
/// the rest without building it (decoding whole RoleBindings, answers and watch events, took
/// a tenth of kopper's CPU while it bound 10,000 namespaces).
#[derive(serde::Deserialize)]
struct Written {
    #[serde(default)]
    metadata: WrittenMeta,
}

#[derive(Default, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct WrittenMeta {
    resource_version: Option<String>,
}

/// Creates rather than applies a new binding: if someone else created one of that name
/// since the list, the API server answers 409 instead of kopper taking it over.
async fn create(
    client: &Client,
    namespace: &str,
    field_manager: &str,
    desired: &DesiredBinding,
) -> Result<Written, kube::Error> {
    let object = serde_json::to_vec(&desired.to_role_binding(namespace)).map_err(kube::Error::SerdeError)?;
    let params = PostParams { field_manager: Some(field_manager.to_owned()), ..PostParams::default() };
    let mut request = requests(namespace).create(&params, object).map_err(kube::Error::BuildRequest)?;
    request.extensions_mut().insert("create");
    client.request(request).await
}

/// Server-side apply of a binding kopper manages. Forced: kopper is the sole owner of its
/// managed bindings, so whatever a person changed by hand is put back.
async fn apply(
    client: &Client,
    namespace: &str,
    field_manager: &str,
    desired: &DesiredBinding,
) -> Result<Written, kube::Error> {
    let object = desired.to_role_binding(namespace);
    let params = PatchParams::apply(field_manager).force();
    let mut request = requests(namespace)
        .patch(&desired.binding.name, &params, &Patch::Apply(&object))
        .map_err(kube::Error::BuildRequest)?;
    request.extensions_mut().insert("patch");
    client.request(request).await
}

/// The requests of a namespace's RoleBindings, as [`Api`] builds them.
fn requests(namespace: &str) -> kube::core::Request {
    kube::core::Request::new(RoleBinding::url_path(&(), Some(namespace)))
}

/// Deletes exactly the object that was listed; gone already is fine.
async fn delete(api: &Api<RoleBinding>, name: &str, uid: Option<String>) -> Result<(), kube::Error> {
    let params = DeleteParams {
        preconditions: uid.map(|uid| Preconditions { uid: Some(uid), resource_version: None }),
        ..DeleteParams::default()
    };
    match api.delete(name, &params).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.is_not_found() => Ok(()),
        Err(err) => Err(err),
    }
}

fn api_namespace(api: &Api<RoleBinding>) -> &str {
    api.namespace().unwrap_or_default()
}
