//! Proves that no input makes the parser panic: arbitrary text, line soup built from config
//! syntax, and valid files with random lines replaced, duplicated or dropped.

use std::path::Path;

use proptest::prelude::*;

const VALID: &str = include_str!("../examples/local.ini");

/// Fragments that reach deep into the parser: headers, known parameters, odd values.
fn line() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("[ndbd]".to_string()),
        Just("[ndbd default]".to_string()),
        Just("[api]".to_string()),
        Just("[mgm]".to_string()),
        Just("[tcp]".to_string()),
        Just("[shm]".to_string()),
        Just("[shm default]".to_string()),
        Just("[computer]".to_string()),
        (0u32..300).prop_map(|n| format!("NodeId={n}")),
        (0u32..300).prop_map(|n| format!("NodeId1={n}")),
        (0u32..300).prop_map(|n| format!("NodeId2={n}")),
        (0u32..6).prop_map(|n| format!("NoOfReplicas={n}")),
        (0u32..200).prop_map(|n| format!("Nodegroup={n}")),
        "(UseShm|Checksum)=(1|0|yes|x)",
        "HostName=(h|127.0.0.1|)",
        "DataMemory=[0-9]{0,25}[kKmMgGtT]?",
        "[A-Za-z]{1,12}[=:][ -~]{0,12}",
        "[ -~]{0,30}",
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn arbitrary_text_never_panics(text in "\\PC{0,400}") {
        let _ = rndb_config::parse_str(&text, Path::new("p.ini"));
    }

    #[test]
    fn config_shaped_text_never_panics(lines in prop::collection::vec(line(), 0..40)) {
        let _ = rndb_config::parse_str(&lines.join("\n"), Path::new("p.ini"));
    }

    #[test]
    fn mutated_valid_files_never_panic(
        edits in prop::collection::vec((0usize..200, 0u8..3, line()), 0..12),
    ) {
        let mut lines: Vec<String> = VALID.lines().map(String::from).collect();
        for (at, op, replacement) in edits {
            let at = at % (lines.len() + 1);
            match op {
                0 if at < lines.len() => lines[at] = replacement,
                1 => lines.insert(at, replacement),
                _ if at < lines.len() => { lines.remove(at); }
                _ => lines.push(replacement),
            }
        }
        let _ = rndb_config::parse_str(&lines.join("\n"), Path::new("p.ini"));
    }
}
