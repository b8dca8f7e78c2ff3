//! What `hvprof events` prints: the probe's answer for each event, the profile sources a
//! guest is offered here (the QUERY_INFO bitmap a VM started now reports), whether
//! `--clock cpu` works, and which sampler `--sampler auto` takes (its self-test's answer).

use profile_core::abi::supported_sources_mask;
use profile_core::SourceInfo;
use serde::Serialize;

use super::events::TASK_CLOCK;
use super::probe::ProbeReport;
use super::selftest::{Passed, Unavailable};
use super::{Clock, Sampling};

/// One event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Row {
    /// perf's name, as `--event` takes it.
    pub name: &'static str,
    /// The KPROFILE_SOURCE it serves, if any.
    pub source: Option<u32>,
    /// What it counts.
    pub what: &'static str,
    /// Whether a vCPU thread can sample on it here.
    pub present: bool,
    /// Why not, when absent.
    pub why: Option<String>,
}

/// The whole answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Listing {
    /// Every event, in table order.
    pub events: Vec<Row>,
    /// QUERY_INFO's `supported_sources`: bit `i` set when source `i` can be created.
    pub supported_sources: u64,
    /// Why `--clock cpu` cannot run here (None: it can).
    pub cpu_clock_unavailable: Option<String>,
    /// What `--sampler auto` takes here: "kernel" or "kick".
    pub sampler: &'static str,
    /// Why the in-kernel sampler cannot run here (None: it can).
    pub kernel_sampler_unavailable: Option<String>,
}

impl Listing {
    /// The listing of `report`.
    pub fn of(report: &ProbeReport) -> Listing {
        let events = report
            .events
            .iter()
            .map(|p| Row {
                name: p.def.name,
                source: p.def.source.map(|s| s.0),
                what: p.def.what,
                present: p.result.is_ok(),
                why: p.result.err().map(|a| a.to_string()),
            })
            .collect();
        let mut sources = vec![SourceInfo::profile_time()];
        let wall = Sampling::new(Clock::Wall, report).unwrap_or_else(|_| Sampling::timer_only());
        sources.extend(wall.pmu_sources());
        Listing {
            events,
            supported_sources: supported_sources_mask(&sources),
            cpu_clock_unavailable: Sampling::new(Clock::Cpu, report)
                .err()
                .map(|e| e.to_string()),
            sampler: "kick",
            kernel_sampler_unavailable: Some("not tested".into()),
        }
    }

    /// With the in-kernel sampler's self-test answer.
    pub fn with_sampler(mut self, test: Result<Passed, Unavailable>) -> Listing {
        (self.sampler, self.kernel_sampler_unavailable) = match test {
            Ok(_) => ("kernel", None),
            Err(why) => ("kick", Some(why.to_string())),
        };
        self
    }

    /// As JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_default()
    }

    /// As a table for people.
    pub fn to_text(&self) -> String {
        let mut out = format!(
            "{:<24} {:<7} {:<8} {}\n",
            "event", "source", "here", "counts / why absent"
        );
        for r in &self.events {
            let source = r.source.map_or("-".to_string(), |s| format!("{s:#04x}"));
            let (here, note) = match &r.why {
                None => ("yes", r.what.to_string()),
                Some(why) => ("no", why.clone()),
            };
            out += &format!("{:<24} {:<7} {:<8} {}\n", r.name, source, here, note);
        }
        out += &format!(
            "\nprofile sources offered to guests (QUERY_INFO supported_sources): {:#x}\n",
            self.supported_sources
        );
        out += &match &self.cpu_clock_unavailable {
            None => format!("--clock cpu: available ({TASK_CLOCK} on each vCPU thread)\n"),
            Some(why) => format!("--clock cpu: unavailable: {why}\n"),
        };
        out += &match &self.kernel_sampler_unavailable {
            None => "--sampler kernel: available (its self-test saw guest samples); \
                     --sampler auto takes it\n"
                .to_string(),
            Some(why) => {
                format!("--sampler kernel: unavailable: {why}; --sampler auto takes kick\n")
            }
        };
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sampler::events::Vendor;
    use crate::sampler::probe::{probe, Fake};

    #[test]
    fn without_a_pmu_guests_are_offered_profile_time_only() {
        let r = probe(
            &Fake(|s| if s.clock { Ok(()) } else { Err(libc::ENOENT) }),
            Vendor::Intel,
            None,
        );
        let l = Listing::of(&r);
        assert_eq!(l.supported_sources, 1);
        assert_eq!(l.cpu_clock_unavailable, None);
        let text = l.to_text();
        assert!(
            text.contains("cycles                   0x13    no"),
            "{text}"
        );
        assert!(text.contains("--clock cpu: available"), "{text}");
        let with = l.clone().with_sampler(Ok(Passed { guest: 3, host: 0 }));
        assert_eq!(
            (with.sampler, with.kernel_sampler_unavailable.as_deref()),
            ("kernel", None)
        );
        assert!(with.to_text().contains("--sampler kernel: available"));
        let without = l.clone().with_sampler(Err(Unavailable::NotAttributed(9)));
        assert_eq!(without.sampler, "kick");
        assert!(without
            .to_text()
            .contains("--sampler kernel: unavailable: this kernel does not attribute"));
        let json: serde_json::Value = serde_json::from_str(&l.to_json()).unwrap();
        assert_eq!(json["events"][0]["name"], "cycles");
        assert_eq!(json["events"][0]["present"], false);
    }

    #[test]
    fn each_present_pmu_source_sets_its_bit() {
        let r = probe(
            &Fake(|s| {
                if s.kind == 0 && s.config <= 1 {
                    Ok(())
                } else {
                    Err(libc::EACCES)
                }
            }),
            Vendor::Amd,
            Some(2),
        );
        let l = Listing::of(&r);
        // ProfileTime, TotalIssues (instructions), TotalCycles (cycles).
        assert_eq!(l.supported_sources, 1 | 1 << 0x02 | 1 << 0x13);
        assert!(l
            .cpu_clock_unavailable
            .unwrap()
            .contains("perf_event_paranoid=2"));
    }
}
