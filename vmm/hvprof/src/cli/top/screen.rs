//! `hvprof top`'s full-screen view: ratatui on the alternate screen, the terminal in raw mode,
//! keys read from standard input, redrawn every interval, at a key and at a new size. The
//! terminal is given back as it was on quit, Ctrl-C, the stop signals (SIGINT, SIGTERM,
//! SIGHUP, SIGQUIT, read from a signalfd) and a panic.

use std::io::{Read, Stdout};
use std::os::fd::{AsFd, AsRawFd};
use std::time::{Duration, Instant};

use ratatui::backend::CrosstermBackend;
use ratatui::crossterm::{cursor, execute, terminal};
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Modifier, Style};
use ratatui::widgets::{Block, Clear, Paragraph, Row, Table};
use ratatui::{Frame, Terminal};
use vmm::signals::StopSignals;
use vmm::top::frame::{header, heading_cells, table_cells, Screen};
use vmm::top::{Order, TopError, View, Watch};

/// Why the view ended otherwise than by a quit key or a stop signal.
pub enum Failed {
    /// The watch failed (the run's end among others).
    Watch(TopError),
    /// The terminal could not be set up or drawn on.
    Terminal(std::io::Error),
}

/// The keys, as `?` lists them.
const KEYS: &[(&str, &str)] = &[
    ("f p t m v", "functions, processes, threads, modules, vCPUs"),
    ("s", "sort by the recent window or by all samples"),
    (
        "/",
        "only one process's samples (type its name, Enter; empty: all)",
    ),
    ("c", "all processes again"),
    ("space", "pause or resume the VM"),
    ("r", "refresh now"),
    ("?", "this list"),
    ("q, Esc, Ctrl-C", "quit (the VM runs on)"),
];

/// The terminal in raw mode on the alternate screen; dropping it gives the terminal back.
struct Raw {
    terminal: Terminal<CrosstermBackend<Stdout>>,
}

impl Raw {
    fn enter() -> std::io::Result<Raw> {
        terminal::enable_raw_mode()?;
        let mut out = std::io::stdout();
        if let Err(e) = execute!(out, terminal::EnterAlternateScreen, cursor::Hide) {
            let _ = terminal::disable_raw_mode();
            return Err(e);
        }
        let hook = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            leave();
            hook(info);
        }));
        let terminal = Terminal::new(CrosstermBackend::new(out))?;
        Ok(Raw { terminal })
    }
}

/// Gives the terminal back: the main screen, the cursor, cooked mode.
fn leave() {
    let _ = execute!(
        std::io::stdout(),
        terminal::LeaveAlternateScreen,
        cursor::Show
    );
    let _ = terminal::disable_raw_mode();
}

impl Drop for Raw {
    fn drop(&mut self) {
        leave();
    }
}

/// What the keys have set.
struct Keys {
    screen: Screen,
    help: bool,
    /// The process name being typed after `/`.
    typing: Option<String>,
    quit: bool,
    refresh: bool,
    pause: bool,
}

impl Keys {
    fn press(&mut self, b: u8) {
        if let Some(name) = &mut self.typing {
            match b {
                b'\r' | b'\n' => {
                    let name = std::mem::take(name);
                    self.screen.process = (!name.is_empty()).then_some(name);
                    self.typing = None;
                }
                0x1b => self.typing = None,
                0x7f | 0x08 => {
                    name.pop();
                }
                0x20..=0x7e if name.len() < 64 => name.push(char::from(b)),
                _ => {}
            }
            return;
        }
        match b {
            b'q' | 0x03 | 0x1b => self.quit = true,
            b'f' => self.screen.view = View::Functions,
            b'p' => self.screen.view = View::Processes,
            b't' => self.screen.view = View::Threads,
            b'm' => self.screen.view = View::Modules,
            b'v' => self.screen.view = View::Vcpus,
            b's' => {
                self.screen.order = match self.screen.order {
                    Order::Recent => Order::Total,
                    Order::Total => Order::Recent,
                }
            }
            b'/' => self.typing = Some(String::new()),
            b'c' => self.screen.process = None,
            b' ' => self.pause = true,
            b'r' => self.refresh = true,
            b'?' => self.help = !self.help,
            _ => {}
        }
    }

    /// Takes a read of standard input: keys, where an escape sequence (an arrow, a function
    /// key) is dropped whole and a lone Esc is a key.
    fn read(&mut self, bytes: &[u8]) {
        let mut i = 0;
        while i < bytes.len() {
            if bytes[i] == 0x1b && bytes.get(i + 1).is_some_and(|&b| b == b'[' || b == b'O') {
                i += 2;
                while i < bytes.len() && !(0x40..=0x7e).contains(&bytes[i]) {
                    i += 1;
                }
                i += 1;
                continue;
            }
            self.press(bytes[i]);
            i += 1;
        }
    }
}

/// The terminal taken for the view, and the stop signals read in its loop: set up before
/// the system-call filter is (blocking the signals and opening their signalfd, and raw mode,
/// are calls the filter does not allow); dropping it gives the terminal back.
pub struct Tty {
    stop: StopSignals,
    raw: Raw,
}

impl Tty {
    /// Blocks the stop signals and takes the terminal.
    pub fn open() -> std::io::Result<Tty> {
        let stop = StopSignals::block_and_open()?;
        let raw = Raw::enter()?;
        Ok(Tty { stop, raw })
    }
}

