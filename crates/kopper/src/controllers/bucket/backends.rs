//! The provider of each class's backend: kopper's flags' provider for a class without a
//! backend (and for the built-in class), and one built on first use for each class that has
//! one, kept by class name. A class's entry is rebuilt when its backend or the content of its
//! credentials Secret changes (told by a fingerprint that holds no secret), and dropped when
//! the class goes, so the cache holds at most one provider per BucketClass, an admin object.
//!
//! A class's credentials Secret is read from kopper's own namespace only, never from a
//! tenant's: the class names a Secret, not a namespace. Its values reach no log, status or
//! Event (see [`super::aws::StaticCredentials`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::Secret;
use kube::Api;

use super::Error;
use super::aws::{AwsProvider, AwsSettings, StaticCredentials};
use super::class::backend_identity;
use super::fenced::Fenced;
use super::names::digest_hex;
use super::provider::Provider;
use super::secret::{ACCESS_KEY_ID, SECRET_ACCESS_KEY};
use super::types::Backend;
use crate::runtime::fence::WriteFence;

/// The providers of kopper's backends.
pub struct Backends {
    /// The provider of kopper's flags; `None` without `--s3-region`.
    default: Option<Arc<dyn Provider>>,
    /// The endpoint of kopper's flags (`None`: AWS).
    default_endpoint: Option<String>,
    /// The region of kopper's flags (empty without a provider).
    default_region: String,
    /// kopper's own namespace, where class credentials Secrets are read.
    namespace: Option<String>,
    fence: Arc<WriteFence>,
    /// `--s3-delete-batch`, for every backend.
    delete_batch: Option<u16>,
    built: Mutex<HashMap<String, Built>>,
}

struct Built {
    fingerprint: String,
    provider: Arc<dyn Provider>,
}

impl std::fmt::Debug for Backends {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let classes: Vec<String> =
            self.built.lock().map(|built| built.keys().cloned().collect()).unwrap_or_default();
        f.debug_struct("Backends").field("namespace", &self.namespace).field("classes", &classes).finish()
    }
}

impl Backends {
    pub fn new(
        default: Option<Arc<dyn Provider>>,
        (default_endpoint, default_region): (Option<String>, String),
        namespace: Option<String>,
        fence: Arc<WriteFence>,
        delete_batch: Option<u16>,
    ) -> Self {
        Self {
            default,
            default_endpoint,
            default_region,
            namespace,
            fence,
            delete_batch,
            built: Mutex::default(),
        }
    }

    /// The provider of kopper's flags.
    pub fn default_provider(&self) -> Option<Arc<dyn Provider>> {
        self.default.clone()
    }

    /// The identity recorded with a bucket made on `backend` (`None`: kopper's flags).
    pub fn identity(&self, backend: Option<&Backend>) -> String {
        backend_identity(backend, (self.default_endpoint.as_deref(), &self.default_region))
    }

    /// The provider of the class `class` whose backend is `backend` (`None`: kopper's flags).
    pub async fn provider(
        &self,
        client: &kube::Client,
        class: &str,
        backend: Option<&Backend>,
    ) -> Result<Arc<dyn Provider>, Error> {
        let Some(backend) = backend else {
            return self.default.clone().ok_or_else(|| not_configured(Some(class)));
        };
        let credentials = match &backend.credentials_secret {
            Some(name) => Some(self.credentials(client, class, name).await?),
            None => None,
        };
        let fingerprint = fingerprint(backend, credentials.as_ref());
        if let Some(built) = self.built.lock().ok().and_then(|built| {
            built.get(class).filter(|b| b.fingerprint == fingerprint).map(|b| b.provider.clone())
        }) {
            return Ok(built);
        }
        let settings = AwsSettings {
            region: backend.region.clone(),
            endpoint: backend.endpoint.clone(),
            iam_endpoint: backend.iam_endpoint.clone(),
            force_path_style: backend.force_path_style,
            credentials,
            delete_batch: self.delete_batch,
        };
        let inner = AwsProvider::new(settings).await;
        let provider: Arc<dyn Provider> = Arc::new(Fenced { inner, fence: self.fence.clone() });
        if let Ok(mut built) = self.built.lock() {
            built.insert(class.to_owned(), Built { fingerprint, provider: provider.clone() });
        }
        tracing::info!(class, "built the provider of the BucketClass's backend");
        Ok(provider)
    }

