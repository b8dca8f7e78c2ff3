//! The outputs of `hvprof compare`: a Markdown summary for people and JUnit XML for CI.

use std::fmt::Write;

use super::stats::{Change, TestOptions};

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
            "| {mark} | `{}` | {} | {} | {:.2}% | {:.2}% | {} | {:.2e} |",
            r.name,
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

fn xml_escape(text: &str) -> String {
    text.chars()
        .map(|c| match c {
            '<' => "&lt;".to_string(),
            '>' => "&gt;".to_string(),
            '&' => "&amp;".to_string(),
            '"' => "&quot;".to_string(),
            '\'' => "&apos;".to_string(),
            c if c.is_control() && c != '\n' && c != '\t' => format!("&#{};", u32::from(c)),
            c => c.to_string(),
        })
        .collect()
}

/// JUnit XML: one test case per tested symbol, failed when it regressed.
pub fn junit(suite: &str, rows: &[Change]) -> String {
    let tested: Vec<&Change> = rows.iter().filter(|r| r.tested).collect();
    let failures = tested.iter().filter(|r| r.regression).count();
    let mut s = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let _ = writeln!(
        s,
        "<testsuite name=\"{}\" tests=\"{}\" failures=\"{failures}\">",
        xml_escape(suite),
        tested.len()
    );
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
    s.push_str("</testsuite>\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compare::stats::compare;

    fn rows() -> Vec<Change> {
        let base = vec![("a<b>".to_string(), 5000), ("c".to_string(), 5000)];
        let new = vec![("a<b>".to_string(), 6500), ("c".to_string(), 3500)];
        compare(&base, &new, &TestOptions::default())
    }

    #[test]
    fn junit_marks_regressions_and_escapes_names() {
        let x = junit("refguest", &rows());
        assert!(x.contains("tests=\"2\" failures=\"1\""));
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
}
