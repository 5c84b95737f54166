//! NDB's error codes, messages and classifications (from ndberror.c), for the codes rndb
//! produces. A code travels on the wire as a u32; the message and class are looked up here, so
//! data node and API agree on them.

use std::fmt;

/// NDB's error classification. Temporary classes mean a retry may succeed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorClass {
    NoDataFound,
    ConstraintViolation,
    TemporaryResource,
    InsufficientSpace,
    Timeout,
    Overload,
    NodeRecovery,
    NodeShutdown,
    UnknownResult,
    SchemaError,
    ApplicationError,
    InternalError,
    /// NDB's "internal temporary": an error the API is meant to handle itself by retrying (a
    /// schema request that reached a data node other than the DICT master, 702), temporary
    /// should it reach the application.
    InternalTemporary,
}

impl ErrorClass {
    /// NDB's text for the classification (ndberror.c), as `ndb_perror` prints it.
    pub fn description(self) -> &'static str {
        match self {
            ErrorClass::NoDataFound => "No data found",
            ErrorClass::ConstraintViolation => "Constraint violation",
            ErrorClass::TemporaryResource => "Temporary Resource error",
            ErrorClass::InsufficientSpace => "Insufficient space",
            ErrorClass::Timeout => "Timeout expired",
            ErrorClass::Overload => "Overload error",
            ErrorClass::NodeRecovery => "Node Recovery error",
            ErrorClass::NodeShutdown => "Node shutdown",
            ErrorClass::UnknownResult => "Unknown result error",
            ErrorClass::SchemaError => "Schema error",
            ErrorClass::ApplicationError => "Application error",
            ErrorClass::InternalError => "Internal error",
            ErrorClass::InternalTemporary => "Internal temporary",
        }
    }

    /// NDB's status of an error of this class: "Temporary error", "Permanent error" or, for
    /// an unknown result, "Unknown result".
    pub fn status(self) -> &'static str {
        match self {
            ErrorClass::UnknownResult => "Unknown result",
            class if class.is_temporary() => "Temporary error",
            _ => "Permanent error",
        }
    }

    /// True for the classes where NDB says a retry may succeed.
    pub fn is_temporary(self) -> bool {
        matches!(
            self,
            ErrorClass::TemporaryResource
                | ErrorClass::Timeout
                | ErrorClass::Overload
                | ErrorClass::NodeRecovery
                | ErrorClass::NodeShutdown
                | ErrorClass::UnknownResult
                | ErrorClass::InternalTemporary
        )
    }
}

use ErrorClass::*;

/// The exit codes an interpreted program may choose for itself (NDB's user-defined range),
/// besides 626 and 899.
pub const USER_EXIT_CODES: std::ops::RangeInclusive<u32> = 6000..=6999;

