//! Bad input never crashes kubesim and never corrupts what it stores: random and mutated
//! requests (method, path, content type, body) go through the whole HTTP path, every answer
//! must be a well-formed response below 500, and afterwards the stored objects are intact.
//!
//! Inputs that once found a bug are kept in `tests/fuzz-corpus/` (one request per file:
//! `METHOD PATH CONTENT-TYPE` on the first line, the body after it) and replayed on every run.

use std::path::Path;

use http::Request;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams, PostParams};
use proptest::prelude::*;
use serde_json::json;

struct Case {
    method: String,
    path: String,
    content_type: String,
    body: Vec<u8>,
}

impl std::fmt::Debug for Case {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {} {}\n{}",
            self.method,
            self.path,
            self.content_type,
            String::from_utf8_lossy(&self.body)
        )
    }
}

fn segment() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("api".to_owned()),
        Just("apis".to_owned()),
        Just("v1".to_owned()),
        Just("namespaces".to_owned()),
        Just("fuzz".to_owned()),
        Just("configmaps".to_owned()),
        Just("secrets".to_owned()),
        Just("pods".to_owned()),
        Just("status".to_owned()),
        Just("finalize".to_owned()),
        Just("watch".to_owned()),
        Just("sentinel".to_owned()),
        Just("rbac.authorization.k8s.io".to_owned()),
        Just("apiextensions.k8s.io".to_owned()),
        Just("customresourcedefinitions".to_owned()),
        "[a-zA-Z0-9%._~-]{0,12}",
    ]
}

fn path() -> impl Strategy<Value = String> {
    (
        prop::collection::vec(segment(), 0..7),
        prop::option::of("(watch=(true|1|x)|labelSelector=[a-z=!,()]{0,10}|limit=-?[0-9]{1,3}|continue=[A-Za-z0-9=]{0,8}|resourceVersion=[0-9a-z]{0,4}|fieldSelector=[a-z.=]{0,12}|timeoutSeconds=[0-9]{1,2})"),
    )
        .prop_map(|(segments, query)| {
            let mut p = format!("/{}", segments.join("/"));
            if let Some(q) = query {
                p.push('?');
                p.push_str(&q);
            }
            p
        })
}

fn json_value() -> impl Strategy<Value = serde_json::Value> {
    let leaf = prop_oneof![
        Just(serde_json::Value::Null),
        any::<bool>().prop_map(serde_json::Value::from),
        any::<i64>().prop_map(serde_json::Value::from),
        "[a-zA-Z0-9 ._/-]{0,10}".prop_map(serde_json::Value::from),
    ];
    leaf.prop_recursive(4, 32, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(serde_json::Value::from),
            prop::collection::btree_map(
                prop_oneof![
                    Just("apiVersion".to_owned()),
                    Just("kind".to_owned()),
                    Just("metadata".to_owned()),
                    Just("name".to_owned()),
                    Just("data".to_owned()),
                    Just("spec".to_owned()),
                    Just("finalizers".to_owned()),
                    Just("ownerReferences".to_owned()),
                    Just("op".to_owned()),
                    Just("path".to_owned()),
                    "[a-z]{1,6}",
                ],
                inner,
                0..5,
            )
            .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
        ]
    })
}

fn body() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        prop::collection::vec(any::<u8>(), 0..64),
        json_value().prop_map(|v| serde_json::to_vec(&v).unwrap()),
        json_value().prop_map(|v| {
            let mut object = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "fuzzed"}});
            object["data"] = v;
            serde_json::to_vec(&object).unwrap()
        }),
    ]
}

fn case() -> impl Strategy<Value = Case> {
    (
        prop_oneof![Just("GET"), Just("POST"), Just("PUT"), Just("PATCH"), Just("DELETE")],
        path(),
        prop_oneof![
            Just("application/json"),
            Just("application/yaml"),
            Just("application/merge-patch+json"),
            Just("application/json-patch+json"),
            Just("application/strategic-merge-patch+json"),
            Just("application/apply-patch+yaml"),
            Just("text/plain"),
            Just(""),
        ],
        body(),
    )
        .prop_map(|(method, path, content_type, body)| Case {
            method: method.to_owned(),
            path,
            content_type: content_type.to_owned(),
            body,
        })
}

