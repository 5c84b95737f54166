//! libFuzzer entry for the `sysfile` target of rndb-fuzz.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| rndb_fuzz::targets::sysfile(data));
