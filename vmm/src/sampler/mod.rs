//! Sample sources: what makes a vCPU take a sample. Each source delivers a sampling tick
//! (`signals::tick`) to the vCPU thread it samples, so the sample is taken on that thread from
//! its own registers, and no other thread has to be scheduled for it.
//!
//! Today the one source is a POSIX timer per vCPU ([`timer`]). A timer is armed only while
//! some started object's affinity includes its vCPU. Ticks that arrive before the previous one
//! was taken, and expirations the kernel folded into one signal (timer overruns), are counted
//! as lost samples.

pub mod timer;

pub use timer::{interval_duration, SampleTimer};
