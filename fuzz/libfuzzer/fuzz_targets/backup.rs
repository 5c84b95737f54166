//! libFuzzer entry for the `backup` target of rndb-fuzz.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| rndb_fuzz::targets::backup(data));
