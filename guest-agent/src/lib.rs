//! The guest side of the hvprof hypercall ABI.
#![no_std]
