//! `--symbol-path` end to end: the reference guest runs the PE module of tests/stacks.rs
//! (`scenario=pestacks`, built here with clang and lld-link), hvprof finds it in guest memory,
//! and its functions are named from the PDB its CodeView record names, found through a
//! symbol path: a plain directory in symbol-server layout, a symbol server on loopback
//! (served by the test), `_NT_SYMBOL_PATH`, and after the run with `hvprof report`. A PDB the
//! path lacks is named by GUID and age. Never against a real symbol server.
//!
//! Needs Debian's `clang`, `lld`, `llvm` and `golang-go`.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::harness::{hvprof, pprof, Hvprof, Output, TempDir};
use crate::stacks::{build_pe, PeModule};

/// A short pestacks run with the module, its output in `out`, plus `extra` arguments.
pub(crate) fn profile(pe: &PeModule, out: &Path, extra: &[&str]) -> Hvprof {
    let mut args = vec![
        "profile",
        "--cmdline",
        "scenario=pestacks stacks.ms=1000",
        "--cpl",
        "3",
        "--quiet",
        "--initrd",
        pe.exe.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ];
    args.extend(extra);
    hvprof(args)
}

/// The module's functions are named in report.txt and by `go tool pprof -top`.
fn assert_named(out: &Path) {
    let text = std::fs::read_to_string(out.join("report.txt")).unwrap();
    assert!(text.contains("stacks!pe_leaf"), "{text}");
    assert!(!text.contains("Symbols not found"), "{text}");
    let (top, _) = pprof(out, "-top", &[]);
    assert!(top.contains("pe_leaf"), "pprof -top names pe_leaf\n{top}");
}

/// `text` names the module's PDB by name, GUID and age.
fn assert_names_missing(pe: &PeModule, text: &str) {
    let r = pe.pdb_ref();
    let want = format!("stacks: {} GUID {} age {}", r.name, r.id.guid, r.id.age);
    assert!(text.contains(&want), "{want:?} in\n{text}");
}

#[test]
fn a_symbol_server_layout_directory_names_the_module() {
    let dir = TempDir::new("sympath-dir");
    let pe = build_pe(&dir);
    let store = dir.join("store");
    pe.store_pdb(&store);
    let out = dir.join("out");
    profile(&pe, &out, &["--symbol-path", store.to_str().unwrap()])
        .run()
        .assert_status(0);
    assert_named(&out);
}

/// Serves the files of `root` over HTTP/1.1 on loopback (404 for what it lacks), recording
/// each request's path.
struct Server {
    url: String,
    requests: Arc<Mutex<Vec<String>>>,
}

impl Server {
    fn serve(root: PathBuf) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/", listener.local_addr().unwrap());
        let requests = Arc::new(Mutex::new(Vec::new()));
        let seen = requests.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut line = String::new();
                let _ = reader.read_line(&mut line);
                let path = line.split_whitespace().nth(1).unwrap_or("/").to_string();
                let mut header = String::new();
                while reader.read_line(&mut header).is_ok_and(|n| n > 2) {
                    header.clear();
                }
                seen.lock().unwrap().push(path.clone());
                let file = root.join(path.trim_start_matches('/'));
                let (status, body) = match std::fs::read(&file) {
                    Ok(b) if !path.contains("..") => ("200 OK", b),
                    _ => ("404 Not Found", Vec::new()),
                };
                let head = format!(
                    "HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    body.len()
                );
                let _ = stream.write_all(head.as_bytes());
                let _ = stream.write_all(&body);
            }
        });
        Server { url, requests }
    }

    fn requests(&self) -> Vec<String> {
        self.requests.lock().unwrap().clone()
    }
}

#[test]
fn a_symbol_server_on_loopback_fills_the_cache() {
    let dir = TempDir::new("sympath-http");
    let pe = build_pe(&dir);
    let served = dir.join("served");
    pe.store_pdb(&served);
    let server = Server::serve(served);
    let cache = dir.join("cache");
    let out = dir.join("out");
    let path = format!("srv*{}*{}", cache.display(), server.url);
    profile(&pe, &out, &["--symbol-path", &path])
        .run()
        .assert_status(0);
    assert_named(&out);
    let r = pe.pdb_ref();
    let key = r.id.key();
    assert_eq!(
        server.requests(),
        [format!("/{0}/{key}/{0}", r.name)],
        "one request, at the symbol-server path"
    );
    let cached = cache.join(&r.name).join(&key).join(&r.name);
    assert_eq!(
        std::fs::read(&cached).unwrap(),
        std::fs::read(&pe.pdb).unwrap()
    );
}

