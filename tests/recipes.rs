//! The CI and fleet recipes of docs/ci/, checked as their users run them: each file is parsed,
//! what a runner or a cluster needs of it is checked (KVM access, the install, the matrix or
//! the indexed Job, the artifacts and reports), and every step that runs hvprof is run with
//! this build's binary first on PATH, the built-in reference guest's ELF as the guest each
//! recipe boots and a short scenario as its command line. What only a runner or a cluster
//! does (checkout, udev, apt, artifact transfer, scheduling) is not run; the files a later
//! step reads are put where the runner would put them. The uploads to Pyroscope and Parca
//! that docs/regression.md shows are run against a loopback stand-in that checks each
//! request.

use std::ffi::OsString;
use std::path::Path;

use yaml_rust2::{Yaml, YamlLoader};

use crate::harness::{bash, hvprof, hvprof_bin, workspace_root, Output, TempDir};

/// The command line every recipe's guest gets: the reference guest's shares workload, 1.5 s of
/// it (1,500 samples expected; it needs 200, which a loaded host still gives).
const CMDLINE: &str = "scenario=shares shares.ms=1500";

fn load(name: &str) -> Vec<Yaml> {
    let path = workspace_root().join("docs/ci").join(name);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    YamlLoader::load_from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn text<'a>(y: &'a Yaml, what: &str) -> &'a str {
    y.as_str()
        .unwrap_or_else(|| panic!("{what}: not a string: {y:?}"))
}

fn list<'a>(y: &'a Yaml, what: &str) -> &'a [Yaml] {
    y.as_vec()
        .unwrap_or_else(|| panic!("{what}: not a list: {y:?}"))
}

/// A scalar as the text a runner substitutes for it (`rep: [1, 2]` gives "1", "2").
fn scalar(y: &Yaml) -> String {
    match y {
        Yaml::String(s) => s.clone(),
        Yaml::Integer(i) => i.to_string(),
        other => panic!("not a scalar: {other:?}"),
    }
}

/// A mapping of strings, as `env:` and `variables:` are.
fn pairs(y: &Yaml, what: &str) -> Vec<(String, String)> {
    let hash = y
        .as_hash()
        .unwrap_or_else(|| panic!("{what}: not a mapping: {y:?}"));
    hash.iter().map(|(k, v)| (scalar(k), scalar(v))).collect()
}

/// True when a line of `script` runs hvprof.
fn runs_hvprof(script: &str) -> bool {
    script
        .lines()
        .any(|l| l.trim_start().starts_with("hvprof "))
}

/// A runner's work tree: `guest` (relative paths) hold the reference guest's ELF, and
/// `bin/hvprof` is this build's binary, which [`step`] puts first on PATH.
struct WorkTree {
    dir: TempDir,
}

