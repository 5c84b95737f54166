//! The error log: `ndb_<NodeId>_error.log` in the node's DataDir, as NDB's. Each time the data
//! node stops on an error it appends an entry; the file keeps the last MaxNoOfSavedMessages
//! entries (0 keeps none). An entry:
//!
//! ```text
//! Time: 2026-12-06 00:45:12 UTC
//! Status: Temporary error, restart node
//! Message: <what happened, with NDB's text for the code>
//! Error: 2305
//! Program: ndbd
//! Pid: 4242
//! Version: rndb 0.1.0
//! ***EOM***
//! ```
//!
//! Best effort: a log that cannot be written is reported on stderr, and the node stops as it
//! would have.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use rndb_config::NodeId;

/// Ends each entry, as in NDB's error log.
const END_OF_MESSAGE: &str = "***EOM***\n";

/// The error log of node `me` in `data_dir`.
pub fn path(data_dir: &Path, me: NodeId) -> PathBuf {
    data_dir.join(format!("ndb_{me}_error.log"))
}

/// Appends an entry for `why` (a fatal error, "error NNNN: ..." when it has NDB's code) to the
/// error log of node `me`, keeping the last `saved_max` entries.
pub fn record(data_dir: &Path, me: NodeId, why: &str, saved_max: u32) {
    let file = path(data_dir, me);
    if let Err(e) = write(&file, why, saved_max) {
        eprintln!(
            "ndbd: could not write the error log {}: {e}",
            file.display()
        );
    }
}

fn write(file: &Path, why: &str, saved_max: u32) -> std::io::Result<()> {
    let old = match std::fs::read_to_string(file) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(e),
    };
    let mut entries: Vec<&str> = old
        .split_inclusive(END_OF_MESSAGE)
        .filter(|e| e.ends_with(END_OF_MESSAGE))
        .collect();
    let entry = entry(why);
    entries.push(&entry);
    let keep = entries.len().saturating_sub(saved_max as usize);
    let text: String = entries[keep..].concat();
    // Written whole to a new file, then renamed over the old: a crash mid-write leaves one or
    // the other.
    let temporary = file.with_extension("log.new");
    std::fs::write(&temporary, text)?;
    std::fs::rename(&temporary, file)
}

fn entry(why: &str) -> String {
    let code = why
        .strip_prefix("error ")
        .and_then(|rest| rest.split(':').next())
        .and_then(|code| code.trim().parse::<u32>().ok());
    // NDB's status for an error a restart of the node may clear: every stop here is one an
    // operator (or the angel, with StopOnError=0) starts again.
    let status = "Temporary error, restart node";
    let secs = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    format!(
        "Time: {} UTC\nStatus: {status}\nMessage: {why}\nError: {}\nProgram: ndbd\nPid: {}\n\
         Version: rndb {}\n{END_OF_MESSAGE}",
        utc(secs),
        code.map_or_else(|| "0".to_string(), |c| c.to_string()),
        std::process::id(),
        env!("CARGO_PKG_VERSION"),
    )
}

/// `secs` since the epoch as `YYYY-MM-DD HH:MM:SS` (UTC; civil-from-days).
fn utc(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rest = secs % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02}",
        rest / 3600,
        rest / 60 % 60,
        rest % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_are_civil_utc() {
        assert_eq!(utc(0), "1970-01-01 00:00:00");
        assert_eq!(utc(951_782_400), "2000-02-29 00:00:00");
        assert_eq!(utc(1_796_517_912), "2026-12-06 00:45:12");
    }

    #[test]
    fn the_log_keeps_the_last_saved_max_entries() {
        let dir = tempfile::tempdir().expect("temporary directory");
        for n in 0..5 {
            record(dir.path(), NodeId(3), &format!("error 230{n}: stop {n}"), 3);
        }
        let text = std::fs::read_to_string(path(dir.path(), NodeId(3))).expect("the log");
        assert_eq!(text.matches(END_OF_MESSAGE).count(), 3, "{text}");
        assert!(
            !text.contains("stop 1") && text.contains("stop 2"),
            "{text}"
        );
        assert!(text.contains("Error: 2304\n") && text.contains("Message: error 2304: stop 4\n"));
        record(dir.path(), NodeId(3), "no code here", 0);
        let text = std::fs::read_to_string(path(dir.path(), NodeId(3))).expect("the log");
        assert!(
            text.is_empty(),
            "MaxNoOfSavedMessages=0 keeps nothing: {text}"
        );
    }
}
