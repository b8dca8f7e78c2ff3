//! Test harness for the full-guest tests (tier 3): builds the fixture kernels
//! in tests/fixtures/ with binutils, runs the `hvprof` binary with a
//! wall-clock limit enforced here, and asserts on its exit status and output
//! with messages that show everything the run printed.

pub mod host;
pub mod pe;

use std::collections::HashMap;
use std::ffi::OsString;
use std::fmt;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

/// hvprof's own exit statuses (the CLI contract).
pub mod status {
    /// Clean end: guest reset via the i8042 or ACPI power-off.
    pub const CLEAN: i32 = 0;
    /// Usage or configuration error.
    pub const USAGE: i32 = 2;
    /// Guest crashed (triple fault, KVM shutdown, internal error).
    pub const CRASHED: i32 = 4;
    /// All vCPUs halted with interrupts disabled.
    pub const HUNG: i32 = 6;
    /// `--timeout` reached.
    pub const TIMED_OUT: i32 = 8;
    /// Stopped by SIGINT or SIGTERM.
    pub const SIGNALLED: i32 = 10;

    /// The status of a run whose guest wrote `v` to isa-debug-exit.
    pub fn debug_exit(v: u8) -> i32 {
        (i32::from(v) << 1) | 1
    }
}

/// The prefix of hvprof's one-line error messages on stderr.
pub const ERROR_PREFIX: &str = "hvprof: error: ";

/// The value the fixtures write to isa-debug-exit when all their checks pass.
pub const FIXTURE_OK: u8 = 0x21;
/// The value the reference guest writes to isa-debug-exit when its scenario passed.
pub const REFGUEST_PASS: u8 = 0x10;

/// Path of the hvprof binary under test.
pub fn hvprof_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_hvprof"))
}

/// The workspace root: the test binary is declared by the `hvprof` package, whose
/// manifest directory is vmm/hvprof/; the tests, fixtures and docs live above it.
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn fixtures_src_dir() -> PathBuf {
    workspace_root().join("tests/fixtures")
}

// ---------------------------------------------------------------- temp dirs

/// A directory removed (recursively) when dropped.
pub struct TempDir {
    path: PathBuf,
}

impl TempDir {
    /// Creates a fresh directory under the system temp dir.
    pub fn new(tag: &str) -> TempDir {
        static COUNTER: AtomicU32 = AtomicU32::new(0);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let path =
            std::env::temp_dir().join(format!("hvprof-test-{}-{}-{}", tag, std::process::id(), n));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path)
            .unwrap_or_else(|e| panic!("creating {}: {e}", path.display()));
        TempDir { path }
    }

    /// The directory's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A path inside the directory.
    pub fn join(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }

    /// Writes `contents` to `name` inside the directory and returns its path.
    pub fn write(&self, name: &str, contents: &[u8]) -> PathBuf {
        let p = self.join(name);
        std::fs::write(&p, contents).unwrap_or_else(|e| panic!("writing {}: {e}", p.display()));
        p
    }

    /// A directory that a `static` holds (several tests' shared runs), which is never dropped:
    /// removed when the test process exits instead (unless `HVPROF_TEST_KEEP` is set).
    pub fn for_process(tag: &str) -> TempDir {
        static AT_EXIT: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());
        extern "C" fn remove_all() {
            if std::env::var_os("HVPROF_TEST_KEEP").is_some() {
                return;
            }
            let paths = AT_EXIT.lock().map(|mut p| std::mem::take(&mut *p));
            for p in paths.unwrap_or_default() {
                let _ = std::fs::remove_dir_all(p);
            }
        }
        let dir = TempDir::new(tag);
        let mut paths = AT_EXIT.lock().unwrap_or_else(|e| e.into_inner());
        if paths.is_empty() {
            // SAFETY: `remove_all` is a plain function that lives as long as the process and
            // touches only this module's static; atexit copies the pointer.
            unsafe { libc::atexit(remove_all) };
        }
        paths.push(dir.path.clone());
        dir
    }
}

