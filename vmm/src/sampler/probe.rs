//! Which events this host lets hvprof sample on a vCPU thread: each row of the event table is
//! opened once, the way a vCPU thread will open it, and closed. The answer decides which
//! profile sources a VM offers its guest (QUERY_INFO, CREATE) and which `--event` and
//! `--clock` choices work.
//!
//! Opening goes through [`Opener`], so the decisions are tested with made-up answers.

use std::fmt;

use super::events::{EventDef, EventSpec, Vendor, EVENTS};
use super::perf;

/// Why an event is absent here.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Absence {
    /// The table has no encoding for this processor's vendor.
    NoEncoding,
    /// The host's PMU does not count it, or there is no PMU (ENOENT, ENODEV, EINVAL).
    NotCounted,
    /// The host's perf policy denies it to this user (EACCES, EPERM).
    Denied {
        /// kernel.perf_event_paranoid when the probe ran, if readable.
        paranoid: Option<i32>,
    },
    /// The kernel refuses host-side sampling of guests with it (EOPNOTSUPP): a mediated
    /// vPMU gives the counters to guests, or the PMU cannot sample.
    GuestSamplingRefused,
    /// Any other error (the errno).
    Error(i32),
}

impl fmt::Display for Absence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Absence::NoEncoding => write!(f, "no encoding for this processor vendor"),
            Absence::NotCounted => {
                write!(f, "the host's PMU does not count it (or there is no PMU)")
            }
            Absence::Denied { paranoid } => {
                write!(f, "perf events are denied to this user")?;
                if let Some(p) = paranoid {
                    write!(f, " (kernel.perf_event_paranoid={p})")?;
                }
                write!(
                    f,
                    "; run with CAP_PERFMON or lower kernel.perf_event_paranoid to 1"
                )
            }
            Absence::GuestSamplingRefused => write!(
                f,
                "the host kernel refuses host-side sampling of guests with it \
                 (a mediated vPMU is active, or the PMU cannot sample)"
            ),
            Absence::Error(e) => write!(f, "{}", std::io::Error::from_raw_os_error(*e)),
        }
    }
}

impl Absence {
    /// The absence an errno from `perf_event_open` means.
    pub fn of_errno(errno: i32, paranoid: Option<i32>) -> Absence {
        match errno {
            libc::ENOENT | libc::ENODEV | libc::EINVAL => Absence::NotCounted,
            libc::EACCES | libc::EPERM => Absence::Denied { paranoid },
            libc::EOPNOTSUPP => Absence::GuestSamplingRefused,
            e => Absence::Error(e),
        }
    }
}

/// Opens an event the way a vCPU thread does, and closes it: the seam the probe's tests
/// replace.
pub trait Opener {
    /// Ok when `spec` opened; the errno otherwise.
    fn try_open(&self, spec: &EventSpec) -> Result<(), i32>;
}

/// Opens events on the calling thread for real.
pub struct HostOpener;

impl Opener for HostOpener {
    fn try_open(&self, spec: &EventSpec) -> Result<(), i32> {
        perf::try_open(spec).map_err(|e| e.raw_os_error().unwrap_or(libc::EIO))
    }
}

/// One event's answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Probed {
    /// The event.
    pub def: &'static EventDef,
    /// Its encoding here, when present.
    pub result: Result<EventSpec, Absence>,
}

/// Every event's answer, in table order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProbeReport {
    /// One per row of the event table.
    pub events: Vec<Probed>,
}

/// kernel.perf_event_paranoid, if readable.
pub fn paranoid_level() -> Option<i32> {
    std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
        .ok()
        .and_then(|s| s.trim().parse().ok())
}

/// Probes every event of the table for `vendor` through `opener`.
pub fn probe(opener: &dyn Opener, vendor: Vendor, paranoid: Option<i32>) -> ProbeReport {
    let events = EVENTS
        .iter()
        .map(|def| {
            let result = match def.spec(vendor) {
                None => Err(Absence::NoEncoding),
                Some(spec) => opener
                    .try_open(&spec)
                    .map(|()| spec)
                    .map_err(|e| Absence::of_errno(e, paranoid)),
            };
            Probed { def, result }
        })
        .collect();
    ProbeReport { events }
}

/// Probes this host's events for the calling user.
pub fn probe_host() -> ProbeReport {
    probe(&HostOpener, Vendor::host(), paranoid_level())
}

