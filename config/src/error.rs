//! Errors: every problem the parser finds, each with its file, line, section and parameter.

use std::fmt;
use std::path::{Path, PathBuf};

use crate::model::ConfigWarning;

/// One problem found in a config file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    /// The file the problem is in.
    pub file: PathBuf,
    /// The 1-based line of the problem; 0 when it concerns the whole file (no data node, the
    /// file cannot be read).
    pub line: usize,
    /// The section as written (lower-cased, e.g. `ndbd default`), when the problem is inside one.
    pub section: Option<String>,
    /// The parameter as NDB spells it (or as written, when it is unknown).
    pub parameter: Option<String>,
    /// What is wrong, in words.
    pub message: String,
}

impl fmt::Display for ConfigError {
    /// Prints `file:line: [section] Parameter: message`, leaving out the parts that are absent.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file.display())?;
        if self.line > 0 {
            write!(f, ":{}", self.line)?;
        }
        f.write_str(":")?;
        if let Some(section) = &self.section {
            write!(f, " [{section}]")?;
        }
        if let Some(parameter) = &self.parameter {
            write!(f, " {parameter}:")?;
        }
        write!(f, " {}", self.message)
    }
}

impl std::error::Error for ConfigError {}

/// Every problem found in one config file (never just the first), plus the warnings found on
/// the way, so a caller can show both.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{}", join_lines(.errors))]
pub struct ConfigErrors {
    /// The errors in the order they were found (file order within each checking pass).
    pub errors: Vec<ConfigError>,
    /// The warnings found before the parser gave up.
    pub warnings: Vec<ConfigWarning>,
}

impl ConfigErrors {
    /// One error that concerns a whole file (for example, it cannot be read).
    pub fn whole_file(file: &Path, message: impl Into<String>) -> Self {
        let error = ConfigError {
            file: file.to_path_buf(),
            line: 0,
            section: None,
            parameter: None,
            message: message.into(),
        };
        ConfigErrors {
            errors: vec![error],
            warnings: Vec::new(),
        }
    }

    /// How many errors there are.
    pub fn len(&self) -> usize {
        self.errors.len()
    }

    /// True when there are no errors (a value built by the parser never is).
    pub fn is_empty(&self) -> bool {
        self.errors.is_empty()
    }

    /// The errors, in the order they were found.
    pub fn iter(&self) -> std::slice::Iter<'_, ConfigError> {
        self.errors.iter()
    }
}

impl<'a> IntoIterator for &'a ConfigErrors {
    type Item = &'a ConfigError;
    type IntoIter = std::slice::Iter<'a, ConfigError>;

    fn into_iter(self) -> Self::IntoIter {
        self.errors.iter()
    }
}

fn join_lines(errors: &[ConfigError]) -> String {
    let lines: Vec<String> = errors.iter().map(ToString::to_string).collect();
    lines.join("\n")
}

/// The collector every checking pass writes into, so that no pass stops at the first problem.
#[derive(Debug)]
pub(crate) struct Diag {
    file: PathBuf,
    pub(crate) errors: Vec<ConfigError>,
    pub(crate) warnings: Vec<ConfigWarning>,
}

impl Diag {
    pub(crate) fn new(file: &Path) -> Self {
        Diag {
            file: file.to_path_buf(),
            errors: Vec::new(),
            warnings: Vec::new(),
        }
    }

    /// Records an error at `line` in `section`, about `parameter`.
    pub(crate) fn error(
        &mut self,
        line: usize,
        section: Option<&str>,
        parameter: Option<&str>,
        message: impl Into<String>,
    ) {
        self.errors.push(ConfigError {
            file: self.file.clone(),
            line,
            section: section.map(str::to_string),
            parameter: parameter.map(str::to_string),
            message: message.into(),
        });
    }

    /// Records a warning at `line`.
    pub(crate) fn warn(&mut self, line: usize, message: impl Into<String>) {
        self.warnings.push(ConfigWarning {
            line,
            message: message.into(),
        });
    }

    /// The errors, or nothing when the file was sound.
    ///
    /// Errors and warnings come out in line order (whole-file errors last), whichever pass
    /// found them, so the output reads down the file.
    pub(crate) fn into_result(mut self) -> Result<Vec<ConfigWarning>, ConfigErrors> {
        self.errors.sort_by_key(|e| (e.line == 0, e.line));
        self.warnings.sort_by_key(|w| w.line);
        if self.errors.is_empty() {
            Ok(self.warnings)
        } else {
            Err(ConfigErrors {
                errors: self.errors,
                warnings: self.warnings,
            })
        }
    }
}