    /// Drops the provider of a class that is gone.
    pub fn forget(&self, class: &str) {
        if let Ok(mut built) = self.built.lock() {
            built.remove(class);
        }
    }

    /// Drops the providers of every class not in `classes` (those deleted without ever
    /// being used, whose last reconcile never came).
    pub fn keep_only(&self, classes: &[String]) {
        if let Ok(mut built) = self.built.lock() {
            built.retain(|class, _| classes.contains(class));
        }
    }

    /// How many class providers are built (for tests of the bound).
    pub fn built(&self) -> usize {
        self.built.lock().map(|built| built.len()).unwrap_or_default()
    }

    /// kopper's credentials for the class's backend, from the Secret `name` in kopper's own
    /// namespace. A Secret that is missing or incomplete is `ClassNotReady`, looked at again
    /// every [`CREDENTIALS_RETRY`]: nothing watches kopper's namespace for it to appear.
    pub async fn credentials(
        &self,
        client: &kube::Client,
        class: &str,
        name: &str,
    ) -> Result<StaticCredentials, Error> {
        let Some(namespace) = &self.namespace else {
            return Err(not_ready(format!(
                "BucketClass {class} names the credentials Secret {name}, which kopper reads from its own \
                     namespace, and kopper does not know it: a cluster admin must set --namespace (or run kopper \
                     in a pod, which sets POD_NAMESPACE)"
            )));
        };
        let api = Api::<Secret>::namespaced(client.clone(), namespace);
        let secret = api
            .get_opt(name)
            .await
            .map_err(Error::kube(format!("reading the credentials Secret {namespace}/{name}")))?;
        let Some(secret) = secret else {
            return Err(not_ready(format!(
                "BucketClass {class} names the credentials Secret {name}, which does not exist in kopper's \
                     namespace {namespace}: a cluster admin must create it there (with AWS_ACCESS_KEY_ID and \
                     AWS_SECRET_ACCESS_KEY) or fix spec.backend.credentialsSecret"
            )));
        };
        read_credentials(&secret).map_err(|missing| {
            not_ready(
                format!(
                    "the credentials Secret {namespace}/{name} of BucketClass {class} has no {missing}: a cluster \
                     admin must add it"
                ),
            )
        })
    }
}

/// How often a Bucket whose class's credentials are not usable is looked at again.
pub const CREDENTIALS_RETRY: std::time::Duration = std::time::Duration::from_secs(30);

fn not_ready(message: String) -> Error {
    Error::Wait { reason: "ClassNotReady", message, retry_after: CREDENTIALS_RETRY }
}

/// The key pair in a credentials Secret; the name of a missing key otherwise.
pub fn read_credentials(secret: &Secret) -> Result<StaticCredentials, &'static str> {
    let data = secret.data.clone().unwrap_or_default();
    let value = |key: &str| data.get(key).map(|value| String::from_utf8_lossy(&value.0).trim().to_owned());
    let required = |key: &'static str| value(key).filter(|v| !v.is_empty()).ok_or(key);
    Ok(StaticCredentials {
        access_key_id: required(ACCESS_KEY_ID)?,
        secret_access_key: required(SECRET_ACCESS_KEY)?,
        session_token: value("AWS_SESSION_TOKEN").filter(|v| !v.is_empty()),
    })
}