/// Sends one request; fails if kubesim answered 5xx or an error that is not a `Status`.
async fn send(client: &kube::Client, case: &Case) -> Result<(), String> {
    let mut builder = Request::builder().method(case.method.as_str()).uri(case.path.as_str());
    if !case.content_type.is_empty() {
        builder = builder.header("content-type", case.content_type.as_str());
    }
    let request = builder.body(kube::client::Body::from(case.body.clone())).map_err(|e| e.to_string())?;
    let response = match tokio::time::timeout(std::time::Duration::from_secs(5), client.send(request)).await {
        Err(_) => return Ok(()), // a watch that stays open is a correct answer
        Ok(Err(kube::Error::Api(status))) if status.code < 500 => return Ok(()),
        Ok(Err(e)) => return Err(format!("{e}")),
        Ok(Ok(response)) => response,
    };
    let status = response.status();
    if status.is_server_error() {
        return Err(format!("answered {status}"));
    }
    Ok(())
}

/// The immutable sentinel's data is unchanged (a fuzzed request may legitimately delete
/// it, never alter it), and every stored object still reads back.
async fn sentinel_intact(client: &kube::Client) -> Result<(), String> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "fuzz");
    if let Some(sentinel) = api.get_opt("sentinel").await.map_err(|e| e.to_string())?
        && sentinel.data.unwrap_or_default().get("k").map(String::as_str) != Some("v")
    {
        return Err("the immutable sentinel ConfigMap changed".into());
    }
    let all: Api<ConfigMap> = Api::all(client.clone());
    all.list(&ListParams::default()).await.map_err(|e| format!("stored objects no longer list: {e}"))?;
    Ok(())
}

async fn fresh_server() -> kubesim::Server {
    let sim = kubesim::Server::start(kubesim::Config::default()).await.unwrap();
    let client = sim.client();
    let ns: k8s_openapi::api::core::v1::Namespace =
        serde_json::from_value(json!({"metadata": {"name": "fuzz"}})).unwrap();
    Api::all(client.clone()).create(&PostParams::default(), &ns).await.unwrap();
    let sentinel: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "sentinel",
        "finalizers": ["kubesim.dev/keep"]}, "data": {"k": "v"}, "immutable": true}))
    .unwrap();
    Api::namespaced(client, "fuzz").create(&PostParams::default(), &sentinel).await.unwrap();
    sim
}

fn corpus() -> Vec<(String, Case)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fuzz-corpus");
    let mut cases = Vec::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let text = std::fs::read(&path).unwrap();
        let split = text.iter().position(|b| *b == b'\n').unwrap_or(text.len());
        let header = String::from_utf8_lossy(&text[..split]).to_string();
        let mut parts = header.split(' ');
        let case = Case {
            method: parts.next().unwrap_or("GET").to_owned(),
            path: parts.next().unwrap_or("/").to_owned(),
            content_type: parts.next().unwrap_or("").to_owned(),
            body: text.get(split + 1..).unwrap_or_default().to_vec(),
        };
        cases.push((path.display().to_string(), case));
    }
    cases
}

#[tokio::test]
async fn kept_corpus_is_answered_without_crash_or_corruption() {
    let sim = fresh_server().await;
    let client = sim.client();
    for (file, case) in corpus() {
        send(&client, &case).await.unwrap_or_else(|e| panic!("{file}: {e}"));
        sentinel_intact(&client).await.unwrap_or_else(|e| panic!("{file}: {e}"));
    }
}

#[test]
fn random_requests_are_answered_without_crash_or_corruption() {
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    let sim = runtime.block_on(fresh_server());
    let client = {
        let _inside = runtime.enter();
        sim.client()
    };
    let config = ProptestConfig { cases: 400, failure_persistence: None, ..ProptestConfig::default() };
    proptest!(config, |(case in case())| {
        let outcome = runtime.block_on(async {
            send(&client, &case).await?;
            sentinel_intact(&client).await
        });
        prop_assert!(outcome.is_ok(), "{:?}: {}", case, outcome.unwrap_err());
    });
    drop(sim);
}
