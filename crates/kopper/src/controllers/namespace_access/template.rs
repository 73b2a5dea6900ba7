//! Name templates such as `ad-kubernetes-{namespace}` or `team-{labels.team}`.
//!
//! A template is parsed once per policy (so a typo is reported against the policy, whatever
//! namespaces exist) and rendered per namespace (so a missing label is reported against the
//! namespace that lacks it).

use std::collections::BTreeMap;

/// What a template can read about a namespace.
#[derive(Clone, Copy, Debug)]
pub struct NamespaceFacts<'a> {
    pub name: &'a str,
    pub labels: &'a BTreeMap<String, String>,
    /// One of kopper's protected namespaces (see [`crate::tenancy::ProtectedNamespaces`]).
    pub protected: bool,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Part {
    Literal(String),
    Namespace,
    Label(String),
}

/// A parsed template: literal text interleaved with placeholders.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Template {
    parts: Vec<Part>,
}

/// Why a template could not be parsed. Positions are byte offsets into the template.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TemplateError {
    #[error("'{{' at position {position} is never closed")]
    Unclosed { position: usize },
    #[error("'}}' at position {position} has no matching '{{'")]
    UnmatchedClose { position: usize },
    #[error("unknown placeholder {{{name}}}: use {{namespace}} or {{labels.<key>}}")]
    UnknownPlaceholder { name: String },
    #[error("placeholder {{labels.}} needs a label key, e.g. {{labels.team}}")]
    EmptyLabelKey,
}

/// Why a parsed template could not be rendered for one namespace.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RenderError {
    #[error("namespace {namespace:?} has no label {key:?}")]
    MissingLabel { namespace: String, key: String },
}

const LABELS_PREFIX: &str = "labels.";

impl Template {
    /// Parses `{namespace}` and `{labels.<key>}` placeholders; everything else is literal.
    pub fn parse(source: &str) -> Result<Self, TemplateError> {
        let mut parts = Vec::new();
        let mut position = 0;
        while position < source.len() {
            let rest = &source[position..];
            let Some(special) = rest.find(['{', '}']) else {
                parts.push(Part::Literal(rest.to_owned()));
                break;
            };
            if special > 0 {
                parts.push(Part::Literal(rest[..special].to_owned()));
            }
            let open = position + special;
            if source[open..].starts_with('}') {
                return Err(TemplateError::UnmatchedClose { position: open });
            }
            let body_start = open + 1;
            let close = source[body_start..]
                .find(['{', '}'])
                .map(|offset| body_start + offset)
                .filter(|&close| source[close..].starts_with('}'))
                .ok_or(TemplateError::Unclosed { position: open })?;
            parts.push(parse_placeholder(&source[body_start..close])?);
            position = close + 1;
        }
        Ok(Self { parts })
    }

    /// Substitutes the namespace's name and labels.
    pub fn render(&self, namespace: NamespaceFacts<'_>) -> Result<String, RenderError> {
        let mut out = String::new();
        for part in &self.parts {
            match part {
                Part::Literal(text) => out.push_str(text),
                Part::Namespace => out.push_str(namespace.name),
                Part::Label(key) => {
                    let value = namespace.labels.get(key).ok_or_else(|| RenderError::MissingLabel {
                        namespace: namespace.name.to_owned(),
                        key: key.clone(),
                    })?;
                    out.push_str(value);
                }
            }
        }
        Ok(out)
    }

    /// Whether the rendered text can differ between namespaces.
    pub fn has_placeholders(&self) -> bool {
        self.parts.iter().any(|part| !matches!(part, Part::Literal(_)))
    }
}

fn parse_placeholder(body: &str) -> Result<Part, TemplateError> {
    let body = body.trim();
    if body == "namespace" {
        return Ok(Part::Namespace);
    }
    match body.strip_prefix(LABELS_PREFIX) {
        Some("") => Err(TemplateError::EmptyLabelKey),
        Some(key) => Ok(Part::Label(key.to_owned())),
        None => Err(TemplateError::UnknownPlaceholder { name: body.to_owned() }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    fn render(template: &str, namespace: &str, pairs: &[(&str, &str)]) -> Result<String, RenderError> {
        let labels = labels(pairs);
        Template::parse(template).unwrap().render(NamespaceFacts {
            name: namespace,
            labels: &labels,
            protected: false,
        })
    }

    #[test]
    fn seed_template_renders_the_namespace_name() {
        assert_eq!(render("ad-kubernetes-{namespace}", "team-1", &[]).unwrap(), "ad-kubernetes-team-1");
    }

    #[test]
    fn label_placeholder_renders_the_label_value() {
        let rendered = render("team-{labels.team}-{namespace}", "dev", &[("team", "blue")]).unwrap();
        assert_eq!(rendered, "team-blue-dev");
    }

    #[test]
    fn label_keys_may_carry_a_prefix() {
        let rendered = render("{labels.example.com/owner}", "dev", &[("example.com/owner", "ann")]).unwrap();
        assert_eq!(rendered, "ann");
    }

    #[test]
    fn whitespace_inside_braces_is_tolerated() {
        assert_eq!(render("x-{ namespace }", "dev", &[]).unwrap(), "x-dev");
    }

    #[test]
    fn text_without_placeholders_is_literal() {
        let template = Template::parse("platform-admins").unwrap();
        assert!(!template.has_placeholders());
        assert_eq!(render("platform-admins", "any", &[]).unwrap(), "platform-admins");
    }

    #[test]
    fn missing_label_names_the_namespace_and_key() {
        let err = render("team-{labels.team}", "dev", &[]).unwrap_err();
        assert_eq!(err, RenderError::MissingLabel { namespace: "dev".into(), key: "team".into() });
        assert_eq!(err.to_string(), r#"namespace "dev" has no label "team""#);
    }

    #[test]
    fn unknown_placeholder_is_rejected_with_a_hint() {
        let err = Template::parse("x-{name}").unwrap_err();
        assert_eq!(err, TemplateError::UnknownPlaceholder { name: "name".into() });
        assert!(err.to_string().contains("{namespace}"));
    }

    #[test]
    fn unclosed_brace_reports_its_position() {
        assert_eq!(Template::parse("ab-{namespace").unwrap_err(), TemplateError::Unclosed { position: 3 });
        assert_eq!(Template::parse("a{b{namespace}").unwrap_err(), TemplateError::Unclosed { position: 1 });
    }

    #[test]
    fn stray_closing_brace_is_rejected() {
        assert_eq!(Template::parse("ab}").unwrap_err(), TemplateError::UnmatchedClose { position: 2 });
    }

    #[test]
    fn empty_label_key_is_rejected() {
        assert_eq!(Template::parse("{labels.}").unwrap_err(), TemplateError::EmptyLabelKey);
    }

    #[test]
    fn non_ascii_literals_survive_parsing() {
        assert_eq!(render("é-{namespace}-ü", "n", &[]).unwrap(), "é-n-ü");
    }
}
