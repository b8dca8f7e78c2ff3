//! The in-kernel sampler's drain thread: every `profiler::flat::DRAIN_PERIOD` it attributes
//! the records the vCPUs' rings gathered, while the vCPUs run. Its filter
//! (`ThreadKind::Drain`) allows only what every thread needs: it reads memory the kernel and
//! the guest share and writes counters, nothing else.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use crate::profiler::flat::DRAIN_PERIOD;
use crate::profiler::Profiler;
use crate::seccomp::{Seccomp, ThreadKind};

/// The running drain thread.
pub struct Drain {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<()>,
}

/// Starts the drain thread of `profiler`'s rings.
pub fn start(profiler: Arc<Profiler>, seccomp: Seccomp) -> std::io::Result<Drain> {
    let stop = Arc::new(AtomicBool::new(false));
    let stopping = stop.clone();
    let thread = std::thread::Builder::new()
        .name("sampler-drain".into())
        .spawn(move || {
            if let Err(e) = crate::seccomp::install(ThreadKind::Drain, seccomp) {
                log::error!("in-kernel samples are not drained while the VM runs: {e}");
                return;
            }
            while !stopping.load(Ordering::Acquire) {
                std::thread::park_timeout(DRAIN_PERIOD);
                profiler.drain();
            }
        })?;
    Ok(Drain { stop, thread })
}

impl Drain {
    /// Stops the thread after one last drain and waits for it.
    pub fn stop(self) {
        self.stop.store(true, Ordering::Release);
        self.thread.thread().unpark();
        if self.thread.join().is_err() {
            log::error!("the sampler's drain thread panicked");
        }
    }
}
