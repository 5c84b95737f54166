//! The first pass: config.ini text to sections of `name = value` entries, with the syntax
//! errors (malformed lines, unknown sections, parameters outside any section) recorded.

use crate::error::Diag;
use crate::params::{self, SectionKind};

/// What a section header names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Target {
    /// A node or link section (`[ndbd]`, `[tcp]`, …).
    Instance(SectionKind),
    /// A `[… default]` section.
    Default(SectionKind),
}

/// One section as written, before any value is interpreted.
#[derive(Clone, Debug)]
pub(crate) struct RawSection {
    /// The line of the header.
    pub line: usize,
    /// The header lower-cased with single spaces (`ndbd default`), for messages.
    pub name: String,
    pub target: Target,
    pub entries: Vec<RawEntry>,
}

/// One `name = value` line.
#[derive(Clone, Debug)]
pub(crate) struct RawEntry {
    pub line: usize,
    /// The name as written (trimmed).
    pub key: String,
    /// The value as written (trimmed, trailing `#` comment removed).
    pub value: String,
}

/// Where the entries of the current line go.
enum State {
    /// No section header yet: an entry here is an error.
    BeforeAnySection,
    /// Inside an unknown or ignored section: entries are skipped (the header was reported).
    Skipping,
    /// Inside the last section of the output.
    InSection,
}

/// Splits `text` into sections, reporting every syntax problem in `diag`.
pub(crate) fn split_sections(text: &str, diag: &mut Diag) -> Vec<RawSection> {
    let mut sections: Vec<RawSection> = Vec::new();
    let mut state = State::BeforeAnySection;
    for (index, raw_line) in text.lines().enumerate() {
        let line = index + 1;
        let content = raw_line.trim_start_matches('\u{feff}').trim();
        if content.is_empty() || content.starts_with('#') || content.starts_with(';') {
            continue;
        }
        if content.starts_with('[') {
            state = match header(content, line, diag) {
                Some(section) => {
                    sections.push(section);
                    State::InSection
                }
                None => State::Skipping,
            };
            continue;
        }
        let entry = match entry(content, line) {
            Some(entry) => entry,
            None => {
                let section = sections
                    .last()
                    .filter(|_| matches!(state, State::InSection));
                let name = section.map(|s| s.name.as_str());
                diag.error(
                    line,
                    name,
                    None,
                    format!("expected `Name=value`, got `{content}`"),
                );
                continue;
            }
        };
        match state {
            State::BeforeAnySection => diag.error(
                line,
                None,
                Some(&entry.key),
                "parameter before any section header (such as [ndbd])",
            ),
            State::Skipping => {}
            State::InSection => {
                if let Some(section) = sections.last_mut() {
                    section.entries.push(entry);
                }
            }
        }
    }
    sections
}

/// Reads a section header line; `None` when it is malformed, unknown or ignored (each reported).
fn header(content: &str, line: usize, diag: &mut Diag) -> Option<RawSection> {
    let without_comment = strip_trailing_comment(content);
    let Some(inner) = without_comment
        .strip_prefix('[')
        .and_then(|s| s.strip_suffix(']'))
    else {
        diag.error(
            line,
            None,
            None,
            format!("malformed section header `{content}`"),
        );
        return None;
    };
    let words: Vec<String> = inner
        .split_whitespace()
        .map(str::to_ascii_lowercase)
        .collect();
    let name = words.join(" ");
    let target = match words.as_slice() {
        [kind] => SectionKind::from_name(kind).map(Target::Instance),
        [kind, default] if default == "default" => {
            SectionKind::from_name(kind).map(Target::Default)
        }
        _ => None,
    };
    if let Some(target) = target {
        return Some(RawSection {
            line,
            name,
            target,
            entries: Vec::new(),
        });
    }
    let ignored = matches!(
        words.first().map(String::as_str),
        Some("computer" | "system")
    );
    if ignored {
        diag.warn(line, format!("section [{name}] is ignored by rndb"));
    } else {
        diag.error(line, Some(&name), None, unknown_section_message(&name));
    }
    None
}

/// Names the closest known section, or lists them all.
fn unknown_section_message(name: &str) -> String {
    const KNOWN: [&str; 8] = [
        "ndbd", "db", "ndb_mgmd", "mgm", "mysqld", "api", "tcp", "shm",
    ];
    let candidates = KNOWN
        .iter()
        .flat_map(|k| [k.to_string(), format!("{k} default")]);
    let closest = candidates.min_by_key(|c| params::edit_distance(name, c));
    match closest {
        Some(closest) if params::edit_distance(name, &closest) <= (name.len() / 5).max(1) => {
            format!("unknown section; did you mean [{closest}]?")
        }
        _ => "unknown section; known sections are ndbd (db), ndb_mgmd (mgm), mysqld (api), tcp \
              and shm, each also with `default`"
            .to_string(),
    }
}

/// Reads `key=value` or `key: value`; `None` when the line has neither separator or no key.
fn entry(content: &str, line: usize) -> Option<RawEntry> {
    let split_at = content.find(['=', ':'])?;
    let key = content[..split_at].trim();
    let value = strip_trailing_comment(&content[split_at + 1..]).trim();
    if key.is_empty() {
        return None;
    }
    Some(RawEntry {
        line,
        key: key.to_string(),
        value: value.to_string(),
    })
}

/// Drops a trailing `# comment`.
fn strip_trailing_comment(text: &str) -> &str {
    match text.find('#') {
        Some(at) => text[..at].trim_end(),
        None => text,
    }
}
