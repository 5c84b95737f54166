//! libFuzzer entry for the `redo` target of rndb-fuzz.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| rndb_fuzz::targets::redo(data));
