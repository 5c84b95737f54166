//! The cluster log, `ndb_<NodeId>_cluster.log` in ndb_mgmd's DataDir, in NDB's line format:
//!
//! ```text
//! 2024-05-02 10:01:07 [MgmtSrvr] INFO     -- Node 1: Started (version rndb-0.1.0)
//! ```
//!
//! Each event has a category, a priority (0 most important .. 15) and a severity, as NDB's. An
//! event is written when the log is on, its severity is enabled (`CLUSTERLOG ON|OFF|TOGGLE
//! <severity>`), and its priority is at most its category's threshold for the reporting node
//! (`N CLUSTERLOG CATEGORY=level`).

use std::collections::BTreeMap;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

/// NDB's event categories.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Category {
    Startup,
    Shutdown,
    Statistics,
    Checkpoint,
    NodeRestart,
    Connection,
    Info,
    Error,
    Congestion,
    Debug,
    Backup,
    Schema,
}

impl Category {
    pub const ALL: [Category; 12] = [
        Category::Startup,
        Category::Shutdown,
        Category::Statistics,
        Category::Checkpoint,
        Category::NodeRestart,
        Category::Connection,
        Category::Info,
        Category::Error,
        Category::Congestion,
        Category::Debug,
        Category::Backup,
        Category::Schema,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Category::Startup => "STARTUP",
            Category::Shutdown => "SHUTDOWN",
            Category::Statistics => "STATISTICS",
            Category::Checkpoint => "CHECKPOINT",
            Category::NodeRestart => "NODERESTART",
            Category::Connection => "CONNECTION",
            Category::Info => "INFO",
            Category::Error => "ERROR",
            Category::Congestion => "CONGESTION",
            Category::Debug => "DEBUG",
            Category::Backup => "BACKUP",
            Category::Schema => "SCHEMA",
        }
    }

    pub fn parse(text: &str) -> Option<Category> {
        Category::ALL
            .into_iter()
            .find(|c| c.name().eq_ignore_ascii_case(text))
    }

    /// The threshold a category starts with (rndb's defaults, after ndb_mgmd's): events of a
    /// higher priority number are not written.
    fn default_threshold(self) -> u8 {
        match self {
            Category::Connection => 8,
            Category::Error | Category::Backup => 15,
            Category::Debug => 0,
            _ => 7,
        }
    }
}

/// NDB's severities, most severe last (`CLUSTERLOG INFO` lists them in this order).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Severity {
    Debug,
    Info,
    Warning,
    Error,
    Critical,
    Alert,
}

impl Severity {
    pub const ALL: [Severity; 6] = [
        Severity::Debug,
        Severity::Info,
        Severity::Warning,
        Severity::Error,
        Severity::Critical,
        Severity::Alert,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Severity::Debug => "DEBUG",
            Severity::Info => "INFO",
            Severity::Warning => "WARNING",
            Severity::Error => "ERROR",
            Severity::Critical => "CRITICAL",
            Severity::Alert => "ALERT",
        }
    }

    pub fn parse(text: &str) -> Option<Severity> {
        Severity::ALL
            .into_iter()
            .find(|s| s.name().eq_ignore_ascii_case(text))
    }
}

/// One event: the node it is about (NDB's "reporting node"), and its text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    pub node: u16,
    pub category: Category,
    pub priority: u8,
    pub severity: Severity,
    pub text: String,
}

impl Event {
    pub fn new(
        node: u16,
        category: Category,
        priority: u8,
        severity: Severity,
        text: impl Into<String>,
    ) -> Event {
        Event {
            node,
            category,
            priority,
            severity,
            text: text.into(),
        }
    }
}

/// The log file and its filters.
#[derive(Debug)]
pub struct ClusterLog {
    path: PathBuf,
    file: File,
    /// The local time zone, read at start-up (before any thread: see `ndb_mgmd`'s main).
    offset: time::UtcOffset,
    /// `CLUSTERLOG ON` / `OFF` without a severity.
    pub enabled: bool,
    severities: [bool; 6],
    /// Per category: the default threshold, and overrides per reporting node.
    thresholds: BTreeMap<(Category, Option<u16>), u8>,
}

