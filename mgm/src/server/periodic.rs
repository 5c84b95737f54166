//! The cluster log's periodic reports of each data node, written from its reports to ndb_mgmd:
//! memory usage when it crosses 80, 90, 99 or 100 %, and besides every MemReportFrequency
//! seconds (0: never), as NDB's data nodes report it; and a running backup's status every
//! BackupReportFrequency seconds (0: never).

use std::time::{Duration, Instant};

use crate::node_report::{BackupPhase, BackupProgress};

use super::log::{Category, Event, Severity};

/// NDB's 32 KiB pages, in which memory usage is reported.
const PAGE_BYTES: u64 = 32 * 1024;

/// The usage levels reported when MemReportFrequency is 0, in percent.
const LEVELS: [u64; 4] = [80, 90, 99, 100];

/// When one data node's reports are next due.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Periodic {
    mem_next: Option<Instant>,
    /// The last level reported (0: below the first).
    mem_level: u64,
    backup_next: Option<Instant>,
}

/// What a report brought that the periodic reports are made from.
#[derive(Clone, Copy, Debug)]
pub(super) struct Usage<'a> {
    pub used: u64,
    pub total: u64,
    pub backup: Option<&'a BackupProgress>,
}

impl Periodic {
    /// The events due now for data node `node`, whose report brought `usage`;
    /// `mem_every_s`, `backup_every_s` are its MemReportFrequency and BackupReportFrequency.
    pub(super) fn events(
        &mut self,
        node: u16,
        (mem_every_s, backup_every_s): (u32, u32),
        usage: Usage<'_>,
        now: Instant,
    ) -> Vec<Event> {
        let mut events = Vec::new();
        // From a report on a socket: a used figure past the total reads as 100 %.
        let used = usage.used.min(usage.total);
        let percent = (u128::from(used) * 100).checked_div(u128::from(usage.total));
        if let Some(percent) = percent.map(|p| p as u64) {
            let pages = format!(
                "{percent}%({} 32K pages of total {})",
                used.div_ceil(PAGE_BYTES),
                usage.total / PAGE_BYTES
            );
            // A level crossed is reported at once, as NDB's; the periodic report besides.
            let level = LEVELS.iter().rev().find(|&&l| percent >= l).copied();
            let level = level.unwrap_or(0);
            if level != self.mem_level {
                let way = if level > self.mem_level {
                    "increased"
                } else {
                    "decreased"
                };
                self.mem_level = level;
                events.push(info(node, format!("Data usage {way} to {pages}")));
            } else if mem_every_s > 0 && self.mem_next.is_none_or(|next| now >= next) {
                events.push(info(node, format!("Data usage is {pages}")));
            }
            if mem_every_s > 0 && self.mem_next.is_none_or(|next| now >= next) {
                self.mem_next = Some(now + Duration::from_secs(u64::from(mem_every_s)));
            }
        }
        let running = usage
            .backup
            .filter(|b| matches!(b.phase, Some(BackupPhase::Running | BackupPhase::Scanned)));
        match running {
            Some(b) if backup_every_s > 0 => {
                let next = *self
                    .backup_next
                    .get_or_insert(now + Duration::from_secs(u64::from(backup_every_s)));
                if now >= next {
                    self.backup_next = Some(now + Duration::from_secs(u64::from(backup_every_s)));
                    let text = format!(
                        "Local backup status: backup {} #Records: {} #LogRecords: {} Data: {} \
                         bytes Log: {} bytes",
                        b.id, b.records, b.log_records, b.data_bytes, b.log_bytes
                    );
                    events.push(Event::new(node, Category::Backup, 7, Severity::Info, text));
                }
            }
            _ => self.backup_next = None,
        }
        events
    }
}

/// NDB's MemoryUsage event: category INFO, priority 5.
fn info(node: u16, text: String) -> Event {
    Event::new(node, Category::Info, 5, Severity::Info, text)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usage(used: u64, backup: Option<&BackupProgress>) -> Usage<'_> {
        Usage {
            used,
            total: 100 * PAGE_BYTES,
            backup,
        }
    }

    fn texts(events: Vec<Event>) -> Vec<String> {
        events.into_iter().map(|e| e.text).collect()
    }

    #[test]
    fn memory_is_reported_every_interval() {
        let mut p = Periodic::default();
        let t0 = Instant::now();
        let at = |s| t0 + Duration::from_secs(s);
        assert_eq!(
            texts(p.events(1, (10, 0), usage(5 * PAGE_BYTES, None), t0)),
            ["Data usage is 5%(5 32K pages of total 100)"]
        );
        assert!(p.events(1, (10, 0), usage(0, None), at(9)).is_empty());
        assert_eq!(p.events(1, (10, 0), usage(0, None), at(10)).len(), 1);
    }

    #[test]
    fn without_an_interval_memory_is_reported_at_its_levels() {
        let mut p = Periodic::default();
        let t0 = Instant::now();
        let pages = |n| usage(n * PAGE_BYTES, None);
        assert!(p.events(1, (0, 0), pages(79), t0).is_empty());
        assert_eq!(
            texts(p.events(1, (0, 0), pages(85), t0)),
            ["Data usage increased to 85%(85 32K pages of total 100)"]
        );
        assert!(p.events(1, (0, 0), pages(89), t0).is_empty());
        assert_eq!(p.events(1, (0, 0), pages(100), t0).len(), 1);
        assert_eq!(
            texts(p.events(1, (0, 0), pages(50), t0)),
            ["Data usage decreased to 50%(50 32K pages of total 100)"]
        );
    }

    #[test]
    fn a_level_crossed_is_reported_at_once_with_an_interval_too() {
        let mut p = Periodic::default();
        let t0 = Instant::now();
        let pages = |n| usage(n * PAGE_BYTES, None);
        assert_eq!(p.events(1, (600, 0), pages(10), t0).len(), 1);
        assert_eq!(
            texts(p.events(1, (600, 0), pages(95), t0 + Duration::from_secs(1))),
            ["Data usage increased to 95%(95 32K pages of total 100)"]
        );
        // A used figure past the total (or one that would overflow) reads as 100 %.
        let bogus = Usage {
            used: u64::MAX,
            total: 100 * PAGE_BYTES,
            backup: None,
        };
        assert_eq!(
            texts(p.events(1, (600, 0), bogus, t0 + Duration::from_secs(2))),
            ["Data usage increased to 100%(100 32K pages of total 100)"]
        );
    }

    #[test]
    fn a_running_backup_is_reported_every_interval() {
        let mut p = Periodic::default();
        let t0 = Instant::now();
        let at = |s| t0 + Duration::from_secs(s);
        let running = BackupProgress {
            id: 3,
            phase: Some(BackupPhase::Running),
            records: 7,
            ..BackupProgress::default()
        };
        assert!(p.events(1, (0, 2), usage(0, Some(&running)), t0).is_empty());
        assert!(p
            .events(1, (0, 2), usage(0, Some(&running)), at(1))
            .is_empty());
        let events = p.events(1, (0, 2), usage(0, Some(&running)), at(2));
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].category, Category::Backup);
        assert!(events[0]
            .text
            .starts_with("Local backup status: backup 3 #Records: 7"));
        // Not with BackupReportFrequency=0, nor once it ended.
        assert!(p
            .events(1, (0, 0), usage(0, Some(&running)), at(9))
            .is_empty());
        let done = BackupProgress {
            phase: Some(BackupPhase::Completed),
            ..running
        };
        assert!(p
            .events(1, (0, 2), usage(0, Some(&done)), at(20))
            .is_empty());
    }
}