impl Drop for TempDir {
    /// Removes the directory, unless `HVPROF_TEST_KEEP` is set: then it stays, and its path is
    /// printed, for a look at what a guest test's run wrote (its profile, its report).
    fn drop(&mut self) {
        if std::env::var_os("HVPROF_TEST_KEEP").is_some() {
            eprintln!("kept {}", self.path.display());
            return;
        }
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

// ----------------------------------------------------------------- fixtures

/// A fixture kernel to build from tests/fixtures/.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Fixture {
    /// ELF32 PVH kernel checking hvm_start_info (pvh32.S).
    Pvh32,
    /// The same as an ELF64 object with a 32-bit entry (pvh64.S).
    Pvh64,
    /// pvh32.S linked at 0x6000, over the PVH start info hvprof writes there.
    Pvh32OverStartInfo,
    /// Multiboot 1 ELF32 kernel (multiboot.S).
    Multiboot,
    /// Multiboot 1 flat binary using the a.out kludge, header flag bit 16.
    MultibootAout,
    /// The Multiboot 1 ELF32 kernel linked at 0x8000, below the VMM's usual boot structures'
    /// neighbours (kvm-unit-tests' realmode test loads there).
    MultibootLow,
    /// PVH kernel that triple-faults (triple_fault.S).
    TripleFault,
    /// PVH kernel that halts with interrupts disabled (cli_hlt.S).
    CliHlt,
    /// PVH kernel that busy-loops forever with interrupts enabled (spin.S).
    Spin,
    /// PVH kernel that halts forever with interrupts enabled (idle.S).
    Idle,
    /// PVH kernel that resets through the i8042 (reset.S).
    Reset,
    /// PVH kernel that writes `value` to isa-debug-exit with a `width`-byte
    /// access (debug_exit.S).
    DebugExit { value: u8, width: u8 },
    /// PVH kernel that drives a virtio-blk PCI device (virtio_blk.S); `readonly`
    /// expects the device to refuse writes, `ring` negotiates indirect descriptors and
    /// event indexes.
    VirtioBlk { readonly: bool, ring: bool },
    /// PVH kernel that runs `loops` iterations of a plain integer loop at CPL0, then exits
    /// with 0x21 (calibrate.S): the measure of this host's speed (harness::host).
    Calibrate { loops: u32 },
}

/// The fixture symbol that sets a multiboot kernel's load address (given to the linker).
const LOAD_ADDR: &str = "LOAD_ADDR=";

enum Format {
    Elf32Pvh,
    Elf64Pvh,
    Elf32Multiboot,
    FlatMultiboot,
}

impl Fixture {
    fn recipe(self) -> (&'static str, Format, Vec<String>) {
        match self {
            Fixture::Pvh32 => ("pvh32", Format::Elf32Pvh, vec![]),
            Fixture::Pvh32OverStartInfo => (
                "pvh32",
                Format::Elf32Pvh,
                vec![format!("{LOAD_ADDR}0x6000")],
            ),
            Fixture::Pvh64 => ("pvh64", Format::Elf64Pvh, vec![]),
            Fixture::Multiboot => ("multiboot", Format::Elf32Multiboot, vec![]),
            Fixture::MultibootAout => ("multiboot", Format::FlatMultiboot, vec!["AOUT=1".into()]),
            Fixture::MultibootLow => (
                "multiboot",
                Format::Elf32Multiboot,
                vec![format!("{LOAD_ADDR}0x8000")],
            ),
            Fixture::TripleFault => ("triple_fault", Format::Elf32Pvh, vec![]),
            Fixture::CliHlt => ("cli_hlt", Format::Elf32Pvh, vec![]),
            Fixture::Spin => ("spin", Format::Elf32Pvh, vec![]),
            Fixture::Idle => ("idle", Format::Elf32Pvh, vec![]),
            Fixture::Reset => ("reset", Format::Elf32Pvh, vec![]),
            Fixture::VirtioBlk { readonly, ring } => (
                "virtio_blk",
                Format::Elf32Pvh,
                [(readonly, "READONLY=1"), (ring, "RING=1")]
                    .into_iter()
                    .filter(|&(on, _)| on)
                    .map(|(_, d)| d.to_string())
                    .collect(),
            ),
            Fixture::Calibrate { loops } => (
                "calibrate",
                Format::Elf32Pvh,
                vec![format!("LOOPS={loops}")],
            ),
            Fixture::DebugExit { value, width } => (
                "debug_exit",
                Format::Elf32Pvh,
                vec![format!("VALUE={value:#x}"), format!("WIDTH={width}")],
            ),
        }
    }