impl ClusterLog {
    /// Opens (appends to) `ndb_<me>_cluster.log` in `dir`.
    pub fn open(dir: &Path, me: u16, offset: time::UtcOffset) -> std::io::Result<ClusterLog> {
        let path = dir.join(format!("ndb_{me}_cluster.log"));
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)?;
        let thresholds = Category::ALL
            .into_iter()
            .map(|c| ((c, None), c.default_threshold()))
            .collect();
        Ok(ClusterLog {
            path,
            file,
            offset,
            enabled: true,
            severities: Severity::ALL.map(|s| s != Severity::Debug),
            thresholds,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Writes `event` if the filters let it through (a write error is logged, not fatal: the
    /// cluster goes on without its log).
    pub fn write(&mut self, event: &Event) {
        if !self.passes(event) {
            return;
        }
        let now = time::OffsetDateTime::now_utc().to_offset(self.offset);
        let line = format!(
            "{:04}-{:02}-{:02} {:02}:{:02}:{:02} [MgmtSrvr] {:<8} -- Node {}: {}\n",
            now.year(),
            u8::from(now.month()),
            now.day(),
            now.hour(),
            now.minute(),
            now.second(),
            event.severity.name(),
            event.node,
            event.text
        );
        tracing::info!("cluster log: Node {}: {}", event.node, event.text);
        if let Err(e) = self.file.write_all(line.as_bytes()) {
            tracing::error!("write the cluster log {}: {e}", self.path.display());
        }
    }

    fn passes(&self, event: &Event) -> bool {
        self.enabled
            && self.severity_enabled(event.severity)
            && event.priority <= self.threshold(event.category, event.node)
    }

    pub fn severity_enabled(&self, severity: Severity) -> bool {
        self.severities[severity as usize]
    }

    /// `CLUSTERLOG ON|OFF|TOGGLE <severity>`; returns the new setting.
    pub fn set_severity(&mut self, severity: Severity, on: Option<bool>) -> bool {
        let slot = &mut self.severities[severity as usize];
        *slot = on.unwrap_or(!*slot);
        *slot
    }

    /// `N CLUSTERLOG CATEGORY=level` (`node` None: every node).
    pub fn set_threshold(&mut self, category: Category, node: Option<u16>, level: u8) {
        if node.is_none() {
            self.thresholds.retain(|(c, _), _| *c != category);
        }
        self.thresholds.insert((category, node), level);
    }

    fn threshold(&self, category: Category, node: u16) -> u8 {
        self.thresholds
            .get(&(category, Some(node)))
            .or_else(|| self.thresholds.get(&(category, None)))
            .copied()
            .unwrap_or(0)
    }

    /// `Severities enabled: INFO WARNING ERROR CRITICAL ALERT` (NDB's `CLUSTERLOG INFO`).
    pub fn describe_severities(&self) -> String {
        let on: Vec<&str> = Severity::ALL
            .into_iter()
            .filter(|s| self.severity_enabled(*s))
            .map(Severity::name)
            .collect();
        on.join(" ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_have_ndbs_format_and_filters_apply() {
        let dir = tempfile::tempdir().expect("temporary directory");
        let mut log = ClusterLog::open(dir.path(), 49, time::UtcOffset::UTC).expect("open");
        let started = Event::new(
            1,
            Category::Startup,
            1,
            Severity::Info,
            "Started (version x)",
        );
        log.write(&started);
        // Priority 9 is above CONNECTION's default threshold of 8: not written.
        log.write(&Event::new(
            49,
            Category::Connection,
            9,
            Severity::Info,
            "noise",
        ));
        log.write(&Event::new(
            49,
            Category::Connection,
            8,
            Severity::Alert,
            "Node 2 Disconnected",
        ));
        log.set_severity(Severity::Alert, Some(false));
        log.write(&Event::new(
            49,
            Category::Connection,
            8,
            Severity::Alert,
            "hidden",
        ));
        log.set_threshold(Category::Startup, Some(1), 0);
        log.write(&started);
        let text = std::fs::read_to_string(log.path()).expect("read the log");
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2, "{text}");
        assert!(
            lines[0].ends_with(" [MgmtSrvr] INFO     -- Node 1: Started (version x)"),
            "{}",
            lines[0]
        );
        assert!(lines[1].ends_with(" [MgmtSrvr] ALERT    -- Node 49: Node 2 Disconnected"));
        assert_eq!(lines[0].as_bytes()[4], b'-');
        assert_eq!(log.describe_severities(), "INFO WARNING ERROR CRITICAL");
    }
}
