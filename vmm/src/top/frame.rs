//! A watch's screen as text, as `hvprof top --batch` prints one every interval (`top -b`):
//! three lines about the run (the last starts `view: `), then the view's rows with their
//! recent and total shares. The full-screen view shows the same lines and cells.

use report::sanitize;

use super::{Order, View, Watch};

/// What a screen shows.
#[derive(Debug, Clone)]
pub struct Screen {
    /// The view.
    pub view: View,
    /// Its order.
    pub order: Order,
    /// Only this process's samples, when given.
    pub process: Option<String>,
    /// Rows at most.
    pub rows: usize,
    /// Columns: longer lines are cut.
    pub width: usize,
}

/// The header's lines: the run, the watched profile, the view.
pub fn header(watch: &Watch, screen: &Screen) -> Vec<String> {
    let s = watch.state();
    let hz = if s.interval_100ns > 0 {
        format!("{:.0} Hz", 1e7 / s.interval_100ns as f64)
    } else {
        "? Hz".to_string()
    };
    let vcpus = s.vcpu_samples.len();
    let process = screen
        .process
        .as_deref()
        .map_or(String::new(), |p| format!(", process {p} only"));
    vec![
        format!(
            "{}: {}, up {:.1} s, {vcpus} vCPU{}, {hz}, {} sampler",
            sanitize::terminal(&s.kernel),
            s.state,
            s.uptime_s,
            if vcpus == 1 { "" } else { "s" },
            s.sampler
        ),
        format!(
            "host profile {} {}: {} samples, {} lost; recent: halved every {} s",
            watch.profile(),
            if s.profile_running {
                "sampling"
            } else {
                "stopped"
            },
            s.profile_samples,
            s.lost,
            watch.half_life_s()
        ),
        format!(
            "view: {} by {} share{process}",
            screen.view.name(),
            match screen.order {
                Order::Recent => "recent",
                Order::Total => "total",
            }
        ),
    ]
}

/// The columns' widths and titles for `view`: the shares, the samples, the name, the detail.
pub fn heading_cells(view: View) -> (Vec<u16>, Vec<String>) {
    let (name, detail) = match view {
        View::Functions => ("FUNCTION", "MODULE"),
        View::Processes => ("PROCESS", "PID"),
        View::Threads => ("THREAD", "PROCESS"),
        View::Modules => ("MODULE", ""),
        View::Vcpus => ("VCPU", ""),
    };
    let titles = [
        format!("{:>7}", "RECENT"),
        format!("{:>7}", "TOTAL"),
        format!("{:>9}", "SAMPLES"),
        name.to_string(),
        detail.to_string(),
    ];
    (vec![7, 7, 9, 40, 24], titles.to_vec())
}

/// Each row's cells, as [`heading_cells`] lists them: guest text sanitized.
pub fn table_cells(watch: &mut Watch, screen: &Screen) -> Vec<Vec<String>> {
    let rows = watch.rows(
        screen.view,
        screen.order,
        screen.process.as_deref(),
        screen.rows,
    );
    let (recent, total) = match screen.view {
        View::Vcpus => watch.vcpu_sums(),
        _ => watch.sums(screen.process.as_deref()),
    };
    let share = |n: f64, of: f64| if of > 0.0 { 100.0 * n / of } else { 0.0 };
    rows.iter()
        .map(|r| {
            vec![
                format!("{:>6.1}%", share(r.recent, recent)),
                format!("{:>6.1}%", share(r.total as f64, total as f64)),
                format!("{:>9}", r.total),
                // Guest text: no control character reaches the terminal.
                sanitize::terminal(&r.name).into_owned(),
                sanitize::terminal(&r.detail).into_owned(),
            ]
        })
        .collect()
}

/// Cells as one line: each padded to its width (numbers are right-aligned already), a space
/// between two.
fn line(widths: &[u16], cells: &[String]) -> String {
    let mut out = String::new();
    for (i, (w, c)) in widths.iter().zip(cells).enumerate() {
        if i > 0 {
            out.push(' ');
        }
        let w = usize::from(*w);
        if i < 3 {
            out.push_str(&format!("{c:>w$}"));
        } else {
            out.push_str(&format!("{c:<w$}"));
        }
    }
    out.trim_end().to_string()
}

/// The table's heading for `view`, as text.
pub fn heading(view: View) -> String {
    let (widths, titles) = heading_cells(view);
    line(&widths, &titles)
}

/// The table's lines, as text, without its heading.
pub fn table(watch: &mut Watch, screen: &Screen) -> Vec<String> {
    let (widths, _) = heading_cells(screen.view);
    table_cells(watch, screen)
        .iter()
        .map(|cells| line(&widths, cells))
        .collect()
}

/// A whole screen: header, a blank line, the heading and the rows, each line cut to the
/// width.
pub fn render(watch: &mut Watch, screen: &Screen) -> String {
    let mut lines = header(watch, screen);
    lines.push(String::new());
    lines.push(heading(screen.view));
    lines.extend(table(watch, screen));
    let mut out = String::new();
    for l in lines {
        out.extend(l.chars().take(screen.width));
        out.push('\n');
    }
    out
}