/// Runs the full-screen view on `tty` until a quit key, a stop signal, or the run's end.
pub fn run(tty: Tty, watch: &mut Watch, screen: Screen, interval: Duration) -> Result<(), Failed> {
    let Tty { stop, mut raw } = tty;
    let mut keys = Keys {
        screen,
        help: false,
        typing: None,
        quit: false,
        refresh: false,
        pause: false,
    };
    let mut next = Instant::now() + interval;
    let mut note = String::new();
    loop {
        let s = &mut keys;
        raw.terminal
            .draw(|f| draw(f, watch, s, &note))
            .map_err(Failed::Terminal)?;
        let wait = next.saturating_duration_since(Instant::now());
        let (input, signalled) = wait_for_input(&stop, wait);
        if signalled {
            return Ok(());
        }
        if let Some(bytes) = input {
            keys.read(&bytes);
        }
        if keys.quit {
            return Ok(());
        }
        if std::mem::take(&mut keys.pause) {
            let paused = watch.state().state == "paused";
            note = match watch.set_paused(!paused) {
                Ok(()) if paused => "resumed".to_string(),
                Ok(()) => "paused".to_string(),
                Err(e) => e.to_string(),
            };
            keys.refresh = true;
        }
        if Instant::now() >= next || std::mem::take(&mut keys.refresh) {
            next = Instant::now() + interval;
            if let Err(e) = watch.refresh() {
                drop(raw);
                return Err(Failed::Watch(e));
            }
        }
    }
}

/// Waits up to `wait` for standard input or a stop signal: the bytes read, and whether a
/// signal came.
fn wait_for_input(stop: &StopSignals, wait: Duration) -> (Option<Vec<u8>>, bool) {
    let stdin = std::io::stdin();
    let mut fds = [
        libc::pollfd {
            fd: stdin.as_fd().as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        },
        libc::pollfd {
            fd: stop.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        },
    ];
    let ms = libc::c_int::try_from(wait.as_millis()).unwrap_or(libc::c_int::MAX);
    // SAFETY: `fds` is a valid array of two pollfd that outlives the call.
    let n = unsafe { libc::poll(fds.as_mut_ptr(), 2, ms) };
    if n <= 0 {
        return (None, false);
    }
    if fds[1].revents & libc::POLLIN != 0 && stop.read().is_some() {
        return (None, true);
    }
    if fds[0].revents & (libc::POLLIN | libc::POLLHUP) == 0 {
        return (None, false);
    }
    let mut buf = [0u8; 64];
    match stdin.lock().read(&mut buf) {
        // Standard input closed: nothing more will come, as after a quit key.
        Ok(0) => (Some(vec![b'q']), false),
        Ok(n) => (Some(buf[..n].to_vec()), false),
        Err(_) => (None, false),
    }
}

fn draw(f: &mut Frame, watch: &mut Watch, keys: &mut Keys, note: &str) {
    let area = f.area();
    let [top, body, foot] = Layout::vertical([
        Constraint::Length(4),
        Constraint::Min(3),
        Constraint::Length(1),
    ])
    .areas(area);
    keys.screen.rows = usize::from(body.height.saturating_sub(1));
    keys.screen.width = usize::from(area.width);
    let lines: Vec<ratatui::text::Line> = header(watch, &keys.screen)
        .into_iter()
        .map(ratatui::text::Line::from)
        .collect();
    f.render_widget(Paragraph::new(lines), top);
    let (widths, head) = heading_cells(keys.screen.view);
    let rows: Vec<Row> = table_cells(watch, &keys.screen)
        .into_iter()
        .map(Row::new)
        .collect();
    let widths: Vec<Constraint> = widths.iter().map(|&w| Constraint::Length(w)).collect();
    let table = Table::new(rows, widths)
        .header(Row::new(head).style(Style::default().add_modifier(Modifier::REVERSED)));
    f.render_widget(table, body);
    let footer = match &keys.typing {
        Some(name) => format!("process: {name}_  (Enter: keep only it; empty: all; Esc: cancel)"),
        None if note.is_empty() => "? keys  q quit".to_string(),
        None => format!("{note}  ? keys  q quit"),
    };
    f.render_widget(Paragraph::new(footer), foot);
    if keys.help {
        help(f, area);
    }
}

fn help(f: &mut Frame, area: Rect) {
    let width = 72.min(area.width);
    let height = u16::try_from(KEYS.len() + 2)
        .unwrap_or(u16::MAX)
        .min(area.height);
    let at = Rect {
        x: area.x + (area.width - width) / 2,
        y: area.y + (area.height - height) / 2,
        width,
        height,
    };
    let lines: Vec<ratatui::text::Line> = KEYS
        .iter()
        .map(|(k, what)| ratatui::text::Line::from(format!("{k:>16}  {what}")))
        .collect();
    f.render_widget(Clear, at);
    f.render_widget(
        Paragraph::new(lines).block(Block::bordered().title(" keys ")),
        at,
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys() -> Keys {
        Keys {
            screen: Screen {
                view: View::Functions,
                order: Order::Recent,
                process: None,
                rows: 10,
                width: 80,
            },
            help: false,
            typing: None,
            quit: false,
            refresh: false,
            pause: false,
        }
    }

    #[test]
    fn keys_switch_views_filter_by_a_typed_name_and_skip_escape_sequences() {
        let mut k = keys();
        k.read(b"p\x1b[A\x1bOPs");
        assert_eq!(
            (k.screen.view, k.screen.order, k.quit),
            (View::Processes, Order::Total, false)
        );
        k.read(b"/awk\x7fk\r");
        assert_eq!(k.screen.process.as_deref(), Some("awk"));
        k.read(b"/x\x1b");
        assert_eq!(
            (k.typing.is_none(), k.screen.process.as_deref()),
            (true, Some("awk"))
        );
        k.read(b"c ?");
        assert_eq!(
            (k.screen.process.is_none(), k.pause, k.help),
            (true, true, true)
        );
        k.read(b"\x1b");
        assert!(k.quit, "a lone Esc quits");
    }
}
