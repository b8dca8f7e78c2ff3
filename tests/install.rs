//! What a package installs and what the installed `hvprof` says of itself: the version and
//! the commit it was built from, shell completions and man pages made from its own argument
//! definitions.

use std::process::Command;

use crate::harness::{hvprof, status, TempDir};

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

/// `hvprof completions bash`: a script bash sources, after which `complete -p hvprof` names
/// the function it completes hvprof's words with; zsh's and fish's scripts name hvprof too.
#[test]
fn completion_scripts_load_in_bash() {
    let dir = TempDir::new("install-completions");
    let out = hvprof(["completions", "bash"]).run();
    out.assert_status(status::CLEAN);
    let script = dir.write("hvprof.bash", out.stdout.as_bytes());
    let bash = Command::new("bash")
        .args([
            "--norc",
            "-c",
            &format!("source {}; complete -p hvprof", script.display()),
        ])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&bash.stdout);
    assert!(
        bash.status.success() && said.contains("-F _hvprof") && said.trim_end().ends_with("hvprof"),
        "bash: {said}{}",
        String::from_utf8_lossy(&bash.stderr)
    );
    for shell in ["zsh", "fish"] {
        let out = hvprof(["completions", shell]).run();
        out.assert_status(status::CLEAN);
        assert!(out.stdout.contains("hvprof"), "{out}");
    }
}

/// `hvprof man DIR`: hvprof.1 and a page per subcommand, which man renders with the options
/// the subcommand takes; with SOURCE_DATE_EPOCH set, twice the same bytes, dated that day.
#[test]
fn man_pages_render_and_are_reproducible() {
    let dir = TempDir::new("install-man");
    let (a, b) = (dir.join("a"), dir.join("b"));
    for d in [&a, &b] {
        std::fs::create_dir(d).unwrap();
        hvprof(["man", d.to_str().unwrap()])
            .env("SOURCE_DATE_EPOCH", "1795910399")
            .run()
            .assert_status(status::CLEAN);
    }
    for page in [
        "hvprof",
        "hvprof-profile",
        "hvprof-report",
        "hvprof-compare",
    ] {
        let file = a.join(format!("{page}.1"));
        let bytes = std::fs::read(&file).unwrap();
        assert_eq!(
            bytes,
            std::fs::read(b.join(format!("{page}.1"))).unwrap(),
            "{page}"
        );
        assert!(
            String::from_utf8_lossy(&bytes).contains("2026-11-28"),
            "{page}: no date"
        );
        let man = Command::new("man")
            .arg("-l")
            .arg(&file)
            .env("MANPAGER", "cat")
            .env("MANWIDTH", "100")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&man.stdout);
        assert!(
            man.status.success() && text.contains("NAME"),
            "{page}: {text}"
        );
        if page == "hvprof-profile" {
            assert!(
                text.contains("--interval") && text.contains("--sysroot"),
                "{text}"
            );
        }
    }
    let missing = dir.join("none");
    let out = hvprof(["man", missing.to_str().unwrap()]).run();
    out.assert_status(status::USAGE);
    out.assert_error_line(&[missing.to_str().unwrap(), "not a directory"]);
}
