//! TEMPORARY stand-in until the selector module lands (same API).
#![allow(dead_code, unused_variables)]
use serde_json::{Map, Value};
#[derive(Debug, Clone, Default)]
pub struct LabelSelector {
    reqs: Vec<(String, String)>,
}
impl LabelSelector {
    pub fn parse(s: &str) -> Result<Self, String> {
        let mut reqs = Vec::new();
        for part in s.split(',').filter(|p| !p.is_empty()) {
            let (k, v) =
                part.split_once('=').ok_or_else(|| format!("unable to parse requirement: {part}"))?;
            reqs.push((k.trim_end_matches('=').to_owned(), v.trim_start_matches('=').to_owned()));
        }
        Ok(Self { reqs })
    }
    pub fn matches(&self, labels: Option<&Map<String, Value>>) -> bool {
        self.reqs.iter().all(|(k, v)| labels.and_then(|l| l.get(k)).and_then(Value::as_str) == Some(v))
    }
    pub fn is_empty(&self) -> bool {
        self.reqs.is_empty()
    }
}
#[derive(Debug, Clone, Default)]
pub struct FieldSelector {
    reqs: Vec<(String, String)>,
}
impl FieldSelector {
    pub fn parse(s: &str) -> Result<Self, String> {
        let mut reqs = Vec::new();
        for part in s.split(',').filter(|p| !p.is_empty()) {
            let (k, v) = part.split_once('=').ok_or_else(|| format!("invalid selector: {part}"))?;
            reqs.push((k.trim_end_matches('=').to_owned(), v.trim_start_matches('=').to_owned()));
        }
        Ok(Self { reqs })
    }
    pub fn check_supported(&self, group: &str, resource: &str, is_custom: bool) -> Result<(), String> {
        Ok(())
    }
    pub fn matches(&self, obj: &Value) -> bool {
        self.reqs.iter().all(|(k, v)| {
            let mut cur = obj;
            for seg in k.split('.') {
                cur = &cur[seg];
            }
            cur.as_str().unwrap_or("") == v
        })
    }
    pub fn is_empty(&self) -> bool {
        self.reqs.is_empty()
    }
}
