//! The progress bars of `hvprof`: a profiling session reports elapsed time and samples, a
//! symbol download its bytes; these draw them (the libraries do no presentation).

use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};
use vmm::session::{Progress, Span};

/// A bar toward the session's duration, or a spinner when it runs until the guest exits.
pub struct Bar {
    bar: ProgressBar,
    span: Span,
}

impl Bar {
    /// A bar for a session of `span`.
    pub fn new(span: Span) -> Self {
        let bar = match span {
            Span::For(d) => {
                let bar = ProgressBar::new(millis(d));
                bar.set_style(
                    ProgressStyle::with_template("{spinner} [{bar:30}] {elapsed}/{msg}")
                        .unwrap_or_else(|_| ProgressStyle::default_bar())
                        .progress_chars("=> "),
                );
                bar
            }
            Span::UntilExit => {
                let bar = ProgressBar::new_spinner();
                bar.set_style(
                    ProgressStyle::with_template("{spinner} {elapsed} {msg}")
                        .unwrap_or_else(|_| ProgressStyle::default_spinner()),
                );
                bar
            }
        };
        Bar { bar, span }
    }
}

fn millis(d: Duration) -> u64 {
    d.as_millis().try_into().unwrap_or(u64::MAX)
}

impl Progress for Bar {
    fn update(&mut self, elapsed: Duration, samples: u64) {
        match self.span {
            Span::For(d) => {
                self.bar.set_position(millis(elapsed));
                self.bar
                    .set_message(format!("{:.0}s, {samples} samples", d.as_secs_f64()));
            }
            Span::UntilExit => self.bar.set_message(format!("{samples} samples")),
        }
        self.bar.tick();
    }

    fn finish(&mut self) {
        // Cleared, so the summary printed next stands alone.
        self.bar.finish_and_clear();
    }
}

/// A bar for each symbol download, in bytes (a spinner when the server does not say how
/// many); drawn only on a terminal.
#[derive(Default)]
pub struct DownloadBar {
    bar: Option<ProgressBar>,
}

impl report::symbols::server::DownloadProgress for DownloadBar {
    fn progress(&mut self, url: &str, done: u64, total: Option<u64>) {
        let bar = self.bar.get_or_insert_with(|| {
            let (bar, template) = match total {
                Some(n) => (
                    ProgressBar::new(n),
                    "{msg} [{bar:30}] {bytes}/{total_bytes}",
                ),
                None => (ProgressBar::new_spinner(), "{spinner} {msg} {bytes}"),
            };
            bar.set_style(
                ProgressStyle::with_template(template)
                    .unwrap_or_else(|_| ProgressStyle::default_bar())
                    .progress_chars("=> "),
            );
            let name = url.rsplit('/').next().unwrap_or(url);
            bar.set_message(format!("downloading {name}"));
            bar
        });
        bar.set_position(done);
    }

    fn finished(&mut self, _url: &str) {
        if let Some(bar) = self.bar.take() {
            bar.finish_and_clear();
        }
    }
}
