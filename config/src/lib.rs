//! rndb-config: a MySQL Cluster `config.ini` to a typed [`ClusterConfig`], or every error in
//! the file, each with its file, line, section and parameter.
//!
//! # How a file flows through the crate
//!
//! 1. `syntax` splits the text into sections of `Name=value` entries (aliases folded: `[db]`
//!    is `[ndbd]`, `[mysqld]` is `[api]`, `[mgm]` is `[ndb_mgmd]`), reporting malformed lines,
//!    unknown sections and parameters outside any section.
//! 2. `values` checks each entry against the one parameter table ([`param_table`]): known name
//!    (else the closest known name is suggested), right type, inside the range, given once.
//!    Parameters rndb recognises but does not implement produce a warning and are ignored.
//! 3. `build` looks every parameter up in its section, then in the `[… default]` sections of
//!    its kind (wherever they are in the file), then in the table; `ids` assigns node ids,
//!    `groups` forms node groups and `links` chooses one link per pair of nodes that talk.
//!
//! Every pass writes into one collector, so a file with many mistakes reports all of them.
//! The crate does no IO beyond reading the file [`parse_file`] is given.
//!
//! # Choices where NDB leaves room
//!
//! - Node ids: explicit NodeIds are taken first; data nodes without one get the lowest free id
//!   in 1..=144, then management nodes and then API slots the lowest free id in 1..=255, each
//!   in file order.
//! - A data node without ServerPort listens on [`DATA_NODE_PORT_BASE`] + NodeId.
//! - MaxNoOfExecutionThreads 0 (the default) or 1 means one execution thread (NDB's
//!   single-threaded `ndbd`); 2..=72 asks for that many.
//! - A management node is optional. `[computer]` and `[system]` sections are ignored with a
//!   warning. A parameter given twice in one section is an error.

#![forbid(unsafe_code)]

mod build;
mod error;
mod groups;
mod ids;
mod layered;
mod links;
pub mod model;
mod params;
pub mod partition;
mod query;
mod syntax;
mod values;

use std::path::Path;

pub use error::{ConfigError, ConfigErrors};
pub use model::*;
pub use params::{
    find_param, format_number, param_table, ParamDefault, ParamInfo, ParamType, SectionKind,
    MAX_INT_RNIL,
};
pub use partition::{key_hash, PartitionMap, PARTITIONS_PER_NODE};
pub use query::node_type_name;

/// Reads and parses the config file at `path`.
///
/// A file that cannot be read gives one error naming it (line 0) that says why: it does not
/// exist, or it cannot be read (with the system's reason), never that it "has errors". A file
/// that is not UTF-8 gives one error per line that is not, naming the line and the byte.
pub fn parse_file(path: &Path) -> Result<ClusterConfig, ConfigErrors> {
    match std::fs::read(path) {
        Ok(bytes) => parse_bytes(&bytes, path),
        Err(err) => Err(ConfigErrors::whole_file(path, unreadable_reason(&err))),
    }
}

/// Parses config.ini `bytes`, which must be UTF-8; every line that is not is an error naming
/// the line and the column (1-based byte) of the first bad byte. `source` names the file.
pub fn parse_bytes(bytes: &[u8], source: &Path) -> Result<ClusterConfig, ConfigErrors> {
    match std::str::from_utf8(bytes) {
        Ok(text) => parse_str(text, source),
        Err(_) => {
            let mut diag = error::Diag::new(source);
            for (index, line) in bytes.split(|&b| b == b'\n').enumerate() {
                if let Err(e) = std::str::from_utf8(line) {
                    let bad = line[e.valid_up_to()];
                    diag.error(
                        index + 1,
                        None,
                        None,
                        format!(
                            "not UTF-8: byte {} of the line is {bad:#04x}; config files are UTF-8 text",
                            e.valid_up_to() + 1
                        ),
                    );
                }
            }
            // A newline is never part of a multi-byte sequence, so some line is always at fault;
            // the whole-file error is only a fallback.
            match diag.into_result() {
                Err(errors) => Err(errors),
                Ok(_) => Err(ConfigErrors::whole_file(
                    source,
                    "the config file is not UTF-8",
                )),
            }
        }
    }
}

/// Why a config file could not be read, in words a newcomer recognises.
fn unreadable_reason(err: &std::io::Error) -> String {
    match err.kind() {
        std::io::ErrorKind::NotFound => "the config file does not exist".to_string(),
        std::io::ErrorKind::PermissionDenied => {
            "the config file cannot be read: permission denied".to_string()
        }
        _ => format!("the config file cannot be read: {err}"),
    }
}

/// Parses config.ini `text`; `source` names the file in messages and in the result.
pub fn parse_str(text: &str, source: &Path) -> Result<ClusterConfig, ConfigErrors> {
    let mut diag = error::Diag::new(source);
    let raw = syntax::split_sections(text, &mut diag);
    let typed = values::type_sections(raw, &mut diag);
    let config = build::build(&typed, source, &mut diag);
    let warnings = diag.into_result()?;
    Ok(ClusterConfig { warnings, ..config })
}
