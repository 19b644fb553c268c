//! The webhook's whole request path; the property is `nodewright_fuzz::admission`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| nodewright_fuzz::admission(data));
