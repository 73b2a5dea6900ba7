//! Kubeconfigs and clients for a running server, in the forms kubectl and kube-rs read.

use std::path::Path;

use base64::Engine;
use serde_json::json;

/// Where a running server listens and, when it serves HTTPS, the CA that signed its
/// certificate, which every kubeconfig and client it hands out trusts (and nothing else).
#[derive(Debug, Clone, Copy)]
pub struct Endpoint<'a> {
    pub url: &'a str,
    pub ca_pem: Option<&'a str>,
    pub ca_der: Option<&'a [u8]>,
}

/// A kubeconfig with one cluster, user and context, authenticating with a bearer token.
pub fn for_token(endpoint: Endpoint<'_>, user: &str, token: &str) -> kube::config::Kubeconfig {
    let mut cluster = json!({"server": endpoint.url});
    if let Some(ca_pem) = endpoint.ca_pem {
        cluster["certificate-authority-data"] =
            json!(base64::engine::general_purpose::STANDARD.encode(ca_pem.as_bytes()));
    }
    let document = json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "kubesim", "cluster": cluster}],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": "kubesim", "context": {"cluster": "kubesim", "user": user, "namespace": "default"}}],
        "current-context": "kubesim",
    });
    // Every field above is one kube's Kubeconfig models, so this cannot fail.
    serde_json::from_value(document).unwrap_or_default()
}

pub fn write(kubeconfig: &kube::config::Kubeconfig, path: &Path) -> std::io::Result<()> {
    let yaml = serde_yaml::to_string(kubeconfig).map_err(std::io::Error::other)?;
    std::fs::write(path, yaml)
}

/// A client for the server that sends `token`. Nothing here reads the environment, so tests
/// never reach whatever cluster the developer's own kubeconfig names.
pub fn client(endpoint: Endpoint<'_>, token: &str) -> kube::Client {
    kube::Client::try_from(client_config(endpoint, token))
        .unwrap_or_else(|e| panic!("a client of kubesim's own URL and CA can always be built: {e}"))
}

/// The client configuration behind [`client`], for callers that change it (retries, timeouts).
pub fn client_config(endpoint: Endpoint<'_>, token: &str) -> kube::Config {
    let url = endpoint.url;
    let uri = url.parse().unwrap_or_else(|_| panic!("kubesim's own URL {url} is a valid URI"));
    let mut config = kube::Config::new(uri);
    config.default_namespace = "default".into();
    config.auth_info.token = Some(secrecy::SecretString::from(token.to_owned()));
    config.root_cert = endpoint.ca_der.map(|der| vec![der.to_vec()]);
    config
}
