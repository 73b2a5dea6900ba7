//! Namespace name patterns, shared by the controllers that select namespaces by name
//! (NamespaceAccess, ReplicationRule).

/// Shell-style matching: `*` is any run of characters (including none), `?` exactly one.
pub fn glob_matches(pattern: &str, name: &str) -> bool {
    let pattern: Vec<char> = pattern.chars().collect();
    let name: Vec<char> = name.chars().collect();
    let (mut p, mut n) = (0, 0);
    // Where the last `*` was, and how much of the name it has swallowed so far.
    let mut backtrack: Option<(usize, usize)> = None;
    while n < name.len() {
        match pattern.get(p) {
            Some('*') => {
                backtrack = Some((p, n));
                p += 1;
            }
            Some(&c) if c == '?' || c == name[n] => {
                p += 1;
                n += 1;
            }
            _ => match backtrack {
                Some((star, swallowed)) => {
                    p = star + 1;
                    n = swallowed + 1;
                    backtrack = Some((star, swallowed + 1));
                }
                None => return false,
            },
        }
    }
    pattern[p..].iter().all(|&c| c == '*')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn glob_star_matches_any_run_including_none() {
        assert!(glob_matches("team-*", "team-"));
        assert!(glob_matches("team-*", "team-blue"));
        assert!(glob_matches("*-dev", "blue-dev"));
        assert!(glob_matches("a*b*c", "aXXbYYbc"));
        assert!(glob_matches("*", "anything"));
        assert!(!glob_matches("team-*", "teams"));
        assert!(!glob_matches("*-dev", "blue-prod"));
    }

    #[test]
    fn glob_question_mark_matches_exactly_one_character() {
        assert!(glob_matches("team-?", "team-1"));
        assert!(!glob_matches("team-?", "team-12"));
        assert!(!glob_matches("team-?", "team-"));
    }
}