/// What tells a built provider from the one a class needs now: the backend and a digest of
/// the credentials, so the secret itself is never kept beside the provider.
fn fingerprint(backend: &Backend, credentials: Option<&StaticCredentials>) -> String {
    let secret = credentials.map(|c| {
        digest_hex(&format!(
            "{}\n{}\n{}",
            c.access_key_id,
            c.secret_access_key,
            c.session_token.as_deref().unwrap_or("")
        ))
    });
    digest_hex(&format!("{backend:?}\n{secret:?}"))
}

fn not_configured(class: Option<&str>) -> Error {
    let with = match class {
        Some(class) => {
            format!("BucketClass {class} has no spec.backend, so it uses kopper's own flags, and ")
        }
        None => String::new(),
    };
    Error::blocked(
        "ProviderNotConfigured",
        format!(
            "{with}kopper runs without an S3 provider: a cluster admin must set --s3-region (KOPPER_S3_REGION) and, \
             for an S3-compatible service, --s3-endpoint, or give the class a spec.backend"
        ),
    )
}

/// The refusal of a Bucket on the built-in class when kopper has no provider.
pub fn built_in_not_configured() -> Error {
    not_configured(None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn backend() -> Backend {
        Backend {
            region: "us-east-1".into(),
            endpoint: Some("http://minio:9000".into()),
            iam_endpoint: None,
            force_path_style: true,
            credentials_secret: Some("minio".into()),
        }
    }

    fn credentials(secret: &str) -> StaticCredentials {
        StaticCredentials {
            access_key_id: "id".into(),
            secret_access_key: secret.into(),
            session_token: None,
        }
    }

    #[test]
    fn a_new_secret_or_backend_is_a_new_fingerprint_and_the_secret_is_not_in_it() {
        let first = fingerprint(&backend(), Some(&credentials("s1")));
        assert_eq!(first, fingerprint(&backend(), Some(&credentials("s1"))));
        assert_ne!(first, fingerprint(&backend(), Some(&credentials("s2"))));
        let moved = Backend { endpoint: Some("http://other:9000".into()), ..backend() };
        assert_ne!(first, fingerprint(&moved, Some(&credentials("s1"))));
        assert!(!first.contains("s1"));
    }

    /// One provider per class, reused while its backend stays, rebuilt when it changes, and
    /// dropped with the class: the cache is bounded by the number of classes.
    #[tokio::test]
    async fn a_class_s_provider_is_built_once_rebuilt_on_change_and_forgotten_with_it() {
        let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
        let client = kube::Client::try_from(config).unwrap();
        let backends = Backends::new(None, (None, String::new()), None, WriteFence::closed(), None);
        let open = Backend { credentials_secret: None, ..backend() };
        let first = backends.provider(&client, "a", Some(&open)).await.unwrap();
        let again = backends.provider(&client, "a", Some(&open)).await.unwrap();
        assert!(Arc::ptr_eq(&first, &again), "reused");
        let moved = Backend { endpoint: Some("http://elsewhere:9000".into()), ..open.clone() };
        let rebuilt = backends.provider(&client, "a", Some(&moved)).await.unwrap();
        assert!(!Arc::ptr_eq(&first, &rebuilt), "rebuilt for the new backend");
        assert_eq!(rebuilt.endpoint(), Some("http://elsewhere:9000"));
        backends.provider(&client, "b", Some(&open)).await.unwrap();
        assert_eq!(backends.built(), 2);
        backends.forget("a");
        assert_eq!(backends.built(), 1);
        backends.keep_only(&["c".to_owned()]);
        assert_eq!(backends.built(), 0);
        let error = backends.provider(&client, "c", None).await.unwrap_err();
        assert!(error.to_string().contains("--s3-region"), "{error}");
    }

    #[test]
    fn a_credentials_secret_needs_both_keys() {
        let secret: Secret = serde_json::from_value(json!({
            "metadata": {"name": "c"}, "data": {"AWS_ACCESS_KEY_ID": "aWQ="}
        }))
        .unwrap();
        assert_eq!(read_credentials(&secret).unwrap_err(), SECRET_ACCESS_KEY);
    }
}
