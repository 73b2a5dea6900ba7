//! A tenant's Secret shared with consent (SecretSync): the copy follows its source, goes when
//! the destination withdraws its consent or the SecretSync goes, can hold a TLS Secret's CA
//! certificate alone as an Opaque Secret, and never touches a Secret kopper did not make.
//! Attacks by a hostile tenant are in tests/e2e/tenancy.rs.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::json;

use kopper::controllers::replication::types::SecretSync;

use super::Cluster;
use crate::common::{eventually, manifests::create_document};

const SAMPLE: &str = include_str!("../../../../../config/samples/secretsync-ca-certificate.yaml");
const CONSENT: &str = "kopper.dev/accept-replication-from";

impl Cluster {
    fn secret_api(&self, namespace: &str) -> Api<Secret> {
        Api::namespaced(self.client.clone(), namespace)
    }

    fn secret_syncs(&self, namespace: &str) -> Api<SecretSync> {
        Api::namespaced(self.client.clone(), namespace)
    }

    /// A namespace accepting copies from `consent` (no annotation: from none).
    async fn namespace_accepting(&self, name: &str, consent: Option<&str>) {
        let annotations = consent.map(|from| json!({ CONSENT: from })).unwrap_or(json!({}));
        let namespace: Namespace =
            serde_json::from_value(json!({"metadata": {"name": name, "annotations": annotations}})).unwrap();
        Api::<Namespace>::all(self.client.clone()).create(&PostParams::default(), &namespace).await.unwrap();
    }

    async fn opaque_secret(&self, namespace: &str, name: &str, data: &[(&str, &str)]) {
        let secret = Secret {
            metadata: kube::core::ObjectMeta { name: Some(name.to_owned()), ..Default::default() },
            data: Some(bytes(data)),
            type_: Some("Opaque".to_owned()),
            ..Secret::default()
        };
        let params = PatchParams::apply("test").force();
        self.secret_api(namespace).patch(name, &params, &Patch::Apply(&secret)).await.unwrap();
    }

    async fn share(&self, namespace: &str, name: &str, spec: serde_json::Value) {
        let sync: SecretSync = serde_json::from_value(json!({
            "apiVersion": "kopper.dev/v1alpha1", "kind": "SecretSync",
            "metadata": {"name": name, "namespace": namespace}, "spec": spec,
        }))
        .unwrap();
        self.secret_syncs(namespace).create(&PostParams::default(), &sync).await.unwrap();
    }

    /// The Secret at `namespace/name` once `done` holds for it (`None`: absent).
    async fn secret_when(
        &self,
        namespace: &str,
        name: &str,
        done: impl Fn(Option<&Secret>) -> bool,
    ) -> Option<Secret> {
        let api = self.secret_api(namespace);
        eventually(&format!("Secret {namespace}/{name}"), || async {
            let found = api.get_opt(name).await.unwrap();
            done(found.as_ref()).then_some(found)
        })
        .await
    }

    async fn share_status(
        &self,
        namespace: &str,
        name: &str,
        done: impl Fn(&serde_json::Value) -> bool,
    ) -> serde_json::Value {
        let api = self.secret_syncs(namespace);
        eventually(&format!("status of SecretSync {namespace}/{name}"), || async {
            let status = serde_json::to_value(api.get(name).await.unwrap().status?).unwrap();
            done(&status).then_some(status)
        })
        .await
    }
}

fn bytes(data: &[(&str, &str)]) -> BTreeMap<String, ByteString> {
    data.iter().map(|(key, value)| ((*key).to_owned(), ByteString(value.as_bytes().to_vec()))).collect()
}

fn holds(secret: Option<&Secret>, key: &str, value: &str) -> bool {
    secret.and_then(|secret| secret.data.as_ref()?.get(key)).is_some_and(|held| held.0 == value.as_bytes())
}

fn reason(status: &serde_json::Value) -> &str {
    status["conditions"][0]["reason"].as_str().unwrap_or_default()
}

