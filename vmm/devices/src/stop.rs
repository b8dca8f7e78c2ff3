//! What a guest asks of the run through a device: to power off, to reset, or to end with a
//! value (isa-debug-exit). Devices send it to a [`StopRequest`]; the VMM's stop signal is one,
//! and turns it into the run's outcome and exit status.

/// An end of the run the guest asks for through a device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GuestStop {
    /// The guest wrote this value to the isa-debug-exit port.
    DebugExit(u32),
    /// The guest asked for a reset (i8042 command 0xFE, port 0x92, the reset control register).
    Reset,
    /// The guest powered off (ACPI sleep state S5).
    PowerOff,
}

/// Where devices send the guest's request to end the run. Which request wins when several
/// come is the receiver's to decide (the VMM's stop signal keeps the first).
pub trait StopRequest: Send + Sync {
    /// Asks for the end of the run.
    fn request_stop(&self, stop: GuestStop);
}

/// A receiver that keeps the first request, for the devices' tests.
#[cfg(test)]
#[derive(Debug, Default)]
pub(crate) struct StopLog(std::sync::Mutex<Option<GuestStop>>);

#[cfg(test)]
impl StopLog {
    /// True once a request was made.
    pub(crate) fn is_requested(&self) -> bool {
        self.outcome().is_some()
    }

    /// The first request, if any.
    pub(crate) fn outcome(&self) -> Option<GuestStop> {
        *self.0.lock().unwrap()
    }
}

#[cfg(test)]
impl StopRequest for StopLog {
    fn request_stop(&self, stop: GuestStop) {
        self.0.lock().unwrap().get_or_insert(stop);
    }
}
