//! Records the commit kopper is built from, for `kopper_build_info` and `--version`:
//! `KOPPER_COMMIT` when set (image builds from a tarball), else `git rev-parse`, else
//! `unknown`.

use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=KOPPER_COMMIT");
    println!("cargo:rerun-if-changed=../../.git/HEAD");
    println!("cargo:rerun-if-changed=../../.git/refs/heads");
    let commit = std::env::var("KOPPER_COMMIT").ok().filter(|c| !c.is_empty()).or_else(git_commit);
    println!("cargo:rustc-env=KOPPER_COMMIT={}", commit.as_deref().unwrap_or("unknown"));
}

fn git_commit() -> Option<String> {
    let output = Command::new("git").args(["rev-parse", "--short=12", "HEAD"]).output().ok()?;
    let commit = String::from_utf8(output.stdout).ok()?.trim().to_owned();
    (output.status.success() && !commit.is_empty()).then_some(commit)
}