#[tokio::test]
async fn a_shared_secret_follows_its_source_and_goes_when_consent_is_withdrawn() {
    let cluster = Cluster::start().await;
    cluster.namespace_accepting("shop", None).await;
    cluster.namespace_accepting("payments", Some("shop")).await;
    cluster.opaque_secret("shop", "db-password", &[("password", "one")]).await;
    cluster
        .share("shop", "db", json!({"sourceNamespace": "shop", "secretName": "db-password", "destinationNamespace": "payments"}))
        .await;

    let copy = cluster.secret_when("payments", "db-password", |s| holds(s, "password", "one")).await.unwrap();
    assert_eq!(copy.type_.as_deref(), Some("Opaque"));
    assert_eq!(copy.labels()["app.kubernetes.io/managed-by"], "kopper");
    assert_eq!(copy.annotations()["kopper.dev/rule"], "SecretSync.db.shop");
    let status = cluster.share_status("shop", "db", |s| s["syncedCount"] == 1 && reason(s) == "Synced").await;
    assert_eq!(status["syncedNamespaces"], json!(["payments"]));

    cluster.opaque_secret("shop", "db-password", &[("password", "two")]).await;
    cluster.secret_when("payments", "db-password", |s| holds(s, "password", "two")).await;

    let withdrawn = json!({"metadata": {"annotations": {CONSENT: null}}});
    Api::<Namespace>::all(cluster.client.clone())
        .patch("payments", &PatchParams::default(), &Patch::Merge(&withdrawn))
        .await
        .unwrap();
    cluster.secret_when("payments", "db-password", |secret| secret.is_none()).await;
    let status = cluster.share_status("shop", "db", |s| reason(s) == "DestinationRefused").await;
    assert_eq!(status["refusedDestinations"], json!(["payments"]));
    assert!(cluster.secret_api("shop").get_opt("db-password").await.unwrap().is_some(), "the source stays");
}

/// The sample: a TLS Secret's `ca.crt` alone, shared as Opaque; deleting the SecretSync
/// removes the copy.
#[tokio::test]
async fn a_tls_secret_s_ca_certificate_alone_is_shared_as_opaque_and_goes_with_its_secret_sync() {
    let cluster = Cluster::start().await;
    for document in kopper::samples::documents(SAMPLE).unwrap() {
        create_document(&cluster.client, document).await;
    }
    let copy = cluster.secret_when("payments", "shop-ca", |secret| secret.is_some()).await.unwrap();
    assert_eq!(copy.type_.as_deref(), Some("Opaque"));
    let keys: Vec<&String> = copy.data.iter().flatten().map(|(key, _)| key).collect();
    assert_eq!(keys, ["ca.crt"], "never the private key");
    cluster.share_status("shop", "shop-ca", |s| reason(s) == "Synced").await;

    cluster.secret_syncs("shop").delete("shop-ca", &DeleteParams::default()).await.unwrap();
    cluster.secret_when("payments", "shop-ca", |secret| secret.is_none()).await;
    assert!(cluster.secret_api("shop").get_opt("shop-ca").await.unwrap().is_some(), "the source stays");
}

/// A Secret of the shared name that kopper did not make (a squatter's, or the destination
/// owner's own) is never touched: the share reports the place taken.
#[tokio::test]
async fn a_secret_kopper_did_not_make_is_left_alone_and_reported() {
    let cluster = Cluster::start().await;
    cluster.namespace_accepting("shop", None).await;
    cluster.namespace_accepting("payments", Some("*")).await;
    cluster.opaque_secret("shop", "registry", &[("token", "shop's")]).await;
    cluster.opaque_secret("payments", "registry", &[("token", "payments' own")]).await;
    cluster
        .share(
            "shop",
            "registry",
            json!({"sourceNamespace": "shop", "secretName": "registry", "destinationNamespace": "payments"}),
        )
        .await;

    let status = cluster.share_status("shop", "registry", |s| reason(s) == "Conflict").await;
    assert_eq!(status["conflicts"][0]["namespace"], "payments");
    assert_eq!(status["conflicts"][0]["reason"], "DestinationOccupied");
    let own = cluster.secret_api("payments").get("registry").await.unwrap();
    assert!(holds(Some(&own), "token", "payments' own"));
    assert!(!own.labels().contains_key("app.kubernetes.io/managed-by"), "no kopper marks");

    cluster.secret_syncs("shop").delete("registry", &DeleteParams::default()).await.unwrap();
    eventually("the SecretSync gone", || async {
        cluster.secret_syncs("shop").get_opt("registry").await.unwrap().is_none().then_some(())
    })
    .await;
    let own = cluster.secret_api("payments").get("registry").await.expect("the owner's Secret survives");
    assert!(holds(Some(&own), "token", "payments' own"));
}