    fn file_name(self) -> String {
        let (src, format, defsyms) = self.recipe();
        let mut name = src.to_string();
        for d in &defsyms {
            name.push('-');
            name.extend(
                d.chars()
                    .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }),
            );
        }
        name.push_str(match format {
            Format::FlatMultiboot => ".bin",
            _ => ".elf",
        });
        name
    }
}

struct FixtureCache {
    dir: PathBuf,
    built: Mutex<HashMap<Fixture, PathBuf>>,
}

fn fixture_cache() -> &'static FixtureCache {
    static CACHE: OnceLock<FixtureCache> = OnceLock::new();
    CACHE.get_or_init(|| {
        // Cargo's scratch dir for integration tests (under target/), one
        // subdirectory per test binary. Kernels are renamed into place once
        // built, so concurrent runs of the same binary cannot see half a file.
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("fixtures-{}", env!("CARGO_CRATE_NAME")));
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("creating {}: {e}", dir.display()));
        FixtureCache {
            dir,
            built: Mutex::new(HashMap::new()),
        }
    })
}

/// Builds a fixture kernel (once per test process) and returns its path.
///
/// Kernels go to `target/tmp/fixtures-<test binary>/`, a few KiB each.
pub fn fixture(f: Fixture) -> PathBuf {
    let cache = fixture_cache();
    let mut built = cache.built.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(p) = built.get(&f) {
        return p.clone();
    }
    let (src, format, defsyms) = f.recipe();
    let src_dir = fixtures_src_dir();
    let name = f.file_name();
    let out = cache.dir.join(&name);
    let tmp = |ext: &str| {
        cache
            .dir
            .join(format!("{name}.{}.{ext}", std::process::id()))
    };
    let (obj, linked, staged) = (tmp("o"), tmp("linked"), tmp("staged"));

    let mut as_args: Vec<OsString> = vec![
        if let Format::Elf64Pvh = format {
            "--64"
        } else {
            "--32"
        }
        .into(),
        "-I".into(),
        src_dir.clone().into(),
    ];
    // LOAD_ADDR is the linker's; the other symbols are the assembler's.
    let (ld_syms, as_syms): (Vec<&String>, Vec<&String>) =
        defsyms.iter().partition(|d| d.starts_with(LOAD_ADDR));
    for d in as_syms {
        as_args.extend(["--defsym".into(), d.into()]);
    }
    as_args.extend([
        "-o".into(),
        obj.clone().into(),
        src_dir.join(format!("{src}.S")).into(),
    ]);
    tool("as", "binutils", &as_args);

    let (emulation, script) = match format {
        Format::Elf32Pvh => ("elf_i386", "pvh.ld"),
        Format::Elf64Pvh => ("elf_x86_64", "pvh.ld"),
        Format::Elf32Multiboot | Format::FlatMultiboot => ("elf_i386", "multiboot.ld"),
    };
    tool::<OsString>(
        "ld",
        "binutils",
        &[
            "-m".into(),
            emulation.into(),
            "-z".into(),
            "max-page-size=0x1000".into(),
            "--no-warn-rwx-segments".into(),
        ]
        .into_iter()
        .chain(
            ld_syms
                .iter()
                .flat_map(|d| ["--defsym".into(), OsString::from(d)]),
        )
        .chain([
            "-T".into(),
            src_dir.join(script).into(),
            "-o".into(),
            linked.clone().into(),
            obj.clone().into(),
        ])
        .collect::<Vec<OsString>>(),
    );
    if let Format::FlatMultiboot = format {
        tool::<OsString>(
            "objcopy",
            "binutils",
            &[
                "-O".into(),
                "binary".into(),
                linked.clone().into(),
                staged.clone().into(),
            ],
        );
        let _ = std::fs::remove_file(&linked);
    } else {
        std::fs::rename(&linked, &staged).expect("renaming the linked kernel");
    }
    let _ = std::fs::remove_file(&obj);
    std::fs::rename(&staged, &out)
        .unwrap_or_else(|e| panic!("renaming {} to {}: {e}", staged.display(), out.display()));
    built.insert(f, out.clone());
    out
}