#[test]
fn a_pdb_missing_from_the_symbol_path_is_named_by_guid_and_age() {
    let dir = TempDir::new("sympath-missing");
    let pe = build_pe(&dir);
    let empty = dir.join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    let out = dir.join("out");
    let run: Output = profile(&pe, &out, &["--symbol-path", empty.to_str().unwrap()]).run();
    run.assert_status(0)
        .assert_stderr_contains("hvprof: symbols not found for 1 PDB(s):");
    assert_names_missing(&pe, &run.stderr);
    let text = std::fs::read_to_string(out.join("report.txt")).unwrap();
    assert!(text.contains("Symbols not found:"), "{text}");
    let r = pe.pdb_ref();
    let row = format!("{} {} {}", r.name, r.id.guid, r.id.age);
    let squeezed: Vec<String> = text
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect();
    assert!(
        squeezed
            .iter()
            .any(|l| l.starts_with(&format!("stacks {row}"))),
        "{row:?} in\n{text}"
    );
}

/// A run without symbols, named afterwards by `hvprof report` (and `compare`) through a
/// symbol path; and `_NT_SYMBOL_PATH` standing in for `--symbol-path`.
#[test]
fn a_saved_profile_is_named_by_report_and_compare_and_the_environment_variable_works() {
    let dir = TempDir::new("sympath-report");
    let pe = build_pe(&dir);
    let store = dir.join("store");
    pe.store_pdb(&store);
    let out = dir.join("out");
    profile(&pe, &out, &[]).run().assert_status(0);
    let bare = std::fs::read_to_string(out.join("report.txt")).unwrap();
    assert!(
        !bare.contains("pe_leaf"),
        "no symbols without a path\n{bare}"
    );

    let json = out.join("profile.json");
    let named = dir.join("named");
    hvprof([
        "report",
        json.to_str().unwrap(),
        "--symbol-path",
        &format!("srv*{}", store.display()),
        "--out",
        named.to_str().unwrap(),
    ])
    .run()
    .assert_status(0)
    .assert_stdout_contains("stacks!pe_leaf");
    assert_named(&named);

    hvprof(["compare", json.to_str().unwrap(), json.to_str().unwrap()])
        .env("_NT_SYMBOL_PATH", &store)
        .run()
        .assert_status(0)
        .assert_stdout_contains("pe_leaf");

    let env_out = dir.join("env");
    profile(&pe, &env_out, &[])
        .env("_NT_SYMBOL_PATH", format!(";{};", store.display()))
        .run()
        .assert_status(0);
    assert_named(&env_out);

    let bad = hvprof(["report", json.to_str().unwrap()])
        .env("_NT_SYMBOL_PATH", "srv*ftp://host/x")
        .run();
    bad.assert_status(2);
    bad.assert_error_line(&["_NT_SYMBOL_PATH", "srv*ftp://host/x"]);
}

/// TimeDateStamp and SizeOfImage from a PE file's headers (the file header follows the
/// `PE\0\0` signature at e_lfanew; SizeOfImage is 56 bytes into the optional header).
fn image_key(exe: &[u8]) -> String {
    let u32_at = |o: usize| u32::from_le_bytes(exe[o..o + 4].try_into().unwrap());
    let pe = usize::try_from(u32_at(0x3c)).unwrap();
    assert_eq!(&exe[pe..pe + 4], b"PE\0\0");
    format!("{:08X}{:X}", u32_at(pe + 8), u32_at(pe + 24 + 56))
}

/// `report --annotate` disassembles a module found in guest memory from its image, found
/// in the store by its export name, TimeDateStamp and SizeOfImage; with its PDB alone there
/// are no code bytes to show.
#[test]
fn report_annotate_disassembles_a_guest_module_from_its_image_in_the_store() {
    let dir = TempDir::new("sympath-image");
    let pe = crate::stacks::build_pe_with(&dir, &["/export:pe_round"]);
    let store = dir.join("store");
    pe.store_pdb(&store);
    let out = dir.join("out");
    profile(&pe, &out, &[]).run().assert_status(0);
    let json = out.join("profile.json");
    let annotate = || {
        let run = hvprof([
            "report",
            json.to_str().unwrap(),
            "--annotate",
            "--top",
            "3",
            "--symbol-path",
            &format!("srv*{}", store.display()),
        ])
        .run();
        run.assert_status(0)
            .assert_stdout_contains("stacks.exe!pe_leaf");
        run
    };
    annotate().assert_stdout_contains("(no code bytes for this address in stacks.exe)");

    let exe = std::fs::read(&pe.exe).unwrap();
    let slot = store.join("stacks.exe").join(image_key(&exe));
    std::fs::create_dir_all(&slot).unwrap();
    std::fs::copy(&pe.exe, slot.join("stacks.exe")).unwrap();
    let listed = annotate();
    listed.assert_stdout_lacks("no code bytes");
    // The hot loop of pe_leaf (see stacks.c): instruction rows with counts.
    assert!(
        listed
            .stdout
            .lines()
            .any(|l| l.starts_with('>') && l.contains("0x000000004030")),
        "a hot instruction row\n{listed}"
    );
}