impl WorkTree {
    fn new(tag: &str, guests: &[&str]) -> WorkTree {
        let dir = TempDir::new(tag);
        let elf = env!("HVPROF_REFGUEST_ELF");
        for g in guests {
            let at = dir.join(g);
            std::fs::create_dir_all(at.parent().unwrap()).unwrap();
            std::fs::copy(elf, &at).unwrap();
        }
        std::fs::create_dir_all(dir.join("bin")).unwrap();
        std::os::unix::fs::symlink(hvprof_bin(), dir.join("bin/hvprof")).unwrap();
        WorkTree { dir }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Runs `script` in the work tree with `env`, as a runner runs a step.
    fn step(&self, script: &str, env: &[(String, String)]) -> Output {
        let mut path = OsString::from(self.dir.join("bin"));
        path.push(":");
        path.push(std::env::var_os("PATH").unwrap_or_default());
        let mut run = bash(script).current_dir(self.path()).env("PATH", path);
        for (k, v) in env {
            run = run.env(k, v);
        }
        run.run()
    }
}

/// A run of the reference guest given as `--kernel`, which ends by writing its PASS value to
/// isa-debug-exit: hvprof's status is then 33, as with QEMU's device (a Linux guest that powers
/// off ends with 0).
fn assert_guest_passed(out: &Output) {
    out.assert_debug_exit(crate::harness::REFGUEST_PASS);
}

/// `env` with `key` set to `value`.
fn with(mut env: Vec<(String, String)>, key: &str, value: &str) -> Vec<(String, String)> {
    env.retain(|(k, _)| k != key);
    env.push((key.to_string(), value.to_string()));
    env
}

/// The outputs of `hvprof compare --markdown MD --junit XML --out DIFF`, which it writes
/// whether or not it found a regression (base and head are one guest here: 0 or 1, by chance).
fn check_comparison(out: &Output, md: &Path, xml: &Path, diff: &Path) {
    assert!(
        matches!(out.code(), Some(0 | 1)),
        "compare ended with {:?}\n{out}",
        out.code()
    );
    let md = std::fs::read_to_string(md).unwrap_or_else(|e| panic!("{}: {e}\n{out}", md.display()));
    assert!(md.contains('|'), "the Markdown has no table: {md}");
    let xml = std::fs::read_to_string(xml).unwrap();
    assert!(xml.contains("<testsuite"), "not JUnit XML: {xml}");
    assert!(
        diff.join("diff-flamegraph.svg").is_file(),
        "no diff flame graph"
    );
}

#[test]
fn the_github_actions_workflow_profiles_both_builds_then_merges_and_compares() {
    let docs = load("github-actions.yml");
    let w = &docs[0];
    assert!(
        !w["on"]["pull_request"].is_badvalue(),
        "it runs on pull requests"
    );
    let env = with(pairs(&w["env"], "env"), "GUEST_CMDLINE", CMDLINE);
    let guest = env
        .iter()
        .find(|(k, _)| k == "GUEST_KERNEL")
        .unwrap()
        .1
        .clone();
    let tree = WorkTree::new("recipe-github", &[&guest]);

    let profile = &w["jobs"]["profile"];
    let matrix = &profile["strategy"]["matrix"];
    let builds: Vec<String> = list(&matrix["build"], "build").iter().map(scalar).collect();
    let reps: Vec<String> = list(&matrix["rep"], "rep").iter().map(scalar).collect();
    assert_eq!(builds, ["base", "head"]);
    let steps = list(&profile["steps"], "profile's steps");
    let script = |s: &Yaml| s["run"].as_str().unwrap_or_default().to_string();
    assert!(
        steps
            .iter()
            .any(|s| script(s).contains("udevadm trigger --name-match=kvm")),
        "no step gives the runner /dev/kvm"
    );
    assert!(
        steps
            .iter()
            .any(|s| script(s).contains("apt-get install -y /tmp/hvprof.deb")),
        "no step installs the package"
    );
    let mut ran = 0;
    for build in &builds {
        for rep in &reps {
            let sub = |t: &str| {
                t.replace("${{ matrix.build }}", build)
                    .replace("${{ matrix.rep }}", rep)
            };
            for s in steps {
                if runs_hvprof(&script(s)) {
                    assert_guest_passed(&tree.step(&sub(&script(s)), &env));
                    ran += 1;
                }
                // upload-artifact, then download-artifact with `pattern` into `runs`: each
                // artifact in a folder of its name.
                if s["uses"].as_str() == Some("actions/upload-artifact@v4") {
                    let from = tree.path().join(sub(text(&s["with"]["path"], "path")));
                    let to = tree
                        .path()
                        .join("runs")
                        .join(sub(text(&s["with"]["name"], "name")));
                    std::fs::create_dir_all(&to).unwrap();
                    std::fs::copy(&from, to.join(from.file_name().unwrap())).unwrap();
                }
            }
        }
    }
    assert_eq!(ran, builds.len() * reps.len(), "one profile step a run");

    let compare = &w["jobs"]["compare"];
    assert_eq!(compare["needs"].as_str(), Some("profile"));
    let steps = list(&compare["steps"], "compare's steps");
    let download = steps
        .iter()
        .find(|s| s["uses"].as_str() == Some("actions/download-artifact@v4"))
        .expect("compare downloads the runs");
    assert_eq!(
        (
            download["with"]["pattern"].as_str(),
            download["with"]["path"].as_str()
        ),
        (Some("profile-*"), Some("runs"))
    );
    let summary = tree.path().join("summary.md");
    let env = with(env, "GITHUB_STEP_SUMMARY", summary.to_str().unwrap());
    let scripts: Vec<String> = steps
        .iter()
        .map(script)
        .filter(|s| runs_hvprof(s))
        .collect();
    assert_eq!(scripts.len(), 1, "one step merges and compares");
    let out = tree.step(&scripts[0], &env);
    let at = |f: &str| tree.path().join(f);
    check_comparison(&out, &at("compare.md"), &at("compare.xml"), &at("diff"));
    assert_eq!(
        std::fs::read_to_string(&summary).unwrap(),
        std::fs::read_to_string(at("compare.md")).unwrap(),
        "the job summary is the comparison"
    );
    let kept = steps
        .iter()
        .find(|s| s["if"].as_str() == Some("always()"))
        .expect("the comparison is kept whatever its outcome");
    assert!(text(&kept["with"]["path"], "path").contains("compare.xml"));
}

#[test]
fn the_gitlab_job_profiles_both_builds_then_merges_and_compares() {
    let docs = load("gitlab-ci.yml");
    let p = &docs[0];
    let env = with(
        pairs(&p["variables"], "variables"),
        "GUEST_CMDLINE",
        CMDLINE,
    );
    let guest = env
        .iter()
        .find(|(k, _)| k == "GUEST_KERNEL")
        .unwrap()
        .1
        .clone();
    let tree = WorkTree::new("recipe-gitlab", &[&guest]);
    let base = &p[".hvprof"];
    let tags: Vec<&str> = list(&base["tags"], "tags")
        .iter()
        .map(|t| text(t, "tag"))
        .collect();
    assert_eq!(tags, ["kvm"], "a runner on a KVM host");
    let install: Vec<&str> = list(&base["before_script"], "before_script")
        .iter()
        .map(|l| text(l, "before_script"))
        .collect();
    assert!(install
        .iter()
        .any(|l| l.contains("apt-get install -y -qq /tmp/hvprof.deb")));
    let script = |job: &Yaml| -> Vec<String> {
        let lines = list(&job["script"], "script").iter();
        lines
            .map(|l| text(l, "script").to_string())
            .filter(|l| runs_hvprof(l))
            .collect()
    };

    let profile = &p["profile"];
    assert_eq!(profile["extends"].as_str(), Some(".hvprof"));
    let matrix = &list(&profile["parallel"]["matrix"], "matrix")[0];
    let builds: Vec<String> = list(&matrix["BUILD"], "BUILD").iter().map(scalar).collect();
    let reps: Vec<String> = list(&matrix["REP"], "REP").iter().map(scalar).collect();
    assert_eq!(builds, ["base", "head"]);
    let lines = script(profile);
    assert_eq!(lines.len(), 1, "one hvprof line a run");
    for build in &builds {
        for rep in &reps {
            let env = with(with(env.clone(), "BUILD", build), "REP", rep);
            assert_guest_passed(&tree.step(&lines[0], &env));
            for a in list(&profile["artifacts"]["paths"], "artifacts") {
                let kept = text(a, "path")
                    .replace("$BUILD", build)
                    .replace("$REP", rep);
                assert!(tree.path().join(&kept).is_file(), "no {kept} to keep");
            }
        }
    }

    let compare = &p["compare"];
    assert_eq!(compare["stage"].as_str(), Some("compare"));
    let lines = script(compare);
    assert_eq!(lines.len(), 3, "two merges and a compare: {lines:?}");
    for line in &lines[..2] {
        tree.step(line, &env).assert_status(0);
    }
    let out = tree.step(&lines[2], &env);
    let at = |f: &str| tree.path().join(f);
    check_comparison(&out, &at("compare.md"), &at("compare.xml"), &at("diff"));
    let artifacts = &compare["artifacts"];
    assert_eq!(artifacts["when"].as_str(), Some("always"));
    assert_eq!(artifacts["reports"]["junit"].as_str(), Some("compare.xml"));
}

/// A container's `args` as the kubelet runs them: `$(NAME)` from its `env` (`values`), the
/// volumes' mount paths `/guests` and `/results` under `root`.
fn container_args(c: &Yaml, values: &[(String, String)], root: &Path) -> Vec<String> {
    let mount = |a: String| {
        for m in ["/guests", "/results"] {
            if let Some(rest) = a.strip_prefix(m) {
                return format!("{}{m}{rest}", root.display());
            }
        }
        a
    };
    list(&c["args"], "args")
        .iter()
        .map(|a| {
            let mut a = text(a, "arg").to_string();
            for (k, v) in values {
                a = a.replace(&format!("$({k})"), v);
            }
            assert!(
                !a.contains("$("),
                "{a}: a variable the container does not set"
            );
            mount(a)
        })
        .collect()
}

/// Checks what a container of these Jobs must have: no capability, no way to gain one.
fn check_unprivileged(c: &Yaml) {
    let sc = &c["securityContext"];
    let dropped: Vec<&str> = list(&sc["capabilities"]["drop"], "drop")
        .iter()
        .map(|d| text(d, "capability"))
        .collect();
    assert_eq!(dropped, ["ALL"]);
    assert_eq!(sc["allowPrivilegeEscalation"].as_bool(), Some(false));
    assert!(sc["privileged"].is_badvalue(), "a privileged container");
}

#[test]
fn the_kubernetes_jobs_fan_runs_out_then_merge_and_compare_them() {
    let docs = load("kubernetes.yaml");
    assert_eq!(docs.len(), 2, "the runs' Job and the comparison's");
    let tree = WorkTree::new(
        "recipe-kubernetes",
        &["guests/base/kernel", "guests/head/kernel"],
    );
    let runs = &docs[0];
    assert_eq!(runs["kind"].as_str(), Some("Job"));
    assert_eq!(
        runs["metadata"]["labels"]["hvprof-step"].as_str(),
        Some("runs")
    );
    let spec = &runs["spec"];
    assert_eq!(spec["completionMode"].as_str(), Some("Indexed"));
    let n = spec["completions"].as_i64().expect("completions");
    assert_eq!(spec["parallelism"].as_i64(), Some(n), "every run at once");
    let containers = list(&spec["template"]["spec"]["containers"], "containers");
    let names: Vec<&str> = containers
        .iter()
        .map(|c| text(&c["name"], "name"))
        .collect();
    assert_eq!(names, ["base", "head"]);
    for i in 0..n {
        for c in containers {
            check_unprivileged(c);
            let limits = &c["resources"]["limits"];
            assert_eq!(
                limits["devices.kubevirt.io/kvm"].as_str(),
                Some("1"),
                "/dev/kvm"
            );
            let env = list(&c["env"], "env");
            let index = env.iter().find(|e| e["name"].as_str() == Some("INDEX"));
            let field = index.map(|e| text(&e["valueFrom"]["fieldRef"]["fieldPath"], "fieldPath"));
            assert!(field.is_some_and(|f| f.contains("batch.kubernetes.io/job-completion-index")));
            let mut values: Vec<(String, String)> = env
                .iter()
                .filter_map(|e| Some((scalar(&e["name"]), e["value"].as_str()?.to_string())))
                .collect();
            values = with(values, "GUEST_CMDLINE", CMDLINE);
            values = with(values, "INDEX", &i.to_string());
            let args = container_args(c, &values, tree.path());
            assert_guest_passed(&hvprof(&args).run());
        }
    }

    let compare = &docs[1];
    assert_eq!(
        compare["metadata"]["labels"]["hvprof-step"].as_str(),
        Some("compare")
    );
    let pod = &compare["spec"]["template"]["spec"];
    let inits = list(&pod["initContainers"], "initContainers");
    for (c, build) in inits.iter().zip(["base", "head"]) {
        check_unprivileged(c);
        let args = container_args(c, &[], tree.path());
        let root = tree.path().display().to_string();
        let inputs: Vec<String> = (0..n)
            .map(|i| format!("{root}/results/{build}/{i}/profile.json"))
            .collect();
        assert_eq!(
            args[..3],
            ["merge", "--out", &format!("{root}/results/{build}.json")]
        );
        assert_eq!(args[3..], inputs, "merge takes every run of {build}");
        hvprof(&args).run().assert_status(0);
    }
    let c = &list(&pod["containers"], "containers")[0];
    check_unprivileged(c);
    let out = hvprof(container_args(c, &[], tree.path())).run();
    let at = |f: &str| tree.path().join("results").join(f);
    check_comparison(&out, &at("compare.md"), &at("compare.xml"), &at("diff"));
}

/// One HTTP request as a server received it.
struct Request {
    head: String,
    body: Vec<u8>,
}

/// Takes one HTTP/1.1 request on a loopback port and answers it 200 with `{}`, as Pyroscope's
/// and Parca's ingest endpoints answer an accepted profile: the port, and the request.
fn stand_in() -> (u16, std::thread::JoinHandle<Request>) {
    use std::io::{BufRead, BufReader, Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let served = std::thread::spawn(move || {
        let (stream, _) = listener.accept().unwrap();
        let mut reader = BufReader::new(stream.try_clone().unwrap());
        let mut head = String::new();
        loop {
            let mut line = String::new();
            reader.read_line(&mut line).unwrap();
            if line == "\r\n" || line.is_empty() {
                break;
            }
            head.push_str(&line);
        }
        let header = |name: &str| {
            head.lines().find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.eq_ignore_ascii_case(name).then(|| v.trim().to_string())
            })
        };
        let mut out = stream;
        if header("expect").is_some_and(|e| e.eq_ignore_ascii_case("100-continue")) {
            out.write_all(b"HTTP/1.1 100 Continue\r\n\r\n").unwrap();
        }
        let length: usize = header("content-length")
            .and_then(|l| l.parse().ok())
            .unwrap_or(0);
        let mut body = vec![0; length];
        reader.read_exact(&mut body).unwrap();
        out.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}")
            .unwrap();
        Request { head, body }
    });
    (port, served)
}