// ------------------------------------------------------------------ running

/// Default wall-clock limit for one hvprof run, enforced by the harness.
pub const DEFAULT_LIMIT: Duration = Duration::from_secs(60);

/// A builder for one hvprof invocation.
pub struct Hvprof {
    cmd: Command,
    env: Vec<String>,
    args: Vec<String>,
    limit: Duration,
    note: Option<String>,
}

/// Starts building an invocation of `hvprof` with the given arguments.
pub fn hvprof<I, S>(args: I) -> Hvprof
where
    I: IntoIterator<Item = S>,
    S: AsRef<std::ffi::OsStr>,
{
    let mut cmd = Command::new(hvprof_bin());
    // A symbol path of whoever runs the tests must not send them to a symbol server.
    cmd.env_remove("_NT_SYMBOL_PATH");
    let mut shown = Vec::new();
    for a in args {
        shown.push(a.as_ref().to_string_lossy().into_owned());
        cmd.arg(a.as_ref());
    }
    Hvprof {
        cmd,
        env: Vec::new(),
        args: shown,
        limit: DEFAULT_LIMIT,
        note: None,
    }
}

/// Starts building a run of `script` by bash as CI runners run a step's script (`-eo
/// pipefail`, no profile or rc file), bounded and reported as hvprof's runs are.
pub fn bash(script: &str) -> Hvprof {
    let mut cmd = Command::new("bash");
    cmd.args(["--noprofile", "--norc", "-eo", "pipefail", "-c", script]);
    cmd.env_remove("_NT_SYMBOL_PATH");
    Hvprof {
        cmd,
        env: Vec::new(),
        args: vec!["bash -c".to_string(), script.to_string()],
        limit: DEFAULT_LIMIT,
        note: None,
    }
}

/// `hvprof run --kernel KERNEL` followed by `extra`.
pub fn hvprof_run<S: AsRef<std::ffi::OsStr>>(kernel: &Path, extra: &[S]) -> Hvprof {
    let mut args: Vec<std::ffi::OsString> = vec!["run".into(), "--kernel".into(), kernel.into()];
    args.extend(extra.iter().map(|s| s.as_ref().to_os_string()));
    hvprof(args)
}

impl Hvprof {
    /// Sets the harness's wall-clock limit: past it the run is killed and the
    /// test fails with the output so far.
    pub fn limit(mut self, limit: Duration) -> Hvprof {
        self.limit = limit;
        self
    }

    /// Sets the harness's limit from a limit derived from this host's measured speed, whose
    /// derivation every failure message then shows.
    pub fn host_limit(mut self, limit: &host::Limit) -> Hvprof {
        self.limit = limit.harness;
        self.note = Some(limit.why.clone());
        self
    }

    /// Sets an environment variable for hvprof.
    pub fn env(mut self, key: &str, value: impl AsRef<std::ffi::OsStr>) -> Hvprof {
        self.env
            .push(format!("{key}={}", value.as_ref().to_string_lossy()));
        self.cmd.env(key, value);
        self
    }

    /// Runs it in `dir`.
    pub fn current_dir(mut self, dir: &Path) -> Hvprof {
        self.cmd.current_dir(dir);
        self
    }

    /// Starts hvprof without waiting for it.
    pub fn spawn(mut self) -> Running {
        self.cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let started = Instant::now();
        let mut child = self
            .cmd
            .spawn()
            .unwrap_or_else(|e| panic!("starting {:?}: {e}", self.cmd.get_program()));
        let stdout = Arc::new(Mutex::new(Vec::new()));
        let stderr = Arc::new(Mutex::new(Vec::new()));
        let readers = vec![
            pump(child.stdout.take().expect("piped stdout"), stdout.clone()),
            pump(child.stderr.take().expect("piped stderr"), stderr.clone()),
        ];
        Running {
            child,
            env: self.env,
            args: self.args,
            limit: self.limit,
            note: self.note,
            started,
            stdout,
            stderr,
            readers,
        }
    }

    /// Runs hvprof to completion (within the limit) and returns the result.
    pub fn run(self) -> Output {
        self.spawn().wait()
    }
}

