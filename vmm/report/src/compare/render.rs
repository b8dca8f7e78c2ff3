//! The outputs of `hvprof compare`: a Markdown summary for people and JUnit XML for CI.

use std::fmt::Write;

use super::significance::{Change, TestOptions};
use crate::sanitize::{markdown_code, terminal, xml_escape};

fn relative(r: &Change) -> String {
    if r.relative.is_infinite() {
        "new".to_string()
    } else {
        format!("{:+.1}%", r.relative)
    }
}

/// A Markdown summary: verdict, method, then the changed rows (regressions first).
pub fn markdown(title: &str, rows: &[Change], opts: &TestOptions, top: usize) -> String {
    let regressions = rows.iter().filter(|r| r.regression).count();
    let mut s = String::new();
    let title = terminal(title).replace('\n', " ");
    let _ = writeln!(s, "## hvprof compare: {title}\n");
    if regressions == 0 {
        let _ = writeln!(
            s,
            "**No significant regression** above {:.1}%.\n",
            opts.threshold
        );
    } else {
        let _ = writeln!(
            s,
            "**{regressions} significant regression{}** above {:.1}%.\n",
            if regressions == 1 { "" } else { "s" },
            opts.threshold
        );
    }
    let _ = writeln!(
        s,
        "Method: one-sided two-proportion z-test on each symbol's share of samples, Bonferroni \
         over the {} symbols with at least {} samples, family-wise alpha {}; a regression is a \
         significant share increase of more than {:.1}% (relative) and at least {:.1} \
         percentage points.\n",
        rows.iter().filter(|r| r.tested).count(),
        opts.min_samples,
        opts.alpha,
        opts.threshold,
        opts.min_points
    );
    let _ = writeln!(
        s,
        "| | symbol | base | new | base share | new share | change | p |"
    );
    let _ = writeln!(s, "|---|---|---:|---:|---:|---:|---:|---:|");
    for r in rows.iter().filter(|r| r.tested).take(top) {
        let mark = if r.regression { "❌" } else { "" };
        let _ = writeln!(
            s,
            "| {mark} | {} | {} | {} | {:.2}% | {:.2}% | {} | {:.2e} |",
            markdown_code(&r.name),
            r.base,
            r.new,
            r.base_share,
            r.new_share,
            relative(r),
            r.p_value
        );
    }
    s
}

/// JUnit XML: one test case per tested symbol, failed when it regressed; each of `warnings`
/// (profiles of different kernels...) a `hvprof.warning` property of the suite and a line of
/// its `system-err`, where CI systems show them.
pub fn junit(suite: &str, rows: &[Change], warnings: &[String]) -> String {
    let tested: Vec<&Change> = rows.iter().filter(|r| r.tested).collect();
    let failures = tested.iter().filter(|r| r.regression).count();
    let mut s = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let _ = writeln!(
        s,
        "<testsuite name=\"{}\" tests=\"{}\" failures=\"{failures}\">",
        xml_escape(suite),
        tested.len()
    );
    if !warnings.is_empty() {
        s.push_str("  <properties>\n");
        for w in warnings {
            let _ = writeln!(
                s,
                "    <property name=\"hvprof.warning\" value=\"{}\"/>",
                xml_escape(w)
            );
        }
        s.push_str("  </properties>\n");
    }
    for r in tested {
        let _ = write!(
            s,
            "  <testcase classname=\"hvprof.compare\" name=\"{}\"",
            xml_escape(&r.name)
        );
        if r.regression {
            let _ = writeln!(
                s,
                "><failure message=\"share {:.2}% -> {:.2}% ({}), p={:.2e}\"/></testcase>",
                r.base_share,
                r.new_share,
                relative(r),
                r.p_value
            );
        } else {
            let _ = writeln!(s, "/>");
        }
    }
    if !warnings.is_empty() {
        let text: Vec<String> = warnings.iter().map(|w| xml_escape(w)).collect();
        let _ = writeln!(s, "  <system-err>{}</system-err>", text.join("\n"));
    }
    s.push_str("</testsuite>\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compare::significance::compare;

    fn rows() -> Vec<Change> {
        let base = vec![("a<b>".to_string(), 5000), ("c".to_string(), 5000)];
        let new = vec![("a<b>".to_string(), 6500), ("c".to_string(), 3500)];
        compare(&base, &new, &TestOptions::default())
    }

    #[test]
    fn junit_marks_regressions_and_escapes_names() {
        let x = junit("refguest", &rows(), &[]);
        assert!(x.contains("tests=\"2\" failures=\"1\""));
        assert!(!x.contains("properties"));
        assert!(x.contains("name=\"a&lt;b&gt;\"><failure"));
        assert!(x.contains("name=\"c\"/>"));
    }

    #[test]
    fn markdown_has_verdict_method_and_rows() {
        let m = markdown("base vs new", &rows(), &TestOptions::default(), 10);
        assert!(m.contains("**1 significant regression**"));
        assert!(m.contains("two-proportion z-test"));
        assert!(m.contains("| ❌ | `a<b>` | 5000 | 6500 |"));
    }

    /// Regression: control characters in a guest's symbol names became `&#0;`, `&#27;`
    /// character references, which XML 1.0 forbids as much as the raw bytes.
    #[test]
    fn hostile_names_give_well_formed_junit_and_one_markdown_cell() {
        let name = "f\0\x1b[31m</testcase>&|`\u{fffe}\nx".to_string();
        let base = vec![(name.clone(), 5000), ("c".to_string(), 5000)];
        let new = vec![(name, 6500), ("c".to_string(), 3500)];
        let rows = compare(&base, &new, &TestOptions::default());
        let x = junit("s", &rows, &["kernels differ: a\x1b vs b".to_string()]);
        assert!(!x.contains("&#"), "{x}");
        assert!(!x.chars().any(|c| c.is_control() && c != '\n'), "{x}");
        assert!(x.contains("name=\"f\u{fffd}\u{fffd}[31m&lt;/testcase&gt;&amp;|`\u{fffd}\nx\""));
        assert!(x.contains(
            "<property name=\"hvprof.warning\" value=\"kernels differ: a\u{fffd} vs b\"/>"
        ));
        let m = markdown("t\x1b", &rows, &TestOptions::default(), 10);
        assert!(!m.contains('\x1b'), "{m}");
        let row = m.lines().find(|l| l.contains("</testcase>")).unwrap();
        assert!(
            row.contains("| ``f\u{fffd}\u{fffd}[31m</testcase>&\\|`\u{fffe} x`` |"),
            "{row}"
        );
    }

    /// Regression (issue 40, item 11): bidi overrides and line separators in a symbol name
    /// reached the Markdown summary raw.
    #[test]
    fn bidi_and_separators_in_names_are_replaced_in_markdown_and_junit() {
        use crate::sanitize::tests::{assert_no_bidi, BIDI_NAME};
        let base = vec![(BIDI_NAME.to_string(), 5000), ("c".to_string(), 5000)];
        let new = vec![(BIDI_NAME.to_string(), 6500), ("c".to_string(), 3500)];
        let rows = compare(&base, &new, &TestOptions::default());
        let m = markdown(BIDI_NAME, &rows, &TestOptions::default(), 10);
        assert!(m.contains("a\u{fffd}evil"), "{m}");
        assert_no_bidi("the Markdown", &m);
        assert_no_bidi(
            "the JUnit file",
            &junit(BIDI_NAME, &rows, &[BIDI_NAME.into()]),
        );
    }
}