/// `%XX` sequences of a URL's query decoded (`+` is left as it is: curl encodes a space as
/// `%20`).
fn percent_decoded(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        match (b[i], s.get(i + 1..i + 3).map(|h| u8::from_str_radix(h, 16))) {
            (b'%', Some(Ok(v))) => {
                out.push(v);
                i += 3;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8(out).unwrap()
}

/// The ```sh blocks of docs/regression.md that contain `needle`.
fn doc_commands(needle: &str) -> Vec<String> {
    let doc = std::fs::read_to_string(workspace_root().join("docs/regression.md")).unwrap();
    let blocks = doc
        .split("```sh\n")
        .skip(1)
        .map(|b| b.split("```").next().unwrap_or(""));
    blocks
        .filter(|b| b.contains(needle))
        .map(str::to_string)
        .collect()
}

#[test]
fn the_documented_uploads_send_the_profile_as_pyroscope_and_parca_take_it() {
    let tree = WorkTree::new("recipe-uploads", &["guest/kernel"]);
    let kernel = tree.path().join("guest/kernel");
    let out = tree.path().join("out/head");
    let args = [
        "profile",
        "--kernel",
        kernel.to_str().unwrap(),
        "--cmdline",
        CMDLINE,
    ];
    let args = args
        .into_iter()
        .chain(["--quiet", "--out", out.to_str().unwrap()]);
    assert_guest_passed(&hvprof(args).run());
    let pb = std::fs::read(out.join("profile.pb.gz")).unwrap();
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();

    let pyroscope = doc_commands("/ingest");
    assert_eq!(pyroscope.len(), 1, "one Pyroscope upload");
    let (port, served) = stand_in();
    let local = format!("http://127.0.0.1:{port}");
    let run = tree.step(&pyroscope[0].replace("http://pyroscope:4040", &local), &[]);
    run.assert_status(0);
    let got = served.join().unwrap();
    let line = got.head.lines().next().unwrap();
    let target = line
        .strip_prefix("POST ")
        .and_then(|l| l.strip_suffix(" HTTP/1.1"));
    let (path, query) = target.and_then(|t| t.split_once('?')).expect(line);
    assert_eq!(path, "/ingest");
    let query: Vec<String> = query.split('&').map(percent_decoded).collect();
    let name = format!("name=hvprof{{build=head,host={}}}", host.trim());
    assert_eq!(query, ["format=pprof", name.as_str()]);
    assert!(got.body == pb, "the body is profile.pb.gz as it is");

    let parca = doc_commands("/api/profiles/writeraw");
    assert_eq!(parca.len(), 1, "one Parca upload");
    let (port, served) = stand_in();
    let local = format!("http://127.0.0.1:{port}");
    tree.step(&parca[0].replace("http://parca:7070", &local), &[])
        .assert_status(0);
    let got = served.join().unwrap();
    assert!(
        got.head
            .starts_with("POST /api/profiles/writeraw HTTP/1.1\r\n"),
        "{}",
        got.head
    );
    let v: serde_json::Value = serde_json::from_slice(&got.body).expect("a JSON body");
    let series = &v["series"][0];
    let labels: Vec<(&str, &str)> = (series["labels"]["labels"].as_array().unwrap().iter())
        .map(|l| (l["name"].as_str().unwrap(), l["value"].as_str().unwrap()))
        .collect();
    assert_eq!(labels, [("__name__", "hvprof"), ("build", "head")]);
    let raw = series["samples"][0]["rawProfile"].as_str().unwrap();
    let encoded = tree.dir.write("raw.b64", raw.as_bytes());
    let decoded = std::process::Command::new("base64")
        .arg("-d")
        .arg(&encoded)
        .output()
        .unwrap();
    assert!(
        decoded.status.success() && decoded.stdout == pb,
        "rawProfile is profile.pb.gz"
    );
}
