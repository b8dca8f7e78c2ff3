//! Queue notifications without a trip through the vCPU thread: one eventfd per queue,
//! registered with KVM (`KVM_IOEVENTFD`) at the queue's notification address while the BAR
//! is mapped there, and watched by the VMM thread's event loop, which then serves the queue.
//!
//! A write to the notification region then costs the guest an in-kernel exit instead of a
//! return to user space, and the notifying vCPU goes back to the guest at once instead of
//! waiting for the disk: its profile shows what the guest did meanwhile, as on hardware,
//! rather than the instruction that rang the bell. If KVM refuses the registration the
//! region stays on the MMIO bus and notifications are served on the vCPU thread as before.

use std::io;
use std::sync::{Arc, Mutex};

use event_manager::{EventOps, Events, MutEventSubscriber};
use kvm_ioctls::{IoEventAddress, NoDatamatch, VmFd};
use vmm_sys_util::epoll::EventSet;
use vmm_sys_util::eventfd::{EventFd, EFD_NONBLOCK};

/// Routes writes to a guest-physical MMIO address to an eventfd.
pub trait NotifyRoute: Send + Sync {
    /// From now on a write of any width to `addr` signals `event` instead of exiting.
    fn attach(&self, addr: u64, event: &EventFd) -> io::Result<()>;
    /// Undoes [`NotifyRoute::attach`] for the same `addr` and `event`.
    fn detach(&self, addr: u64, event: &EventFd) -> io::Result<()>;
}

impl NotifyRoute for VmFd {
    fn attach(&self, addr: u64, event: &EventFd) -> io::Result<()> {
        // NoDatamatch has length 0: KVM matches a write of any width at `addr`.
        self.register_ioevent(event, &IoEventAddress::Mmio(addr), NoDatamatch)
            .map_err(|e| io::Error::from_raw_os_error(e.errno()))
    }

    fn detach(&self, addr: u64, event: &EventFd) -> io::Result<()> {
        self.unregister_ioevent(event, &IoEventAddress::Mmio(addr), NoDatamatch)
            .map_err(|e| io::Error::from_raw_os_error(e.errno()))
    }
}

/// The eventfds of a device's queues and where they are registered.
pub struct QueueEvents {
    route: Arc<dyn NotifyRoute>,
    events: Vec<EventFd>,
    /// Notification address of queue `i` is `offset + i * stride` in the BAR.
    offset: u64,
    stride: u64,
    /// The BAR base the events are attached at, if they are.
    attached: Option<u64>,
    /// A refusal was logged (once per device).
    warned: bool,
}

impl QueueEvents {
    /// Eventfds for `queues` queues whose notification addresses are `offset + i * stride`
    /// inside the BAR; nothing is registered until the BAR is mapped ([`QueueEvents::move_to`]).
    pub fn new(
        route: Arc<dyn NotifyRoute>,
        queues: usize,
        offset: u64,
        stride: u64,
    ) -> io::Result<Self> {
        let events = (0..queues)
            .map(|_| EventFd::new(EFD_NONBLOCK))
            .collect::<io::Result<Vec<_>>>()?;
        Ok(QueueEvents {
            route,
            events,
            offset,
            stride,
            attached: None,
            warned: false,
        })
    }

    /// Duplicates of the eventfds, for the event loop to watch (queue `i` at index `i`).
    pub fn watch_fds(&self) -> io::Result<Vec<EventFd>> {
        self.events.iter().map(EventFd::try_clone).collect()
    }

    /// The BAR base the eventfds are attached at, if they are.
    pub fn attached_at(&self) -> Option<u64> {
        self.attached
    }

    /// Signals queue `queue`'s eventfd, so that the event loop serves the queue again after
    /// what it is already waiting on; false if it cannot.
    pub fn requeue(&self, queue: usize) -> bool {
        self.events.get(queue).is_some_and(|e| e.write(1).is_ok())
    }

    fn addr(&self, base: u64, queue: usize) -> u64 {
        base + self.offset + self.stride * queue as u64
    }

    fn detach_first(&self, base: u64, n: usize) {
        for (i, e) in self.events.iter().enumerate().take(n) {
            if let Err(err) = self.route.detach(self.addr(base, i), e) {
                log::warn!("virtio: ioeventfd of queue {i}: cannot unregister: {err}");
            }
        }
    }

    /// The BAR is now mapped at `base` (or, with `None`, not mapped): moves the
    /// registrations there. If any queue's registration is refused, none stays registered
    /// and notifications reach the device through its MMIO exits.
    pub fn move_to(&mut self, base: Option<u64>) {
        if self.attached == base {
            return;
        }
        if let Some(old) = self.attached.take() {
            self.detach_first(old, self.events.len());
        }
        let Some(base) = base else {
            return;
        };
        for (i, e) in self.events.iter().enumerate() {
            if let Err(err) = self.route.attach(self.addr(base, i), e) {
                if !self.warned {
                    log::warn!(
                        "virtio: ioeventfd for queue {i} at {:#x} refused ({err}); \
                         notifications are served on the vCPU thread",
                        self.addr(base, i)
                    );
                    self.warned = true;
                }
                self.detach_first(base, i);
                return;
            }
        }
        log::debug!(
            "virtio: queue notifications at {base:#x} + {:#x} go to ioeventfds",
            self.offset
        );
        self.attached = Some(base);
    }
}