fn pump<R: Read + Send + 'static>(mut r: R, buf: Arc<Mutex<Vec<u8>>>) -> JoinHandle<()> {
    thread::spawn(move || {
        let mut chunk = [0u8; 4096];
        loop {
            match r.read(&mut chunk) {
                Ok(0) | Err(_) => break,
                Ok(n) => buf
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .extend_from_slice(&chunk[..n]),
            }
        }
    })
}

/// A running hvprof process.
pub struct Running {
    child: Child,
    env: Vec<String>,
    args: Vec<String>,
    limit: Duration,
    note: Option<String>,
    started: Instant,
    stdout: Arc<Mutex<Vec<u8>>>,
    stderr: Arc<Mutex<Vec<u8>>>,
    readers: Vec<JoinHandle<()>>,
}

impl Running {
    /// Stdout captured so far.
    pub fn stdout_so_far(&self) -> String {
        String::from_utf8_lossy(&self.stdout.lock().unwrap_or_else(|e| e.into_inner())).into_owned()
    }

    /// Stderr captured so far.
    pub fn stderr_so_far(&self) -> String {
        String::from_utf8_lossy(&self.stderr.lock().unwrap_or_else(|e| e.into_inner())).into_owned()
    }

    /// Waits until stdout contains `needle`; kills hvprof and fails the test
    /// if it exits first or `within` passes.
    pub fn wait_for_stdout(&mut self, needle: &str, within: Duration) {
        let deadline = Instant::now() + within;
        loop {
            if self.stdout_so_far().contains(needle) {
                return;
            }
            if let Ok(Some(st)) = self.child.try_wait() {
                let out = self.finish(Some(st), false);
                panic!("hvprof exited before printing {needle:?}\n{out}");
            }
            if Instant::now() >= deadline {
                let _ = self.child.kill();
                let out = self.finish(None, true);
                panic!("hvprof did not print {needle:?} within {within:?}\n{out}");
            }
            thread::sleep(Duration::from_millis(20));
        }
    }

    /// hvprof's process id (valid until [`Running::wait`] reaps it).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends a signal (e.g. `libc::SIGTERM`) to hvprof.
    pub fn signal(&self, sig: i32) {
        let pid = i32::try_from(self.child.id()).expect("pid fits in pid_t");
        // SAFETY: kill(2) takes no pointers; the pid is our own child, which
        // has not been reaped yet (we hold its `Child` and have not waited on
        // it), so it cannot name another process.
        let rc = unsafe { libc::kill(pid, sig) };
        assert_eq!(
            rc,
            0,
            "kill({pid}, {sig}): {}",
            std::io::Error::last_os_error()
        );
    }

    /// Waits for hvprof to exit. Past the limit it is killed and the test fails.
    pub fn wait(mut self) -> Output {
        loop {
            match self.child.try_wait() {
                Ok(Some(st)) => return self.finish(Some(st), false),
                Ok(None) => {}
                Err(e) => panic!("waiting for hvprof: {e}"),
            }
            if self.started.elapsed() >= self.limit {
                let _ = self.child.kill();
                let out = self.finish(None, true);
                panic!(
                    "hvprof still running after the harness limit of {:?}; killed it\n{out}",
                    self.limit
                );
            }
            thread::sleep(Duration::from_millis(10));
        }
    }

