//! The crate graph's rules, read from `cargo metadata` (the *normal* dependencies, what
//! `cargo tree -e normal` shows for the host), and the crates each fuzz target names.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

use serde_json::Value;

use super::repo;

/// The binary's own dependencies, which the VMM library must not have.
const BINARY_ONLY: &[&str] = &["clap", "anyhow", "indicatif", "env_logger"];

/// The repository's crates a fuzz target may name, by target (fuzz/fuzz_targets/<name>.rs):
/// the narrowest crate that holds the code it fuzzes. `hvprof_fuzz` is the fuzz crate's own
/// library (fuzz/src), listed here as `(fuzz/src)`.
const FUZZ_TARGETS: &[(&str, &[&str])] = &[
    ("abi_page_list", &["profile_core"]),
    ("abi_request", &["profile_core"]),
    ("abi_round_trip", &["profile_core"]),
    ("nt_modules", &["introspect"]),
    ("linux_maps", &["introspect"]),
    ("pe_image", &["introspect"]),
    ("stack_walk", &["introspect"]),
    ("disk_image", &["report"]),
    ("cfi_walk", &["introspect"]),
    ("page_walk", &["introspect"]),
    ("guest_context", &["introspect"]),
    ("profile_json", &["report"]),
    ("timeline_json", &["report"]),
    ("symbol_files", &["report"]),
    ("guest_types", &["report"]),
    ("isf", &["report"]),
    ("initramfs", &["report"]),
    // The control API's HTTP parser, and the kernel loaders, are the VMM library's.
    ("api_http", &["vmm"]),
    // The in-kernel sampler's perf ring records.
    ("perf_records", &["vmm"]),
    ("kernel_elf", &["vmm"]),
    ("kernel_load", &["vmm"]),
    ("multiboot_header", &["vmm"]),
    // Device code: the devices crate.
    ("qcow2_header", &["devices"]),
    ("qcow2_refcounts", &["devices"]),
    ("virtio_blk_request", &["devices", "hvprof_fuzz"]),
    // The whole platform: the VMM's device model behind its bus.
    ("platform_io", &["vmm", "devices", "hvprof_fuzz"]),
    // The fuzz crate's library, which the targets above share.
    ("(fuzz/src)", &["devices"]),
];

/// The crates of this repository a fuzz target could name.
const REPO_CRATES: &[&str] = &[
    "vmm",
    "devices",
    "report",
    "introspect",
    "profile_core",
    "hvprof_fuzz",
];

/// The workspace's packages and their normal dependencies, by package name.
struct Graph {
    /// Each package's normal dependencies (for the host), by name.
    deps: BTreeMap<String, BTreeSet<String>>,
    /// The workspace's own packages.
    members: BTreeSet<String>,
    /// Each workspace package's library source (its `lib.rs`), from the repository's top.
    lib_src: BTreeMap<String, String>,
    /// Packages that are procedural macros: they run inside the compiler, so what they depend
    /// on is never linked into the crate that uses them.
    proc_macros: BTreeSet<String>,
}

