//! Looking a parameter up the way NDB does: the section itself, then its `[… default]`
//! sections, then the table's default.

use std::collections::{HashMap, HashSet};

use crate::params::{self, ParamDefault, SectionKind};
use crate::syntax::Target;
use crate::values::{Setting, Settings, TypedSection, Value};

/// The merged `[… default]` sections of every section kind.
#[derive(Debug, Default)]
pub(crate) struct Defaults {
    settings: HashMap<SectionKind, Settings>,
    /// Parameters a default section gave a rejected value (already reported).
    rejected: HashMap<SectionKind, HashSet<&'static str>>,
}

/// Merges every `[… default]` section per kind; a later default section overrides an earlier
/// one, and all of them apply to every section of the kind wherever it is in the file.
pub(crate) fn collect_defaults(sections: &[TypedSection]) -> Defaults {
    let mut defaults = Defaults::default();
    for section in sections {
        if let Target::Default(kind) = section.target {
            let merged = defaults.settings.entry(kind).or_default();
            for (name, setting) in &section.settings {
                merged.insert(name, setting.clone());
            }
            defaults
                .rejected
                .entry(kind)
                .or_default()
                .extend(section.rejected.iter().copied());
        }
    }
    defaults
}

/// One section seen through its defaults; `own` is `None` for an implicit link.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Layered<'a> {
    pub kind: SectionKind,
    pub own: Option<&'a TypedSection>,
    pub defaults: Option<&'a Settings>,
    pub defaults_rejected: Option<&'a HashSet<&'static str>>,
}

impl<'a> Layered<'a> {
    /// A section of `kind` (or an implicit link when `own` is `None`) with its defaults.
    pub fn new(kind: SectionKind, own: Option<&'a TypedSection>, defaults: &'a Defaults) -> Self {
        Layered {
            kind,
            own,
            defaults: defaults.settings.get(&kind),
            defaults_rejected: defaults.rejected.get(&kind),
        }
    }

    /// The value the file gives, in the section or its defaults.
    pub fn setting(&self, name: &str) -> Option<&'a Setting> {
        let own = self.own.and_then(|s| s.settings.get(name));
        own.or_else(|| self.defaults.and_then(|d| d.get(name)))
    }

    /// True when the file gave `name` a value that was rejected (and reported), in the
    /// section or, when the section leaves it out, in a default section.
    pub fn rejected(&self, name: &str) -> bool {
        let own = self.own.is_some_and(|s| s.rejected.contains(name));
        let by_default = self.setting(name).is_none()
            && self.defaults_rejected.is_some_and(|r| r.contains(name));
        own || by_default
    }

    /// The number for `name`, or `None` when neither the file nor the table gives one.
    pub fn opt_int(&self, name: &str) -> Option<u64> {
        match self.setting(name).map(|s| &s.value) {
            Some(Value::Int(n)) => Some(*n),
            _ => match self.table_default(name) {
                Some(ParamDefault::Int(n)) => Some(n),
                _ => None,
            },
        }
    }

    /// The number for `name` (0 when unset; the table gives every such parameter a default).
    pub fn int(&self, name: &str) -> u64 {
        self.opt_int(name).unwrap_or(0)
    }

    /// The number for `name` as a u32; the table's ranges keep such parameters below 2^32.
    pub fn u32(&self, name: &str) -> u32 {
        u32::try_from(self.int(name)).unwrap_or(u32::MAX)
    }

    /// The boolean for `name`.
    pub fn bool(&self, name: &str) -> bool {
        match self.setting(name).map(|s| &s.value) {
            Some(Value::Bool(b)) => *b,
            _ => matches!(self.table_default(name), Some(ParamDefault::Bool(true))),
        }
    }

    /// The text for `name`, or `None` when neither the file nor the table gives one.
    pub fn text(&self, name: &str) -> Option<String> {
        match self.setting(name).map(|s| &s.value) {
            Some(Value::Text(t)) => Some(t.clone()),
            _ => match self.table_default(name) {
                Some(ParamDefault::Text(t)) => Some(t.to_string()),
                _ => None,
            },
        }
    }

    /// The line that gave `name`, else the section's header line (0 for an implicit link).
    pub fn line_of(&self, name: &str) -> usize {
        self.setting(name).map_or(self.line(), |s| s.line)
    }

    /// The section's header line (0 for an implicit link).
    pub fn line(&self) -> usize {
        self.own.map_or(0, |s| s.line)
    }

    /// The section's name as written, for messages.
    pub fn section_name(&self) -> Option<&'a str> {
        self.own.map(|s| s.name.as_str())
    }

    fn table_default(&self, name: &str) -> Option<ParamDefault> {
        params::find_param(self.kind, name).map(|p| p.default)
    }
}
