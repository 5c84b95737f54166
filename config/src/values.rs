//! The second pass: each entry checked against the parameter table (known name, right type,
//! inside the range, given once) and turned into a typed value.

use std::collections::{HashMap, HashSet};

use crate::error::Diag;
use crate::params::{self, ParamInfo, ParamType, SectionKind};
use crate::syntax::{RawEntry, RawSection, Target};

/// A parameter value after its type was checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Value {
    Int(u64),
    Bool(bool),
    Text(String),
}

/// A value and the line it came from.
#[derive(Clone, Debug)]
pub(crate) struct Setting {
    pub value: Value,
    pub line: usize,
}

/// Settings of one section, keyed by the parameter's NDB spelling.
pub(crate) type Settings = HashMap<&'static str, Setting>;

/// One section whose entries passed (or were dropped by) the checks.
#[derive(Clone, Debug)]
pub(crate) struct TypedSection {
    pub line: usize,
    pub name: String,
    pub target: Target,
    pub settings: Settings,
    /// Parameters given with a wrong value (already reported), so later passes neither report
    /// them missing nor invent a value for them.
    pub rejected: HashSet<&'static str>,
}

/// Checks every entry of every section, keeping the sound values and reporting the rest.
pub(crate) fn type_sections(raw: Vec<RawSection>, diag: &mut Diag) -> Vec<TypedSection> {
    raw.into_iter()
        .map(|section| type_section(section, diag))
        .collect()
}

fn type_section(raw: RawSection, diag: &mut Diag) -> TypedSection {
    let kind = match raw.target {
        Target::Instance(kind) | Target::Default(kind) => kind,
    };
    let mut settings = Settings::new();
    let mut rejected = HashSet::new();
    let mut first_line: HashMap<&'static str, usize> = HashMap::new();
    for entry in &raw.entries {
        let Some(info) = params::find_param(kind, &entry.key) else {
            unknown_parameter(kind, &raw.name, entry, diag);
            continue;
        };
        if !info.implemented {
            diag.warn(
                entry.line,
                format!(
                    "[{}] {}: recognised but not implemented by rndb; the value is ignored",
                    raw.name, info.name
                ),
            );
            continue;
        }
        if let Some(&first) = first_line.get(info.name) {
            let message = format!("given twice in one section (first at line {first})");
            diag.error(entry.line, Some(&raw.name), Some(info.name), message);
            continue;
        }
        first_line.insert(info.name, entry.line);
        match parse_value(info, &entry.value) {
            Ok(value) => {
                settings.insert(
                    info.name,
                    Setting {
                        value,
                        line: entry.line,
                    },
                );
            }
            Err(message) => {
                rejected.insert(info.name);
                diag.error(entry.line, Some(&raw.name), Some(info.name), message);
            }
        }
    }
    TypedSection {
        line: raw.line,
        name: raw.name,
        target: raw.target,
        settings,
        rejected,
    }
}

/// Reports a name the table does not know for this section, with the closest known name.
fn unknown_parameter(kind: SectionKind, section: &str, entry: &RawEntry, diag: &mut Diag) {
    let elsewhere = params::sections_of(&entry.key);
    let message = if elsewhere.is_empty() {
        match params::closest_param(kind, &entry.key) {
            // A suggestion that shares little with the name misleads more than it helps.
            Some(closest) if close_enough(&entry.key, closest) => {
                format!("unknown parameter; did you mean {closest}?")
            }
            Some(closest) => format!("unknown parameter (the closest known name is {closest})"),
            None => "unknown parameter".to_string(),
        }
    } else {
        let names: Vec<String> = elsewhere.iter().map(|k| format!("[{k}]")).collect();
        format!(
            "unknown parameter in [{kind}] sections; it belongs in {}",
            names.join(", ")
        )
    };
    diag.error(entry.line, Some(section), Some(&entry.key), message);
}

/// True when `closest` is within a third of the name's length (at least 2) of `name`.
fn close_enough(name: &str, closest: &str) -> bool {
    let distance = params::edit_distance(&name.to_ascii_lowercase(), &closest.to_ascii_lowercase());
    distance <= (name.chars().count() / 3).max(2)
}

/// Parses `text` as the table says, and checks the range of numbers.
pub(crate) fn parse_value(info: &ParamInfo, text: &str) -> Result<Value, String> {
    match info.ty {
        ParamType::Int | ParamType::Size => {
            let n = parse_number(text).ok_or_else(|| type_error(info.ty, text))?;
            match n {
                Some(n) if (info.min..=info.max).contains(&n) => Ok(Value::Int(n)),
                _ => Err(format!("value {text} out of range {}", info.range_text())),
            }
        }
        ParamType::Bool => parse_bool(text)
            .map(Value::Bool)
            .ok_or_else(|| type_error(info.ty, text)),
        ParamType::Path if text.is_empty() => Err(type_error(info.ty, text)),
        ParamType::String | ParamType::Path => Ok(Value::Text(text.to_string())),
    }
}

fn type_error(ty: ParamType, text: &str) -> String {
    let expected = match ty {
        ParamType::Int => "an integer",
        ParamType::Size => "a size (a number with an optional K, M or G suffix)",
        ParamType::Bool => "a boolean (true/false, yes/no, y/n, on/off, 1/0)",
        ParamType::String => "text",
        ParamType::Path => "a path",
    };
    format!("expected {expected}, got `{text}`")
}

/// Reads digits with an optional K/M/G suffix (1024-based, any case).
///
/// `None` when the text is not a number; `Some(None)` when it is one too large for 64 bits.
pub(crate) fn parse_number(text: &str) -> Option<Option<u64>> {
    let (digits, multiplier) = match text.char_indices().last() {
        Some((at, 'k' | 'K')) => (&text[..at], 1u64 << 10),
        Some((at, 'm' | 'M')) => (&text[..at], 1u64 << 20),
        Some((at, 'g' | 'G')) => (&text[..at], 1u64 << 30),
        _ => (text, 1),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(
        digits
            .parse::<u64>()
            .ok()
            .and_then(|n| n.checked_mul(multiplier)),
    )
}

/// Reads a boolean the way NDB does, plus on/off.
pub(crate) fn parse_bool(text: &str) -> Option<bool> {
    match text.to_ascii_lowercase().as_str() {
        "true" | "yes" | "y" | "1" | "on" => Some(true),
        "false" | "no" | "n" | "0" | "off" => Some(false),
        _ => None,
    }
}
