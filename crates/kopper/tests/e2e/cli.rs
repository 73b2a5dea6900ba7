//! The `kopper` binary's own commands for operators of the operator: `--version` and shell
//! completions.

use std::process::Command;

fn kopper(args: &[&str]) -> (bool, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_kopper")).args(args).output().unwrap();
    (output.status.success(), String::from_utf8_lossy(&output.stdout).into_owned())
}

#[test]
fn version_names_the_release_and_the_commit() {
    let (ok, out) = kopper(&["--version"]);
    assert!(ok);
    let rest = out
        .trim()
        .strip_prefix(&format!("kopper {} (commit ", env!("CARGO_PKG_VERSION")))
        .unwrap_or_else(|| panic!("{out}"));
    let commit = rest.strip_suffix(')').unwrap();
    assert!(
        commit == "unknown" || (commit.len() >= 7 && commit.chars().all(|c| c.is_ascii_hexdigit())),
        "{out}"
    );
}

#[test]
fn completions_cover_every_command_and_flag_for_each_shell() {
    for shell in ["bash", "zsh", "fish", "powershell", "elvish"] {
        let (ok, script) = kopper(&["completions", shell]);
        assert!(ok, "{shell}");
        for word in ["demo", "plan", "crds", "allow-unconsented-destinations", "protected-namespaces"] {
            assert!(script.contains(word), "{shell} completion lacks {word}");
        }
    }
    let (ok, _) = kopper(&["completions", "tcsh"]);
    assert!(!ok, "an unknown shell is refused");
}