impl Graph {
    fn read() -> Graph {
        let cargo = option_env!("CARGO").unwrap_or("cargo");
        let host = Command::new("rustc")
            .arg("-vV")
            .output()
            .expect("rustc -vV runs");
        let host = String::from_utf8_lossy(&host.stdout)
            .lines()
            .find_map(|l| l.strip_prefix("host: ").map(str::to_string))
            .expect("rustc -vV names the host");
        // The host's graph, as `cargo tree` shows it (and without the Windows-only crates,
        // which an offline machine may not have).
        let out = Command::new(cargo)
            .args([
                "metadata",
                "--format-version",
                "1",
                "--offline",
                "--filter-platform",
                &host,
            ])
            .current_dir(repo())
            .output()
            .expect("cargo metadata runs");
        assert!(
            out.status.success(),
            "cargo metadata: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let meta: Value = serde_json::from_slice(&out.stdout).expect("cargo metadata prints JSON");
        let name_of: BTreeMap<&str, &str> = meta["packages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| (p["id"].as_str().unwrap(), p["name"].as_str().unwrap()))
            .collect();
        let members: BTreeSet<String> = meta["workspace_members"]
            .as_array()
            .unwrap()
            .iter()
            .map(|id| name_of[id.as_str().unwrap()].to_string())
            .collect();
        let top = &repo();
        let lib_src = meta["packages"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|p| members.contains(p["name"].as_str().unwrap()))
            .flat_map(|p| {
                p["targets"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .filter_map(move |t| {
                        let lib = t["kind"].as_array().unwrap().iter().any(|k| k == "lib");
                        let src = std::path::Path::new(t["src_path"].as_str().unwrap());
                        let rel = src.strip_prefix(top).ok()?.to_string_lossy().into_owned();
                        lib.then(|| (p["name"].as_str().unwrap().to_string(), rel))
                    })
            })
            .collect();
        let proc_macros = meta["packages"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|p| {
                p["targets"].as_array().unwrap().iter().any(|t| {
                    t["kind"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .any(|k| k == "proc-macro")
                })
            })
            .map(|p| p["name"].as_str().unwrap().to_string())
            .collect();
        let mut deps = BTreeMap::new();
        for node in meta["resolve"]["nodes"].as_array().unwrap() {
            let normal = node["deps"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|d| {
                    d["dep_kinds"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .any(|k| k["kind"].is_null())
                })
                .map(|d| name_of[d["pkg"].as_str().unwrap()].to_string())
                .collect();
            deps.insert(name_of[node["id"].as_str().unwrap()].to_string(), normal);
        }
        Graph {
            deps,
            members,
            lib_src,
            proc_macros,
        }
    }

    fn direct(&self, package: &str) -> &BTreeSet<String> {
        self.deps
            .get(package)
            .unwrap_or_else(|| panic!("no package {package} in cargo metadata"))
    }

    /// Every package `package` depends on, directly or not, through normal dependencies.
    fn closure(&self, package: &str) -> BTreeSet<String> {
        self.reach(package, |_| true)
    }

    /// What is linked into `package`: its dependencies, direct or not, without what only a
    /// procedural macro depends on (anyhow reaches report through prost-derive, a compiler
    /// plug-in, and is not in the library).
    fn linked(&self, package: &str) -> BTreeSet<String> {
        self.reach(package, |p| !self.proc_macros.contains(p))
    }

    /// The packages reachable from `package`, following a package's own dependencies only
    /// where `descend` says so.
    fn reach(&self, package: &str, descend: impl Fn(&str) -> bool) -> BTreeSet<String> {
        let mut seen = BTreeSet::new();
        let mut todo: Vec<&str> = self.direct(package).iter().map(String::as_str).collect();
        while let Some(p) = todo.pop() {
            if seen.insert(p.to_string()) && descend(p) {
                todo.extend(self.direct(p).iter().map(String::as_str));
            }
        }
        seen
    }

    /// Of `package`'s dependencies (all of them, direct or not), those `bad` picks out.
    fn offending(&self, package: &str, bad: impl Fn(&str) -> bool) -> Vec<String> {
        self.closure(package)
            .into_iter()
            .filter(|d| bad(d))
            .collect()
    }
}

#[test]
fn the_graph_is_read_and_is_not_empty() {
    // So that no rule below passes on a graph that failed to load.
    let g = Graph::read();
    for m in [
        "hvprof",
        "vmm",
        "devices",
        "bench",
        "report",
        "introspect",
        "profile-core",
        "guest-agent",
    ] {
        assert!(
            g.members.contains(m),
            "{m} is not a workspace member: {:?}",
            g.members
        );
    }
    assert!(g.closure("vmm").contains("kvm-ioctls"));
    // What is linked leaves out what only the procedural macros (thiserror's, serde's) need,
    // and nothing else: the crates that use the macros stay in.
    let (linked, all) = (g.linked("vmm"), g.closure("vmm"));
    assert!(linked.len() < all.len() && linked.is_subset(&all));
    assert!(linked.contains("thiserror") && linked.contains("serde"));
    assert!(g.direct("report").contains("profile-core"));
}

#[test]
fn profile_core_depends_on_no_workspace_crate_and_on_no_kvm_crate() {
    let g = Graph::read();
    let wrong = g.offending("profile-core", |d| {
        g.members.contains(d) || d.starts_with("kvm-")
    });
    assert!(wrong.is_empty(), "profile-core depends on {wrong:?}");
}

#[test]
fn report_and_introspect_never_depend_on_the_vmm_or_kvm() {
    let g = Graph::read();
    for package in ["report", "introspect"] {
        let wrong = g.offending(package, |d| d == "vmm" || d == "kvm-ioctls");
        assert!(wrong.is_empty(), "{package} depends on {wrong:?}");
    }
}

#[test]
fn the_vmm_library_package_has_none_of_the_binary_s_dependencies() {
    let g = Graph::read();
    let has: Vec<&str> = BINARY_ONLY
        .iter()
        .copied()
        .filter(|d| g.linked("vmm").contains(*d))
        .collect();
    assert!(
        has.is_empty(),
        "the vmm library package depends on {has:?}, directly or through another crate: only the binary may"
    );
}

#[test]
fn devices_depends_on_neither_the_vmm_nor_the_report_side() {
    let g = Graph::read();
    let wrong = g.offending("devices", |d| matches!(d, "vmm" | "report" | "introspect"));
    assert!(wrong.is_empty(), "devices depends on {wrong:?}");
}

/// The repository's crates that `code` names at the start of a path (`vmm::x`, `use report::{..}`).
fn crates_named(code: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for name in REPO_CRATES {
        let pattern = format!("{name}::");
        let mut from = 0;
        while let Some(at) = code[from..].find(&pattern).map(|i| from + i) {
            from = at + pattern.len();
            let before = code[..at].chars().last();
            if !before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
                out.insert(name.to_string());
            }
        }
    }
    out
}

#[test]
fn each_fuzz_target_names_only_its_narrowest_crates() {
    let fuzz = repo().join("fuzz");
    let mut sources: Vec<(String, String)> = Vec::new();
    for entry in std::fs::read_dir(fuzz.join("fuzz_targets")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "rs") {
            let name = path.file_stem().unwrap().to_string_lossy().into_owned();
            sources.push((name, std::fs::read_to_string(&path).unwrap()));
        }
    }
    // The library the targets share (not the seeds generator, a tool of its own).
    let mut lib = String::new();
    for entry in std::fs::read_dir(fuzz.join("src")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "rs") {
            lib.push_str(&std::fs::read_to_string(&path).unwrap());
        }
    }
    sources.push(("(fuzz/src)".to_string(), lib));
    assert!(
        sources.len() > 10,
        "fuzz targets not found in {}",
        fuzz.display()
    );

    let mut wrong = Vec::new();
    for (name, text) in &sources {
        let named = crates_named(&super::graph::code_only(text));
        let Some((_, listed)) = FUZZ_TARGETS.iter().find(|(t, _)| t == name) else {
            wrong.push(format!("{name}: not in FUZZ_TARGETS (it names {named:?})"));
            continue;
        };
        let listed: BTreeSet<String> = listed.iter().map(|s| s.to_string()).collect();
        if named != listed {
            wrong.push(format!(
                "{name}: names {named:?}, FUZZ_TARGETS lists {listed:?}"
            ));
        }
    }
    for (target, _) in FUZZ_TARGETS {
        if !sources.iter().any(|(n, _)| n == target) {
            wrong.push(format!("{target}: in FUZZ_TARGETS but no such target"));
        }
    }
    assert!(
        wrong.is_empty(),
        "fuzz targets (tests/structure/deps.rs):\n{}",
        wrong.join("\n")
    );
}

#[test]
fn the_fuzz_crate_reader_sees_paths_and_skips_comments() {
    let code = super::graph::code_only(
        "use report::symbols; // vmm::x\nlet a = vmm::devices::y(); let b = my_report::z; \"introspect::q\"",
    );
    assert_eq!(
        crates_named(&code),
        BTreeSet::from(["report".to_string(), "vmm".to_string()])
    );
}

/// guest-agent/windows/build.sh builds the Windows agent's crates with rustc by hand: each
/// `lib DIR NAME SRC --extern ...` line must give a crate the same repository crates as its
/// manifest does (see the comment at the top of the script).
#[test]
fn the_windows_build_script_links_each_crate_as_its_manifest_says() {
    let g = Graph::read();
    let script = std::fs::read_to_string(repo().join("guest-agent/windows/build.sh")).unwrap();
    let script = script.replace("\\\n", " ");
    let mut checked = 0;
    let mut wrong = Vec::new();
    for line in script
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with("lib \""))
    {
        let words: Vec<&str> = line.split_whitespace().collect();
        let (name, src) = (words[2], words[3]);
        let externs: BTreeSet<String> = words
            .windows(2)
            .filter(|w| w[0] == "--extern")
            .map(|w| w[1].split('=').next().unwrap().to_string())
            .collect();
        let Some((package, _)) = g.lib_src.iter().find(|(_, s)| s.as_str() == src) else {
            wrong.push(format!(
                "{name}: no workspace package has {src} as its library"
            ));
            continue;
        };
        let manifest: BTreeSet<String> = g
            .direct(package)
            .iter()
            .filter(|d| g.members.contains(*d))
            .map(|d| d.replace('-', "_"))
            .collect();
        if externs != manifest {
            wrong.push(format!(
                "{name} ({package}): build.sh links {externs:?}, its manifest {manifest:?}"
            ));
        }
        checked += 1;
    }
    assert!(checked >= 4, "build.sh: only {checked} `lib` lines found");
    assert!(
        wrong.is_empty(),
        "guest-agent/windows/build.sh and the manifests disagree:\n{}",
        wrong.join("\n")
    );
}