    fn finish(&mut self, status: Option<ExitStatus>, killed: bool) -> Output {
        let status = match status {
            Some(s) => s,
            None => self.child.wait().expect("reaping hvprof"),
        };
        let elapsed = self.started.elapsed();
        for r in self.readers.drain(..) {
            let _ = r.join();
        }
        Output {
            env: self.env.clone(),
            args: self.args.clone(),
            note: self.note.clone(),
            status,
            killed,
            elapsed,
            stdout: self.stdout_so_far(),
            stderr: self.stderr_so_far(),
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        // A test that panicked mid-run must not leave a guest spinning.
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The result of one hvprof run.
pub struct Output {
    /// Environment variables set for it (`KEY=VALUE`).
    pub env: Vec<String>,
    /// Arguments hvprof was given.
    pub args: Vec<String>,
    /// How its time limit was derived from this host's speed, when it was.
    pub note: Option<String>,
    /// How it exited.
    pub status: ExitStatus,
    /// Whether the harness killed it.
    pub killed: bool,
    /// Wall time from spawn to exit.
    pub elapsed: Duration,
    /// Everything it wrote to stdout.
    pub stdout: String,
    /// Everything it wrote to stderr.
    pub stderr: String,
}

impl fmt::Display for Output {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let env: String = self.env.iter().map(|e| format!("{e} ")).collect();
        writeln!(f, "---- {env}hvprof {}", self.args.join(" "))?;
        writeln!(
            f,
            "---- exit: {} after {:.2?}{}",
            self.status,
            self.elapsed,
            if self.killed {
                " (killed by the harness)"
            } else {
                ""
            }
        )?;
        if let Some(note) = &self.note {
            writeln!(f, "---- time limit: {note}")?;
        }
        writeln!(f, "---- stdout:\n{}", self.stdout)?;
        write!(f, "---- stderr:\n{}\n---- end", self.stderr)
    }
}

impl Output {
    /// The exit code, or None if hvprof died of a signal.
    pub fn code(&self) -> Option<i32> {
        self.status.code()
    }

    /// Asserts the exit code.
    pub fn assert_status(&self, expected: i32) -> &Output {
        assert_eq!(
            self.code(),
            Some(expected),
            "expected hvprof to exit with status {expected}\n{self}"
        );
        self
    }

    /// Asserts that the guest wrote `v` to isa-debug-exit.
    pub fn assert_debug_exit(&self, v: u8) -> &Output {
        assert_eq!(
            self.code(),
            Some(status::debug_exit(v)),
            "expected status (({v:#x} << 1) | 1) = {} from isa-debug-exit\n{self}",
            status::debug_exit(v)
        );
        self
    }

    /// Asserts that stdout contains `needle`.
    pub fn assert_stdout_contains(&self, needle: &str) -> &Output {
        assert!(
            self.stdout.contains(needle),
            "stdout lacks {needle:?}\n{self}"
        );
        self
    }

    /// Asserts that stdout does not contain `needle`.
    pub fn assert_stdout_lacks(&self, needle: &str) -> &Output {
        assert!(
            !self.stdout.contains(needle),
            "stdout unexpectedly has {needle:?}\n{self}"
        );
        self
    }

    /// Asserts that stderr contains `needle`.
    pub fn assert_stderr_contains(&self, needle: &str) -> &Output {
        assert!(
            self.stderr.contains(needle),
            "stderr lacks {needle:?}\n{self}"
        );
        self
    }

    /// Asserts that stderr has an `hvprof: error: ` line containing every
    /// one of `needles`, that says each of its causes once
    /// (tests/faults/messages.rs), and returns that line.
    pub fn assert_error_line(&self, needles: &[&str]) -> String {
        let line = self
            .stderr
            .lines()
            .find(|l| l.starts_with(ERROR_PREFIX) && needles.iter().all(|n| l.contains(n)));
        match line {
            Some(l) => {
                crate::faults::messages::assert_said_once(l);
                l.to_string()
            }
            None => panic!(
                "stderr has no line starting {ERROR_PREFIX:?} and containing all of {needles:?}\n{self}"
            ),
        }
    }

    /// Asserts that stderr has some `hvprof: error: ` line.
    pub fn assert_some_error_line(&self) -> String {
        self.assert_error_line(&[])
    }

    /// Asserts that the run ended within `bound` of wall time.
    pub fn assert_elapsed_below(&self, bound: Duration) -> &Output {
        assert!(
            self.elapsed < bound,
            "run took {:.2?}, expected under {bound:?}\n{self}",
            self.elapsed
        );
        self
    }

    /// The text after `prefix` on the first stdout line that starts with it.
    pub fn stdout_field(&self, prefix: &str) -> Option<&str> {
        self.stdout
            .lines()
            .find_map(|l| l.strip_prefix(prefix))
            .map(str::trim_end)
    }

    /// The `0x…` number after `prefix` on the first stdout line starting with it.
    pub fn stdout_hex(&self, prefix: &str) -> u64 {
        let field = self
            .stdout_field(prefix)
            .unwrap_or_else(|| panic!("stdout has no line starting {prefix:?}\n{self}"));
        let digits = field
            .split_whitespace()
            .next()
            .and_then(|w| w.strip_prefix("0x"))
            .unwrap_or_else(|| panic!("no 0x number after {prefix:?}\n{self}"));
        u64::from_str_radix(digits, 16)
            .unwrap_or_else(|e| panic!("bad hex {digits:?} after {prefix:?}: {e}\n{self}"))
    }
}

/// Runs a host tool a test needs (clang, lld-link), failing with the Debian package to install
/// when it is missing and with its stderr when it fails.
pub fn tool<S: AsRef<std::ffi::OsStr>>(name: &str, package: &str, args: &[S]) {
    let out = Command::new(name).args(args).output().unwrap_or_else(|e| {
        panic!("cannot run {name} ({e}): install Debian's {package} package (apt-get install -y {package})")
    });
    assert!(
        out.status.success(),
        "{name} failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Makes the qcow2 overlay `path` over `backing` (as named: a relative name is resolved from
/// the overlay's directory) whose format is `backing_format`, with `cluster_size`-byte
/// clusters if given.
pub fn qcow2_overlay(path: &Path, backing: &str, backing_format: &str, cluster_size: Option<u32>) {
    let cluster = cluster_size.map(|c| format!("cluster_size={c}"));
    let mut args = vec!["create", "-q", "-f", "qcow2"];
    if let Some(c) = &cluster {
        args.extend(["-o", c.as_str()]);
    }
    let path = path.to_str().expect("utf-8 temp path");
    args.extend(["-b", backing, "-F", backing_format, path]);
    tool("qemu-img", "qemu-utils", &args);
}

/// `go tool pprof <report> <options>` on DIR/profile.pb.gz (`report`: `-top`, `-traces`, ...):
/// its stdout and stderr.
pub fn pprof(dir: &Path, report: &str, options: &[&str]) -> (String, String) {
    let out = Command::new("go")
        .args(["tool", "pprof", report])
        .args(options)
        .arg(dir.join("profile.pb.gz"))
        .env("HOME", dir) // pprof keeps its history file there
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "cannot run `go` ({e}): install Debian's golang-go (apt-get install -y golang-go)"
            )
        });
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "go tool pprof failed\n{text}\n{err}");
    (text, err)
}