/// A device whose queues the event loop serves when their eventfds fire.
pub trait QueueNotify: Send {
    /// Queue `index`'s eventfd counted `count` notifications (0: a wake-up whose count was
    /// already read): serve the queue.
    fn notify_event(&mut self, index: usize, count: u64);
    /// The eventfds cannot be watched: take them off KVM so that notifications exit to the
    /// device again, and serve every queue once for any the eventfds swallowed.
    fn stop_queue_events(&mut self);
}

/// The event loop's subscriber for one device's queue eventfds.
pub struct QueueEventWatch {
    device: Arc<Mutex<dyn QueueNotify>>,
    events: Vec<EventFd>,
}

impl QueueEventWatch {
    /// Watches `events` (queue `i` at index `i`) for `device`.
    pub fn new(device: Arc<Mutex<dyn QueueNotify>>, events: Vec<EventFd>) -> Self {
        QueueEventWatch { device, events }
    }
}

impl MutEventSubscriber for QueueEventWatch {
    fn init(&mut self, ops: &mut EventOps) {
        for (i, e) in self.events.iter().enumerate() {
            let data = u32::try_from(i).unwrap_or(u32::MAX);
            if let Err(err) = ops.add(Events::with_data(e, data, EventSet::IN)) {
                log::warn!(
                    "virtio: cannot watch the eventfd of queue {i} ({err:?}); notifications \
                     are served on the vCPU thread"
                );
                self.device
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .stop_queue_events();
                return;
            }
        }
    }

    fn process(&mut self, events: Events, _ops: &mut EventOps) {
        let i = events.data() as usize;
        let Some(e) = self.events.get(i) else {
            return;
        };
        // Non-blocking: the count may already have been read; serve the queue anyway.
        let count = e.read().unwrap_or(0);
        self.device
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .notify_event(i, count);
    }
}

/// A route for tests: records where eventfds are attached, refuses attaching at `refuse`,
/// and panics on a detach of an address that is not attached.
#[cfg(test)]
#[derive(Default)]
pub(crate) struct Recorder {
    pub(crate) attached: Mutex<Vec<u64>>,
    pub(crate) refuse: Option<u64>,
}

#[cfg(test)]
impl NotifyRoute for Recorder {
    fn attach(&self, addr: u64, _event: &EventFd) -> io::Result<()> {
        if Some(addr) == self.refuse {
            return Err(io::Error::from_raw_os_error(libc::ENOSPC));
        }
        self.attached.lock().unwrap().push(addr);
        Ok(())
    }
    fn detach(&self, addr: u64, _event: &EventFd) -> io::Result<()> {
        let mut a = self.attached.lock().unwrap();
        let pos = a
            .iter()
            .position(|&x| x == addr)
            .expect("detach of an unattached addr");
        a.remove(pos);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registrations_follow_the_bar() {
        let rec = Arc::new(Recorder::default());
        let mut q = QueueEvents::new(rec.clone(), 2, 0x3000, 4).unwrap();
        assert!(
            rec.attached.lock().unwrap().is_empty(),
            "nothing before the BAR is mapped"
        );
        q.move_to(Some(0xc000_0000));
        assert_eq!(
            *rec.attached.lock().unwrap(),
            vec![0xc000_3000, 0xc000_3004]
        );
        q.move_to(Some(0xd000_0000));
        assert_eq!(
            *rec.attached.lock().unwrap(),
            vec![0xd000_3000, 0xd000_3004]
        );
        assert_eq!(q.attached_at(), Some(0xd000_0000));
        q.move_to(None);
        assert!(rec.attached.lock().unwrap().is_empty());
        assert_eq!(q.attached_at(), None);
    }

    #[test]
    fn a_refused_registration_leaves_none_behind() {
        let rec = Arc::new(Recorder {
            refuse: Some(0xc000_3004),
            ..Recorder::default()
        });
        let mut q = QueueEvents::new(rec.clone(), 3, 0x3000, 4).unwrap();
        q.move_to(Some(0xc000_0000));
        assert!(rec.attached.lock().unwrap().is_empty());
        assert_eq!(q.attached_at(), None, "served through exits");
        // Elsewhere it works again.
        q.move_to(Some(0xe000_0000));
        assert_eq!(rec.attached.lock().unwrap().len(), 3);
    }

    #[test]
    fn kvm_accepts_and_releases_a_notification_ioeventfd() {
        let kvm = kvm_ioctls::Kvm::new().expect("/dev/kvm");
        let vm: Arc<dyn NotifyRoute> = Arc::new(kvm.create_vm().expect("a VM"));
        let mut q = QueueEvents::new(vm.clone(), 1, 0x3000, 4).unwrap();
        q.move_to(Some(0xc000_0000));
        assert_eq!(
            q.attached_at(),
            Some(0xc000_0000),
            "KVM refused the ioeventfd"
        );
        q.move_to(Some(0xc001_0000));
        assert_eq!(q.attached_at(), Some(0xc001_0000));
        // KVM refuses a duplicate registration: this works only if the move released it.
        q.move_to(Some(0xc000_0000));
        assert_eq!(
            q.attached_at(),
            Some(0xc000_0000),
            "the old registration was kept"
        );
        q.move_to(None);
        assert_eq!(q.attached_at(), None);
        // KVM refuses a second eventfd at an address that still has one: a fresh set of
        // eventfds registers there only if the last move really unregistered.
        let mut fresh = QueueEvents::new(vm, 1, 0x3000, 4).unwrap();
        fresh.move_to(Some(0xc000_0000));
        assert_eq!(
            fresh.attached_at(),
            Some(0xc000_0000),
            "a registration was left behind"
        );
    }
}
