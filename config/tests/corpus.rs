//! Proves that every file of the corpus is read as its `.expected` sibling says: each valid file
//! parses with the stated values, groups, links and warnings; each invalid file produces exactly
//! the stated errors, each on its line.

use std::fs;
use std::path::{Path, PathBuf};

use rndb_config::{parse_file, ClusterConfig, ConfigErrors, NodeId};

fn corpus_files(kind: &str) -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/corpus")
        .join(kind);
    let mut files: Vec<PathBuf> = fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
        .map(|entry| entry.expect("directory entry").path())
        .filter(|path| path.extension().is_some_and(|e| e == "ini"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no .ini files in {}", dir.display());
    files
}

/// The meaningful lines of the `.expected` sibling of `ini`.
fn expectations(ini: &Path) -> Vec<String> {
    let path = ini.with_extension("expected");
    let text = fs::read_to_string(&path).unwrap_or_default();
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with("//"))
        .map(String::from)
        .collect()
}

/// Splits `LINE: substring` (the line may be preceded by `warning `).
fn line_and_text(spec: &str) -> (usize, &str) {
    let (line, text) = spec
        .split_once(':')
        .unwrap_or_else(|| panic!("bad expectation `{spec}`"));
    (
        line.trim()
            .parse()
            .unwrap_or_else(|_| panic!("bad line in `{spec}`")),
        text.trim(),
    )
}

fn id(text: &str) -> NodeId {
    NodeId(
        text.parse()
            .unwrap_or_else(|_| panic!("bad node id `{text}`")),
    )
}

/// Checks one fact about a parsed config; returns a complaint when it does not hold.
fn check_fact(config: &ClusterConfig, spec: &str) -> Option<String> {
    if let Some(rest) = spec.strip_prefix("warning ") {
        let (line, text) = line_and_text(rest);
        let found = config
            .warnings
            .iter()
            .any(|w| w.line == line && w.message.contains(text));
        return (!found)
            .then(|| format!("no warning `{text}` at line {line}: {:?}", config.warnings));
    }
    let (lhs, expected) = spec
        .split_once(" = ")
        .or_else(|| spec.strip_suffix(" =").map(|l| (l, "")))
        .unwrap_or_else(|| panic!("bad fact `{spec}`"));
    let words: Vec<&str> = lhs.split_whitespace().collect();
    let actual = match words.as_slice() {
        ["node", n, param] => config.param_value(id(n), param),
        ["group", g] => config
            .node_groups
            .iter()
            .find(|group| group.id.to_string() == *g)
            .map(|group| {
                group
                    .nodes
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(",")
            }),
        ["link", a, b] => config.link(id(a), id(b)).map(|l| l.kind.to_string()),
        ["link", a, b, param] => config.link(id(a), id(b)).and_then(|l| l.param_value(param)),
        _ => panic!("bad fact `{spec}`"),
    };
    (actual.as_deref() != Some(expected)).then(|| format!("`{spec}`: got {actual:?}"))
}

#[test]
fn valid_files_parse_as_expected() {
    let mut failures = Vec::new();
    for file in corpus_files("valid") {
        let config = match parse_file(&file) {
            Ok(config) => config,
            Err(errors) => {
                failures.push(format!("{}: unexpected errors:\n{errors}", file.display()));
                continue;
            }
        };
        for spec in expectations(&file) {
            if let Some(complaint) = check_fact(&config, &spec) {
                failures.push(format!("{}: {complaint}", file.display()));
            }
        }
        let expects_warnings = expectations(&file)
            .iter()
            .any(|s| s.starts_with("warning "));
        if !expects_warnings && !config.warnings.is_empty() {
            failures.push(format!(
                "{}: unexpected warnings {:?}",
                file.display(),
                config.warnings
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

fn check_errors(file: &Path, errors: &ConfigErrors, failures: &mut Vec<String>) {
    let specs = expectations(file);
    let (warning_specs, error_specs): (Vec<&String>, Vec<&String>) =
        specs.iter().partition(|s| s.starts_with("warning "));
    for spec in &error_specs {
        let (line, text) = line_and_text(spec);
        if !errors
            .iter()
            .any(|e| e.line == line && e.to_string().contains(text))
        {
            failures.push(format!("{}: missing error `{spec}`", file.display()));
        }
    }
    for spec in &warning_specs {
        let (line, text) = line_and_text(&spec["warning ".len()..]);
        if !errors
            .warnings
            .iter()
            .any(|w| w.line == line && w.message.contains(text))
        {
            failures.push(format!("{}: missing warning `{spec}`", file.display()));
        }
    }
    if errors.len() != error_specs.len() {
        failures.push(format!(
            "{}: {} errors expected, {} found:\n{errors}",
            file.display(),
            error_specs.len(),
            errors.len()
        ));
    }
}

#[test]
fn invalid_files_report_every_expected_error() {
    let mut failures = Vec::new();
    for file in corpus_files("invalid") {
        assert!(
            file.with_extension("expected").exists(),
            "{} has no .expected",
            file.display()
        );
        match parse_file(&file) {
            Ok(_) => failures.push(format!("{}: parsed without error", file.display())),
            Err(errors) => check_errors(&file, &errors, &mut failures),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn errors_name_the_file() {
    for file in corpus_files("invalid") {
        let errors = parse_file(&file).expect_err("invalid file");
        for error in &errors {
            assert_eq!(error.file, file);
            assert!(error.to_string().starts_with(&file.display().to_string()));
        }
    }
}
