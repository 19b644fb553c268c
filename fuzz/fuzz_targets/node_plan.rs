//! Node-state parsing and the stage machine; the property is `nodewright_fuzz::node_plan`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| nodewright_fuzz::node_plan(data));