/// One trace of `go tool pprof -traces`.
#[derive(Debug)]
pub struct Trace {
    /// Its labels (`process`, `pid`, ...), as printed.
    pub labels: Vec<(String, String)>,
    /// Function names, innermost first.
    pub frames: Vec<String>,
    /// Samples.
    pub count: u64,
}

impl Trace {
    /// The value of label `key`.
    pub fn label(&self, key: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// The traces `go tool pprof -traces` printed as `text`.
pub fn pprof_traces(text: &str) -> Vec<Trace> {
    let mut out = Vec::new();
    for block in text.split("-----------+") {
        let mut t = Trace {
            labels: Vec::new(),
            frames: Vec::new(),
            count: 0,
        };
        let mut counted = false;
        for line in block.lines() {
            let words: Vec<&str> = line.split_whitespace().collect();
            match words.as_slice() {
                // Labels (`process: burn`) and the header.
                [first, rest @ ..] if first.ends_with(':') => t
                    .labels
                    .push((first.trim_end_matches(':').to_string(), rest.join(" "))),
                [n, name] if !counted && n.parse::<u64>().is_ok() => {
                    t.count = n.parse().unwrap_or(0);
                    counted = true;
                    t.frames.push(name.to_string());
                }
                [name] if counted => t.frames.push(name.to_string()),
                _ => {}
            }
        }
        if counted {
            out.push(t);
        }
    }
    out
}

/// The `[start, end)` of every phase marker named `name` on timeline `t`, in order (ns from the
/// run's start).
pub fn phase_spans(t: &report::timeline::Timeline, name: &str) -> Vec<(u64, u64)> {
    t.markers
        .iter()
        .filter(|m| m.kind == report::timeline::MarkerKind::Phase && m.name == name)
        .map(|m| (m.start_ns, m.end_ns))
        .collect()
}
