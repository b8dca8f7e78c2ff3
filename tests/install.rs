//! What the installed `hvprof` says of itself: the version and the commit it was built from.

use std::process::Command;

use crate::harness::{hvprof, status};

/// `hvprof --version` names the package's version and the commit the binary was built from:
/// the checkout's HEAD, as a user reporting a bug from a CI job needs it.
#[test]
fn version_names_the_commit_built() {
    let out = hvprof(["--version"]).run();
    out.assert_status(status::CLEAN);
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let head = Command::new("git")
        .args(["-C", root, "rev-parse", "--short=12", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
    let commit = head.as_deref().unwrap_or("unknown");
    assert_eq!(
        out.stdout.trim(),
        format!("hvprof {} (commit {commit})", env!("CARGO_PKG_VERSION")),
        "{out}"
    );
}
