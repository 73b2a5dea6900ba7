//! Kubeconfigs and clients for a running server, in the forms kubectl and kube-rs read.

use std::path::Path;

use serde_json::json;

/// A kubeconfig with one cluster, user and context, authenticating with a bearer token.
pub fn for_token(url: &str, user: &str, token: &str) -> kube::config::Kubeconfig {
    let document = json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "kubesim", "cluster": {"server": url}}],
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

/// A client for `url` that sends `token`. Nothing here reads the environment, so tests never
/// reach whatever cluster the developer's own kubeconfig names.
pub fn client(url: &str, token: &str) -> kube::Client {
    kube::Client::try_from(client_config(url, token))
        .unwrap_or_else(|e| panic!("a plain-HTTP client needs no TLS setup: {e}"))
}

/// The client configuration behind [`client`], for callers that change it (retries, timeouts).
pub fn client_config(url: &str, token: &str) -> kube::Config {
    let uri = url.parse().unwrap_or_else(|_| panic!("kubesim's own URL {url} is a valid URI"));
    let mut config = kube::Config::new(uri);
    config.default_namespace = "default".into();
    config.auth_info.token = Some(secrecy::SecretString::from(token.to_owned()));
    config
}