/// Every code rndb produces: code, class, NDB's message.
const ERRORS: &[(u32, ErrorClass, &str)] = &[
    (626, NoDataFound, "Tuple did not exist"),
    (630, ConstraintViolation, "Tuple already existed when attempting to insert"),
    (839, ConstraintViolation, "Illegal null attribute"),
    (840, ConstraintViolation, "Trying to set a NOT NULL attribute to NULL"),
    (893, ConstraintViolation, "Constraint violation e.g. duplicate value in unique index"),
    (899, TemporaryResource, "Rowid already allocated"),
    (878, ApplicationError, "Interpreted update on a NULL column or out of the column's range"),
    (266, Timeout, "Time-out in NDB, probably caused by deadlock"),
    (237, Timeout, "Transaction had timed out when trying to commit it"),
    (827, InsufficientSpace, "Out of memory in Ndb Kernel, table data (increase DataMemory)"),
    (902, InsufficientSpace, "Out of memory in Ndb Kernel, ordered index data (increase DataMemory)"),
    (903, InsufficientSpace, "Too many ordered indexes (increase MaxNoOfOrderedIndexes)"),
    (707, SchemaError, "No more table metadata records (increase MaxNoOfTables)"),
    (708, SchemaError, "No more attribute metadata records (increase MaxNoOfAttributes)"),
    (826, InsufficientSpace, "Too many tables and attributes (increase MaxNoOfAttributes or MaxNoOfTables)"),
    (233, TemporaryResource, "Out of transaction records in transaction coordinator (increase MaxNoOfConcurrentTransactions)"),
    (234, TemporaryResource, "Out of operation records in transaction coordinator (increase MaxNoOfConcurrentOperations)"),
    (288, TemporaryResource, "Out of index operations in transaction coordinator (increase MaxNoOfConcurrentIndexOperations)"),
    (221, TemporaryResource, "Too many concurrently fired triggers (increase MaxNoOfFiredTriggers)"),
    (291, TemporaryResource, "Out of scanfrag records in TC (increase MaxNoOfLocalScans)"),
    (245, TemporaryResource, "Too many active scans, increase MaxNoOfConcurrentScans"),
    (1218, TemporaryResource, "Send Buffers overloaded in NDB kernel"),
    (410, Overload, "REDO log files overloaded (decrease TimeBetweenLocalCheckpoints or increase NoOfFragmentLogFiles)"),
    (1220, TemporaryResource, "REDO log files overloaded (increase FragmentLogFileSize)"),
    (1221, Overload, "REDO buffers overloaded (increase RedoBuffer)"),
    (1234, TemporaryResource, "REDO log files overloaded (increase disk hardware)"),
    (4021, TemporaryResource, "Out of Send Buffer space in NDB API"),
    (1217, TemporaryResource, "Out of operation records in local data manager (increase MaxNoOfLocalOperations)"),
    (4006, Overload, "Connect failure - out of connection objects (increase MaxNoOfConcurrentTransactions)"),
    (286, NodeRecovery, "Node failure caused abort of transaction"),
    (4010, NodeRecovery, "Node failure caused abort of transaction"),
    (1204, NodeRecovery, "Temporary failure, distribution changed"),
    (280, NodeShutdown, "Transaction aborted due to node shutdown"),
    (4009, UnknownResult, "Cluster Failure"),
    (4012, UnknownResult, "Request ndbd time-out, maybe due to high load or communication problems"),
    (241, SchemaError, "Invalid schema object version"),
    (701, TemporaryResource, "System busy with other schema operation"),
    (711, TemporaryResource, "System busy with node restart, schema operations not allowed"),
    (709, SchemaError, "No such table existed"),
    (283, SchemaError, "Table is being dropped"),
    (1405, NodeRecovery, "Subscriber manager busy with node recovery"),
    (1415, SchemaError, "Subscription not unique in subscriber manager"),
    (1417, SchemaError, "Table in subscription not defined, probably dropped"),
    (1422, SchemaError, "Out of subscription records"),
    (299, ApplicationError, "Operation not allowed or aborted due to single user mode"),
    (261, ApplicationError, "DML count in transaction exceeds config parameter MaxDMLOperationsPerTransaction"),
    (721, SchemaError, "Schema object with given name already exists"),
    (738, SchemaError, "Record too big"),
    (740, SchemaError, "Nullable primary key not supported"),
    (4241, SchemaError, "Invalid schema object name"),
    (4317, SchemaError, "Invalid number of columns"),
    (4327, SchemaError, "Table has no primary key"),
    (4335, SchemaError, "Only one autoincrement column allowed per table. Having a table without primary key uses an autoincremented hidden key, i.e. a table without a primary key can not have an autoincremented column"),
    (4243, SchemaError, "Index not found"),
    (4259, ApplicationError, "Invalid set of range scan bounds"),
    (4120, ApplicationError, "Scan already complete"),
    (4004, ApplicationError, "Attribute name or id not found in the table"),
    (4114, ApplicationError, "Transaction is already completed"),
    (4116, ApplicationError, "Operation was not defined correctly, probably missing a key"),
    (4209, ApplicationError, "Length parameter in equal/setValue is incorrect"),
    (1702, ApplicationError, "Node already connected"),
    (1703, NodeRecovery, "Node failure handling not completed"),
    (1704, ApplicationError, "Node type mismatch"),
    (1710, ApplicationError, "Protocol version mismatch"),
    (1711, ApplicationError, "Node read a different cluster configuration"),
    (1712, ApplicationError, "Connection reached another node than the one asked for"),
    (1713, ApplicationError, "Node id is not in the cluster configuration"),
    (1714, ApplicationError, "No link between these nodes in the cluster configuration"),
    (1715, ApplicationError, "Transporter kind does not match the configuration"),
    (1716, ApplicationError, "Checksum setting does not match the configuration"),
    (1717, ApplicationError, "Peer address does not match the node's HostName"),
    (1718, ApplicationError, "The connection is not TLS and RequireTls=1"),
    (1719, ApplicationError, "The TLS certificate is for another node type"),
    (761, SchemaError, "Unable to drop table as backup is in progress"),
    (1302, ApplicationError, "A backup is already running"),
    (1306, ApplicationError, "Backup not supported in diskless mode (change Diskless)"),
    (1321, ApplicationError, "Backup aborted by user request"),
    (1324, InternalError, "Backup log buffer full"),
    (1325, InternalError, "File or scan error"),
    (1326, InternalError, "Backup aborted due to node failure"),
    (1340, InternalError, "Backup undefined error"),
    (1350, ApplicationError, "Backup failed: file already exists (use 'START BACKUP <backup id>')"),
    (4000, InternalError, "Malformed signal"),
    (4263, InternalError, "Invalid blob attributes or invalid blob parts table"),
    (4264, ApplicationError, "Invalid usage of blob attribute"),
    (4267, InternalError, "Corrupted blob value"),
    (746, SchemaError, "Event name already exists"),
    (4708, ApplicationError, "Event name is too long"),
    (4710, ApplicationError, "Event not found"),
    (4711, ApplicationError, "Creation of event failed"),
    (4734, InsufficientSpace, "Event buffer overflow"),
    (702, InternalTemporary, "Request to non-master"),
];

