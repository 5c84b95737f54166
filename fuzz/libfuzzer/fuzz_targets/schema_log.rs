//! libFuzzer entry for the `schema_log` target of rndb-fuzz.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| rndb_fuzz::targets::schema_log(data));
