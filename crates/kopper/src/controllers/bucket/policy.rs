//! When two IAM policy documents mean the same: the comparison that keeps an idle reconcile
//! from rewriting a policy IAM (or an S3-compatible service) returns in another spelling.
//!
//! IAM keeps a document as it was sent, but services that store policies differently return
//! one statement as an object instead of a one-element list, a single action as a string
//! instead of a list, actions in another order or case (IAM's action names are
//! case-insensitive), and keys such as `Sid` added or dropped. Compared as plain JSON, each of
//! those differences would make kopper put the policy again at every reconcile, for ever
//! (the re-sync loops ACK's controllers had for the same reason).

use serde_json::{Map, Value};

/// Whether `found` grants and denies exactly what `wanted` does, spelled either way.
/// A document that is not a policy (not an object, or statements that are not objects)
/// equals nothing, so kopper puts its own.
pub fn equivalent(wanted: &Value, found: &Value) -> bool {
    match (normalized(wanted), normalized(found)) {
        (Some(wanted), Some(found)) => wanted == found,
        _ => false,
    }
}

/// The document in one spelling: statements as a sorted list without `Sid`s, each list of
/// actions or resources sorted and without repeats, action names in lower case.
fn normalized(document: &Value) -> Option<Value> {
    let document = document.as_object()?;
    let mut statements = match document.get("Statement")? {
        Value::Array(statements) => {
            statements.iter().map(normalized_statement).collect::<Option<Vec<_>>>()?
        }
        statement @ Value::Object(_) => vec![normalized_statement(statement)?],
        _ => return None,
    };
    statements.sort_by_key(Value::to_string);
    statements.dedup();
    let mut out = Map::new();
    out.insert("Version".into(), document.get("Version").cloned().unwrap_or(Value::Null));
    out.insert("Statement".into(), Value::Array(statements));
    Some(Value::Object(out))
}

/// One statement in one spelling. `Sid` is a label, not a grant, so it is left out.
fn normalized_statement(statement: &Value) -> Option<Value> {
    let statement = statement.as_object()?;
    let mut out = Map::new();
    for (key, value) in statement {
        let value = match key.as_str() {
            "Sid" => continue,
            "Action" | "NotAction" => string_set(value, true)?,
            "Resource" | "NotResource" => string_set(value, false)?,
            _ => value.clone(),
        };
        out.insert(key.clone(), value);
    }
    Some(Value::Object(out))
}

/// A string or a list of strings as a sorted list without repeats; `lowercase` for names
/// IAM compares without case.
fn string_set(value: &Value, lowercase: bool) -> Option<Value> {
    let spell = |text: &str| if lowercase { text.to_ascii_lowercase() } else { text.to_owned() };
    let mut items = match value {
        Value::String(text) => vec![spell(text)],
        Value::Array(items) => {
            items.iter().map(|item| item.as_str().map(spell)).collect::<Option<Vec<_>>>()?
        }
        _ => return None,
    };
    items.sort();
    items.dedup();
    Some(Value::Array(items.into_iter().map(Value::String).collect()))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::controllers::bucket::names::policy_document;

    #[test]
    fn kopper_s_own_document_equals_itself() {
        let document = policy_document("team-a-data");
        assert!(equivalent(&document, &document));
    }

    #[test]
    fn another_spelling_of_the_same_grants_is_equal() {
        let wanted = json!({"Version": "2012-10-17", "Statement": [
            {"Sid": "Bucket", "Effect": "Allow", "Action": ["s3:ListBucket"], "Resource": ["arn:aws:s3:::b"]},
            {"Sid": "Objects", "Effect": "Allow", "Action": ["s3:GetObject", "s3:PutObject"], "Resource": ["arn:aws:s3:::b/*"]},
        ]});
        let respelled = json!({"Version": "2012-10-17", "Statement": [
            {"Effect": "Allow", "Resource": "arn:aws:s3:::b/*", "Action": ["S3:PutObject", "s3:getobject", "s3:GetObject"]},
            {"Effect": "Allow", "Action": "s3:ListBucket", "Resource": "arn:aws:s3:::b"},
        ]});
        assert!(equivalent(&wanted, &respelled));
    }

    #[test]
    fn a_single_statement_as_an_object_equals_a_list_of_one() {
        let statement = json!({"Effect": "Allow", "Action": "s3:GetObject", "Resource": "arn:aws:s3:::b/*"});
        let as_list = json!({"Version": "2012-10-17", "Statement": [statement.clone()]});
        let as_object = json!({"Version": "2012-10-17", "Statement": statement});
        assert!(equivalent(&as_list, &as_object));
    }

    #[test]
    fn a_different_grant_is_not_equal() {
        let wanted = policy_document("team-a-data");
        for changed in [
            policy_document("team-b-data"),
            json!({"Version": "2012-10-17", "Statement": []}),
            json!({"Version": "2008-10-17", "Statement": wanted["Statement"].clone()}),
        ] {
            assert!(!equivalent(&wanted, &changed), "{changed} equals {wanted}");
        }
        let mut more = wanted.clone();
        more["Statement"][1]["Action"].as_array_mut().unwrap().push(json!("s3:PutBucketPolicy"));
        assert!(!equivalent(&wanted, &more), "an added action is a different grant");
        let mut denied = wanted.clone();
        denied["Statement"][0]["Effect"] = json!("Deny");
        assert!(!equivalent(&wanted, &denied), "another effect is a different grant");
        let mut conditioned = wanted.clone();
        conditioned["Statement"][0]["Condition"] = json!({"Bool": {"aws:SecureTransport": "true"}});
        assert!(!equivalent(&wanted, &conditioned), "a condition is a different grant");
    }

    #[test]
    fn resources_keep_their_case() {
        let lower = json!({"Statement": [{"Effect": "Allow", "Action": "s3:GetObject", "Resource": "arn:aws:s3:::b/*"}]});
        let upper = json!({"Statement": [{"Effect": "Allow", "Action": "s3:GetObject", "Resource": "arn:aws:s3:::B/*"}]});
        assert!(!equivalent(&lower, &upper));
    }

    #[test]
    fn what_is_not_a_policy_equals_nothing() {
        let wanted = policy_document("b");
        for found in [Value::Null, json!("text"), json!({"Statement": 1}), json!({"Statement": [1]})] {
            assert!(!equivalent(&wanted, &found), "{found}");
        }
    }
}
