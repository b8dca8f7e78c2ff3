use super::record::{self, Mode, Record};
use super::*;
use crate::sampler::events;

fn cpu_clock() -> EventSpec {
    events::by_name("cpu-clock")
        .and_then(|e| e.spec(events::Vendor::host()))
        .unwrap()
}

#[test]
fn a_thread_s_clock_samples_into_its_ring_with_ids_and_times() {
    let got = std::thread::spawn(|| {
        let (mut ev, mut ring) = match ThreadEvents::open_on_current_thread(&[(2, cpu_clock())], 3)
        {
            Ok(x) => x,
            Err(e) => {
                eprintln!("no ring events for this user here ({e}); skipping");
                return None;
            }
        };
        assert!(ev.has(2) && !ev.has(0));
        ev.set(2, Some(100_000)).unwrap();
        let mut bytes = Vec::new();
        let mut samples = Vec::new();
        // This thread's own CPU time drives the clock: however loaded the host, it gets there.
        while samples.len() < 5 {
            std::hint::black_box(&mut bytes);
            assert!(ring.take(&mut bytes));
            record::parse(&bytes, |r| {
                if let Record::Sample { id, time, mode, .. } = r {
                    samples.push((ring.trigger(id), time, mode));
                }
            })
            .unwrap();
            bytes.clear();
        }
        ev.set(2, None).unwrap();
        Some(samples)
    })
    .join()
    .unwrap();
    let Some(samples) = got else { return };
    // A host thread: every sample is host time, of trigger 2, in time order.
    assert!(samples
        .iter()
        .all(|(t, _, m)| *t == Some(2) && *m == Mode::Host));
    assert!(samples.windows(2).all(|w| w[0].1 <= w[1].1));
}