impl ProbeReport {
    /// The events present, with their encodings.
    pub fn present(&self) -> impl Iterator<Item = (&'static EventDef, EventSpec)> + '_ {
        self.events
            .iter()
            .filter_map(|p| p.result.ok().map(|s| (p.def, s)))
    }

    /// The answer for the event named `name`.
    pub fn get(&self, name: &str) -> Option<&Probed> {
        self.events.iter().find(|p| p.def.name == name)
    }

    /// One line for the log when no hardware event is present: why, if all said the same.
    pub fn hardware_summary(&self) -> Option<String> {
        let hardware: Vec<&Probed> = self.events.iter().filter(|p| !p.def.is_clock()).collect();
        if hardware.iter().any(|p| p.result.is_ok()) {
            return None;
        }
        let first = hardware.iter().find_map(|p| match p.result {
            Err(Absence::NoEncoding) | Ok(_) => None,
            Err(a) => Some(a),
        })?;
        let same = hardware
            .iter()
            .all(|p| matches!(p.result, Err(a) if a == first || a == Absence::NoEncoding));
        Some(if same {
            format!("no PMU profile source on this host: {first}")
        } else {
            "no PMU profile source on this host (`hvprof events` says why for each)".to_string()
        })
    }
}

/// An opener that answers with a function of the event: the seam's stand-in in tests.
#[cfg(test)]
pub(crate) struct Fake(pub fn(&EventSpec) -> Result<(), i32>);

#[cfg(test)]
impl Opener for Fake {
    fn try_open(&self, spec: &EventSpec) -> Result<(), i32> {
        (self.0)(spec)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sampler::events;

    fn no_pmu(spec: &EventSpec) -> Result<(), i32> {
        if spec.clock {
            Ok(())
        } else {
            Err(libc::ENOENT)
        }
    }

    #[test]
    fn a_host_without_a_pmu_has_the_clocks_only() {
        let r = probe(&Fake(no_pmu), Vendor::Amd, Some(2));
        let present: Vec<&str> = r.present().map(|(d, _)| d.name).collect();
        assert_eq!(present, ["cpu-clock", "task-clock"]);
        assert_eq!(r.get("cycles").unwrap().result, Err(Absence::NotCounted));
        assert_eq!(
            r.hardware_summary().unwrap(),
            "no PMU profile source on this host: the host's PMU does not count it (or there is no PMU)"
        );
    }

    #[test]
    fn a_pmu_host_offers_its_events_and_raw_ones_for_its_vendor_only() {
        let all = probe(&Fake(|_| Ok(())), Vendor::Intel, None);
        assert_eq!(all.present().count(), events::EVENTS.len());
        assert_eq!(all.hardware_summary(), None);
        let other = probe(&Fake(|_| Ok(())), Vendor::Other, None);
        assert_eq!(other.get("loads").unwrap().result, Err(Absence::NoEncoding));
        assert!(other.get("cycles").unwrap().result.is_ok());
    }

    #[test]
    fn errnos_map_to_reasons_users_can_act_on() {
        let denied = probe(&Fake(|_| Err(libc::EACCES)), Vendor::Intel, Some(3));
        let task = denied.get("task-clock").unwrap().result.unwrap_err();
        assert_eq!(task, Absence::Denied { paranoid: Some(3) });
        assert!(task.to_string().contains("perf_event_paranoid=3"));
        assert!(task.to_string().contains("CAP_PERFMON"));
        // A mediated vPMU: hardware events refused for host-side guest sampling.
        let mediated = probe(
            &Fake(|s| {
                if s.clock {
                    Ok(())
                } else {
                    Err(libc::EOPNOTSUPP)
                }
            }),
            Vendor::Amd,
            None,
        );
        assert_eq!(
            mediated.get("instructions").unwrap().result,
            Err(Absence::GuestSamplingRefused)
        );
        assert!(mediated
            .hardware_summary()
            .unwrap()
            .contains("mediated vPMU"));
        assert_eq!(
            Absence::of_errno(libc::EPERM, None),
            Absence::Denied { paranoid: None }
        );
        assert_eq!(Absence::of_errno(libc::ENODEV, None), Absence::NotCounted);
        assert_eq!(
            Absence::of_errno(libc::EMFILE, None),
            Absence::Error(libc::EMFILE)
        );
    }

    #[test]
    fn mixed_reasons_point_to_the_event_list() {
        let r = probe(
            &Fake(|s| match (s.clock, s.kind) {
                (true, _) => Ok(()),
                (false, 0) => Err(libc::ENOENT),
                _ => Err(libc::EOPNOTSUPP),
            }),
            Vendor::Intel,
            None,
        );
        assert!(r.hardware_summary().unwrap().contains("hvprof events"));
    }

    #[test]
    fn the_real_probe_finds_what_a_vcpu_thread_can_open() {
        // Whatever this host answers, each present event opens again on another thread and
        // each absent one fails again with the same reason: the probe is the vCPU's view.
        let report = probe_host();
        std::thread::spawn(move || {
            for p in &report.events {
                if let Some(spec) = p.def.spec(Vendor::host()) {
                    let again = HostOpener
                        .try_open(&spec)
                        .map(|()| spec)
                        .map_err(|e| Absence::of_errno(e, paranoid_level()));
                    assert_eq!(again, p.result, "{}", p.def.name);
                }
            }
        })
        .join()
        .unwrap();
    }
}