/// An error NDB-style: a code, its class and its message, plus optional detail.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NdbError {
    pub code: u32,
    pub class: ErrorClass,
    pub message: String,
}

/// Every code rndb produces, in the table's order, with its class and message.
pub fn all_codes() -> impl Iterator<Item = (u32, ErrorClass, &'static str)> {
    ERRORS.iter().copied()
}

impl NdbError {
    /// The error with NDB's message for `code` (unknown codes are internal errors).
    pub fn new(code: u32) -> Self {
        NdbError::known(code).unwrap_or_else(|| NdbError {
            code,
            class: InternalError,
            message: format!("Unknown error code {code}"),
        })
    }

    /// The error with NDB's message for `code`, if rndb knows the code.
    pub fn known(code: u32) -> Option<Self> {
        if USER_EXIT_CODES.contains(&code) {
            return Some(NdbError {
                code,
                class: ApplicationError,
                message: "Application error: an interpreted program's exit code".to_string(),
            });
        }
        let (_, class, message) = ERRORS.iter().find(|(c, _, _)| *c == code)?;
        Some(NdbError {
            code,
            class: *class,
            message: message.to_string(),
        })
    }

    /// The error for `code` with detail appended to NDB's message.
    pub fn with_detail(code: u32, detail: impl fmt::Display) -> Self {
        let mut e = NdbError::new(code);
        e.message = format!("{}: {detail}", e.message);
        e
    }

    /// The error as it arrives on the wire: a code and the full message the sender formatted
    /// (empty means NDB's standard message).
    pub fn from_wire(code: u32, message: &str) -> Self {
        let mut e = NdbError::new(code);
        if !message.is_empty() {
            e.message = message.to_string();
        }
        e
    }

    /// True when a retry may succeed.
    pub fn is_temporary(&self) -> bool {
        self.class.is_temporary()
    }
}

impl fmt::Display for NdbError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = if self.is_temporary() {
            "temporary"
        } else {
            "permanent"
        };
        write!(
            f,
            "error {} ({kind}, {:?}): {}",
            self.code, self.class, self.message
        )
    }
}

impl std::error::Error for NdbError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_unique_and_classified_as_ndb_does() {
        for (i, (code, _, _)) in ERRORS.iter().enumerate() {
            assert!(
                ERRORS[..i].iter().all(|(c, _, _)| c != code),
                "code {code} listed twice"
            );
        }
        assert!(NdbError::new(266).is_temporary());
        assert!(NdbError::new(1218).is_temporary());
        assert!(!NdbError::new(626).is_temporary());
        assert!(!NdbError::new(630).is_temporary());
        assert!(!NdbError::new(827).is_temporary());
        assert_eq!(NdbError::new(626).message, "Tuple did not exist");
        // NDB's "IT": the API retries it at the master; temporary if it gets through.
        assert_eq!(NdbError::new(702).class, ErrorClass::InternalTemporary);
        assert!(NdbError::new(702).is_temporary());
        assert_eq!(NdbError::new(702).message, "Request to non-master");
        // Codes the data node sends for schema changes and subscriptions: a retry helps
        // with 711 and 1405, not with the others.
        assert!(NdbError::new(711).is_temporary());
        assert!(NdbError::new(1405).is_temporary());
        for code in [283, 1415, 1417, 1422] {
            let e = NdbError::new(code);
            assert_eq!(e.class, ErrorClass::SchemaError, "{code}");
            assert!(!e.message.starts_with("Unknown"), "{code}");
        }
    }

    /// Every code the workspace's sources build an error of (`ndb_detail(N`, `with_detail(N`,
    /// `NdbError::new(N`, ...) is in the table: none reaches a user as "Unknown error code".
    #[test]
    fn every_code_the_sources_raise_is_in_the_table() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let mut missing = Vec::new();
        let mut dirs = vec![root];
        while let Some(dir) = dirs.pop() {
            for entry in std::fs::read_dir(&dir).expect("read a source directory") {
                let path = entry.expect("an entry").path();
                let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
                if path.is_dir() && !name.starts_with('.') && name != "target" {
                    dirs.push(path);
                } else if name.ends_with(".rs") {
                    let text = std::fs::read_to_string(&path).unwrap_or_default();
                    for call in [
                        "ndb_detail(",
                        "with_detail(",
                        "NdbError::new(",
                        "Error::ndb(",
                    ] {
                        for (at, _) in text.match_indices(call) {
                            let rest = text[at + call.len()..].trim_start();
                            let digits: String =
                                rest.chars().take_while(char::is_ascii_digit).collect();
                            let Ok(code) = digits.parse::<u32>() else {
                                continue;
                            };
                            if NdbError::known(code).is_none() {
                                missing.push(format!("{code} in {}", path.display()));
                            }
                        }
                    }
                }
            }
        }
        assert!(missing.is_empty(), "codes not in ERRORS: {missing:?}");
    }
}
