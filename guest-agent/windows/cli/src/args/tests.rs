use super::*;

fn p(args: &[&str]) -> Result<Action, ArgError> {
    parse(args.iter().map(|s| s.to_string()))
}

fn profile(args: &[&str]) -> ProfileArgs {
    match p(args) {
        Ok(Action::Profile(a)) => a,
        other => panic!("{:?}", other),
    }
}

#[test]
fn help_version_info_stats() {
    assert_eq!(p(&["--help"]), Ok(Action::Help));
    assert_eq!(p(&["--module", "x", "-h"]), Ok(Action::Help));
    assert_eq!(p(&["-V"]), Ok(Action::Version));
    assert_eq!(p(&["--info"]), Ok(Action::Info));
    assert_eq!(p(&["--stats"]), Ok(Action::Stats));
    assert!(USAGE.contains("--module NAME"));
}

#[test]
fn kernel_module_with_defaults() {
    let a = profile(&["--module", "ntoskrnl.exe"]);
    assert_eq!(a.target, Target::KernelModule("ntoskrnl.exe".into()));
    assert_eq!(a.bucket_shift, 4);
    assert_eq!(a.source, 0);
    assert_eq!(a.interval, None);
    assert_eq!(a.run, Run::Seconds(10));
    assert_eq!(a.out, "hvprof-result.txt");
    assert_eq!(a.top, 10);
}

#[test]
fn every_option() {
    let a = profile(&[
        "--pid",
        "1234",
        "--range",
        "0x7ff6_1234_0000:0x10000",
        "--bucket",
        "8",
        "--source",
        "TotalCycles",
        "--interval",
        "10000",
        "--seconds",
        "3",
        "--out",
        "D:\\r.txt",
        "--top",
        "5",
    ]);
    assert_eq!(
        a.target,
        Target::ProcessRange {
            pid: 1234,
            base: 0x7FF6_1234_0000,
            size: 0x10000
        }
    );
    assert_eq!(a.bucket_shift, 8);
    assert_eq!(a.source, 0x13);
    assert_eq!(a.interval, Some(10000));
    assert_eq!(a.run, Run::Seconds(3));
    assert_eq!(a.out, "D:\\r.txt");
    assert_eq!(a.top, 5);
}

#[test]
fn process_module_and_global_range_around_a_command() {
    let a = profile(&["--pid", "8", "--module", "app.exe"]);
    assert_eq!(
        a.target,
        Target::ProcessModule {
            pid: 8,
            name: "app.exe".into()
        }
    );
    let a = profile(&["--range", "4096:8192", "--", "cmd.exe", "/c", "--module"]);
    assert_eq!(
        a.target,
        Target::Range {
            base: 4096,
            size: 8192
        }
    );
    assert_eq!(
        a.run,
        Run::Command(vec!["cmd.exe".into(), "/c".into(), "--module".into()])
    );
}

#[test]
fn bad_command_lines_say_why() {
    let cases: &[(&[&str], &str)] = &[
        (&[], "nothing to profile"),
        (&["--pid", "4"], "--pid needs"),
        (&["--module", "a", "--range", "1:2"], "exclude"),
        (&["--module"], "--module needs a value"),
        (&["--range", "0x1000"], "BASE:SIZE"),
        (&["--range", "0x1000:0"], "SIZE > 0"),
        (&["--bucket", "1", "--module", "a"], "2..=31"),
        (&["--bucket", "32"], "2..=31"),
        (&["--source", "nope"], "unknown source"),
        (&["--pid", "-1"], "not a number"),
        (&["--pid", "0x100000000"], "not a number"),
        (&["--seconds", "0"], "at least 1"),
        (&["--module", "a", "--"], "followed by a command"),
        (&["--frobnicate"], "unexpected argument '--frobnicate'"),
    ];
    for (args, needle) in cases {
        let e = p(args).unwrap_err();
        assert!(e.to_string().contains(needle), "{:?}: {}", args, e);
        assert!(e.to_string().ends_with("(try --help)"));
    }
}

#[test]
fn ranges() {
    assert_eq!(parse_range("0x10:0x20"), Some((16, 32)));
    assert_eq!(parse_range("0x10"), None);
}
