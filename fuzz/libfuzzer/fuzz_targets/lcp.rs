//! libFuzzer entry for the `lcp` target of rndb-fuzz.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| rndb_fuzz::targets::lcp(data));
