//! `ndb_mgm`'s commands: parsing a command line and carrying it out against ndb_mgmd.
//!
//! Each command is one request on its own connection, so an interactive client survives a
//! restarted ndb_mgmd. Output has NDB's wording where NDB has it.

use crate::client::{MgmClient, MgmError, BACKUP_REPLY_TIMEOUT, REPLY_TIMEOUT, STOP_REPLY_TIMEOUT};
use crate::status::{format_node_status, format_show, NodeType};
use crate::wire::Message;

/// Which nodes a command is for: `ALL` or one node id.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    All,
    Node(u16),
}

/// One parsed command.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command {
    Help,
    Show,
    Status(Target),
    Stop {
        target: Target,
        force: bool,
    },
    Shutdown,
    /// `N START`, `ALL START`: nodes waiting in NOT_STARTED start.
    Start(Target),
    /// `N RESTART [-n] [-i] [-f]`.
    Restart {
        target: Target,
        initial: bool,
        no_start: bool,
        force: bool,
    },
    ReportMemoryUsage(Target),
    /// `N REPORT Counters` (rndb's): locks, transporter counters, checkpoint state.
    ReportCounters(Target),
    /// `N REPORT BackupStatus`: the node's part of the backup it runs.
    ReportBackupStatus(Target),
    /// `CLUSTERLOG ON|OFF|TOGGLE [severity ...]`, `CLUSTERLOG INFO`.
    ClusterLog {
        mode: &'static str,
        severities: Vec<String>,
    },
    /// `N CLUSTERLOG CATEGORY=level ...`.
    LogLevel {
        target: Target,
        settings: Vec<(String, u8)>,
    },
    /// `ENTER SINGLE USER MODE <api node id>`.
    EnterSingleUser(u16),
    /// `EXIT SINGLE USER MODE`.
    ExitSingleUser,
    /// `START BACKUP [<backup id>] [NOWAIT | WAIT STARTED | WAIT COMPLETED]
    /// [SNAPSHOTSTART | SNAPSHOTEND]`.
    StartBackup {
        id: Option<u32>,
        wait: BackupWait,
        /// SNAPSHOTSTART: restorable as of the backup's start (else its end).
        snapshot_start: bool,
    },
    /// `ABORT BACKUP <backup id>`.
    AbortBackup(u32),
    Quit,
}

/// How long `START BACKUP` waits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BackupWait {
    /// `NOWAIT`: not at all.
    No,
    /// `WAIT STARTED`: until every data node has begun its part.
    Started,
    /// `WAIT COMPLETED` (the default): until the backup ends.
    Completed,
}

impl BackupWait {
    fn as_str(self) -> &'static str {
        match self {
            BackupWait::No => "no",
            BackupWait::Started => "started",
            BackupWait::Completed => "completed",
        }
    }
}

/// NDB's `HELP` text, for what rndb has.
pub const HELP: &str = "\
---------------------------------------------------------------------------
 NDB Cluster -- Management Client -- Help
---------------------------------------------------------------------------
HELP                                   Print help text
SHOW                                   Print information about cluster
<id> STATUS                            Print status
ALL STATUS                             Print status of all data nodes
<id> STOP [-f]                         Stop data or management server node
                                       (-f: even if its node group would
                                       have no started node left)
ALL STOP                               Stop all data nodes
SHUTDOWN                               Shutdown all data and management
                                       server nodes
<id> RESTART [-n] [-i] [-f]            Restart data node (-n: wait for START,
                                       -i: initial, -f: even if its node group
                                       would have no started node left)
<id> START                             Start data node (started with --nostart)
ALL START                              Start all data nodes waiting in
                                       NOT_STARTED
ALL REPORT MemoryUsage                 Report memory use of data nodes
                                       (DataMemory, transaction, operation and
                                       scan records, send buffers)
<id> REPORT MemoryUsage                Report memory use of one node
<id> REPORT Counters                   Report locks, transporter counters and
                                       checkpoint state of data node(s)
<id> REPORT BackupStatus               Report the backup a data node runs
CLUSTERLOG ON [<severity>] ...         Enable Cluster logging
CLUSTERLOG OFF [<severity>] ...        Disable Cluster logging
CLUSTERLOG TOGGLE [<severity>] ...     Toggle severity filter on/off
CLUSTERLOG INFO                        Print cluster log information
<id> CLUSTERLOG {<category>=<level>}+  Set log level for cluster log
ENTER SINGLE USER MODE <api id>        Enter single user mode: only that API
                                       node may use the database
EXIT SINGLE USER MODE                  Exit single user mode
START BACKUP [<backup id>] [NOWAIT | WAIT STARTED | WAIT COMPLETED]
             [SNAPSHOTSTART | SNAPSHOTEND]
                                       Start an online backup, consistent as
                                       of its start or its end (the default)
ABORT BACKUP <backup id>               Abort backup
QUIT, EXIT                             Quit management client

<severity>  = ALERT | CRITICAL | ERROR | WARNING | INFO | DEBUG
<category>  = STARTUP | SHUTDOWN | STATISTICS | CHECKPOINT | NODERESTART |
              CONNECTION | INFO | ERROR | CONGESTION | DEBUG | BACKUP |
              SCHEMA
<level>     = 0 - 15
<id>        = ALL | Any database node id
";

/// Parses one command line (case-insensitive, as NDB's); an error is what to print.
pub fn parse(line: &str) -> Result<Command, String> {
    let words: Vec<String> = line
        .split_whitespace()
        .map(str::to_ascii_uppercase)
        .collect();
    let invalid = || format!("Invalid command: {}\nType HELP for help.", line.trim());
    let Some(first) = words.first() else {
        return Err(invalid());
    };
    let target = if first == "ALL" {
        Some(Target::All)
    } else {
        first.parse::<u16>().ok().map(Target::Node)
    };
    let Some(target) = target else {
        return match (first.as_str(), words.len()) {
            ("HELP", _) => Ok(Command::Help),
            ("SHOW", 1) => Ok(Command::Show),
            ("SHUTDOWN", 1) => Ok(Command::Shutdown),
            ("QUIT" | "EXIT" | "BYE", 1) => Ok(Command::Quit),
            ("CLUSTERLOG", _) => parse_clusterlog(&words[1..]).ok_or_else(invalid),
            ("START", _) if words.get(1).is_some_and(|w| w == "BACKUP") => {
                parse_start_backup(&words[2..])
            }
            ("ABORT", 3) if words[1] == "BACKUP" => words[2]
                .parse()
                .map(Command::AbortBackup)
                .map_err(|_| format!("Invalid backup id: {}", words[2])),
            ("ENTER" | "EXIT", _)
                if words
                    .get(1..4)
                    .is_some_and(|w| w == ["SINGLE", "USER", "MODE"]) =>
            {
                let bad_id = || {
                    "Invalid arguments: expected <NodeId>\n\
                     Use SHOW to see what API nodes are configured"
                        .to_string()
                };
                match (first.as_str(), &words[4..]) {
                    ("EXIT", []) => Ok(Command::ExitSingleUser),
                    ("ENTER", [id]) => id
                        .parse()
                        .map(Command::EnterSingleUser)
                        .map_err(|_| bad_id()),
                    ("ENTER", []) => Err(bad_id()),
                    _ => Err(invalid()),
                }
            }
            _ => Err(invalid()),
        };
    };
    let rest: Vec<&str> = words[1..].iter().map(String::as_str).collect();
    match rest.as_slice() {
        ["STATUS"] => Ok(Command::Status(target)),
        ["STOP"] => Ok(Command::Stop {
            target,
            force: false,
        }),
        ["STOP", "-F"] if target != Target::All => Ok(Command::Stop {
            target,
            force: true,
        }),
        ["REPORT", "MEMORYUSAGE" | "MEMORY" | "MEMORYUSAGE;"] => {
            Ok(Command::ReportMemoryUsage(target))
        }
        ["REPORT", "COUNTERS" | "COUNTERS;"] => Ok(Command::ReportCounters(target)),
        ["REPORT", "BACKUPSTATUS" | "BACKUPSTATUS;"] => Ok(Command::ReportBackupStatus(target)),
        ["START"] => Ok(Command::Start(target)),
        ["RESTART", options @ ..] => {
            let (mut initial, mut no_start, mut force) = (false, false, false);
            for option in options {
                match *option {
                    "-I" | "-INITIAL" => initial = true,
                    "-N" | "-NOSTART" => no_start = true,
                    "-F" | "-FORCE" => force = true,
                    _ => return Err(invalid()),
                }
            }
            Ok(Command::Restart {
                target,
                initial,
                no_start,
                force,
            })
        }
        ["CLUSTERLOG", settings @ ..] if !settings.is_empty() => {
            let mut parsed = Vec::new();
            for setting in settings {
                let (category, level) = setting.split_once('=').ok_or_else(invalid)?;
                let level: u8 = level.parse().ok().filter(|l| *l <= 15).ok_or_else(|| {
                    format!("Invalid loglevel specification {setting}: the level must be 0..15")
                })?;
                parsed.push((category.to_string(), level));
            }
            Ok(Command::LogLevel {
                target,
                settings: parsed,
            })
        }
        _ => Err(invalid()),
    }
}

/// The words after `START BACKUP`.
fn parse_start_backup(words: &[String]) -> Result<Command, String> {
    let mut words = words.iter().map(String::as_str).peekable();
    let id = match words.peek().map(|w| w.parse::<u32>()) {
        Some(Ok(id)) => {
            words.next();
            Some(id)
        }
        _ => None,
    };
    let mut wait = BackupWait::Completed;
    let mut snapshot_start = false;
    while let Some(word) = words.next() {
        match (word, words.peek().copied()) {
            ("NOWAIT", _) => wait = BackupWait::No,
            ("WAIT", Some("STARTED")) => {
                words.next();
                wait = BackupWait::Started;
            }
            ("WAIT", Some("COMPLETED")) => {
                words.next();
                wait = BackupWait::Completed;
            }
            ("SNAPSHOTEND", _) => snapshot_start = false,
            ("SNAPSHOTSTART", _) => snapshot_start = true,
            _ => return Err(format!("Invalid argument to START BACKUP: {word}")),
        }
    }
    Ok(Command::StartBackup {
        id,
        wait,
        snapshot_start,
    })
}

fn parse_clusterlog(words: &[String]) -> Option<Command> {
    let (mode, severities) = words.split_first()?;
    let mode = match mode.as_str() {
        "ON" => "on",
        "OFF" => "off",
        "TOGGLE" | "FILTER" => "toggle",
        "INFO" if severities.is_empty() => "info",
        _ => return None,
    };
    if mode == "toggle" && severities.is_empty() {
        return None;
    }
    Some(Command::ClusterLog {
        mode,
        severities: severities.to_vec(),
    })
}

/// Carries `command` out against the server of `connect` (called once per command); returns
/// the text to print, or the error to print (the command failed).
pub fn execute(
    command: &Command,
    connect: &dyn Fn() -> Result<MgmClient, MgmError>,
) -> Result<String, String> {
    let fail = |e: MgmError| e.to_string();
    match command {
        Command::Help => Ok(HELP.to_string()),
        Command::Quit => Ok(String::new()),
        Command::Start(target) => start(connect, *target),
        Command::EnterSingleUser(api) => {
            let mut client = connect().map_err(fail)?;
            let request = Message::new("enter single user").field("node", api);
            client
                .call(&request, REPLY_TIMEOUT)
                .map_err(|e| format!("Entering single user mode for node {api} failed\n*  {e}"))?;
            Ok(format!(
                "Single user mode entered\nAccess is granted for API node {api} only.\n"
            ))
        }
        Command::ExitSingleUser => {
            let mut client = connect().map_err(fail)?;
            let request = Message::new("exit single user");
            client
                .call(&request, REPLY_TIMEOUT)
                .map_err(|e| format!("Exiting single user mode failed.\n*  {e}"))?;
            Ok("Exiting single user mode in progress.\n\
                Use ALL STATUS or SHOW to see when single user mode has been exited.\n"
                .into())
        }
        Command::Restart {
            target,
            initial,
            no_start,
            force,
        } => restart(connect, *target, *initial, *no_start, *force),
        Command::StartBackup {
            id,
            wait,
            snapshot_start,
        } => start_backup(connect, *id, *wait, *snapshot_start),
        Command::AbortBackup(id) => {
            let mut client = connect().map_err(fail)?;
            let request = Message::new("abort backup").field("backupid", id);
            client
                .call(&request, REPLY_TIMEOUT)
                .map_err(|e| format!("Abort of backup {id} failed\n*  {e}"))?;
            Ok(format!("Abort of backup {id} ordered\n"))
        }
        Command::Show => {
            let mut client = connect().map_err(fail)?;
            let status = client.status().map_err(fail)?;
            Ok(format!(
                "Connected to Management Server at: {}\n{}",
                client.server(),
                format_show(&status)
            ))
        }
        Command::Status(target) => {
            let status = connect().and_then(|mut c| c.status()).map_err(fail)?;
            let lines: Vec<String> = match target {
                Target::All => status
                    .of_type(NodeType::Ndb)
                    .map(format_node_status)
                    .collect(),
                Target::Node(id) => match status.node(*id) {
                    Some(n) => vec![format_node_status(n)],
                    None => return Err(format!("Node {id}: no such node in the cluster")),
                },
            };
            Ok(lines.join("\n") + "\n")
        }
        Command::Stop { target, force } => stop(connect, *target, *force),
        Command::Shutdown => shutdown(connect),
        Command::ReportMemoryUsage(target) => {
            report(connect, *target, |id, get| memory_lines(id, get))
        }
        Command::ReportCounters(target) => report(connect, *target, counter_lines),
        Command::ReportBackupStatus(target) => report(connect, *target, backup_status_lines),
        Command::ClusterLog { mode, severities } => clusterlog(connect, mode, severities),
        Command::LogLevel { target, settings } => {
            let mut client = connect().map_err(fail)?;
            let node = match target {
                Target::All => "all".to_string(),
                Target::Node(id) => id.to_string(),
            };
            let mut out = String::new();
            for (category, level) in settings {
                let request = Message::new("set loglevel")
                    .field("node", &node)
                    .field("category", category)
                    .field("level", level);
                client.call(&request, REPLY_TIMEOUT).map_err(fail)?;
                out.push_str(&format!(
                    "Executing CLUSTERLOG {category}={level} on node {node} OK!\n"
                ));
            }
            Ok(out)
        }
    }
}

fn stop(
    connect: &dyn Fn() -> Result<MgmClient, MgmError>,
    target: Target,
    force: bool,
) -> Result<String, String> {
    let mut client = connect().map_err(|e| e.to_string())?;
    let request = match target {
        Target::All => Message::new("stop").field("all", 1),
        Target::Node(id) => Message::new("stop")
            .field("node", id)
            .field("force", u8::from(force)),
    };
    let reply = client
        .call(&request, STOP_REPLY_TIMEOUT)
        .map_err(|e| format!("Shutdown failed.\n*  {e}"))?;
    let stopped = reply.get("stopped").unwrap_or("");
    let mut out = String::new();
    if target == Target::All {
        out.push_str("Executing STOP on all nodes.\n");
    }
    let peers = reply.get("mgmstopped").unwrap_or("");
    for id in stopped
        .split(',')
        .chain(peers.split(','))
        .filter(|s| !s.is_empty())
    {
        out.push_str(&format!("Node {id} has shutdown.\n"));
    }
    if let Some(mgm) = reply.get("mgm") {
        out.push_str(&format!(
            "Node {mgm} has shutdown.\nDisconnecting to allow Management Server to shutdown\n"
        ));
    }
    if target == Target::All {
        out.push_str("NDB Cluster has shutdown.\n");
    }
    Ok(out)
}

/// NDB's lines for START BACKUP: the wait, the start, and the completion with its figures.
fn start_backup(
    connect: &dyn Fn() -> Result<MgmClient, MgmError>,
    id: Option<u32>,
    wait: BackupWait,
    snapshot_start: bool,
) -> Result<String, String> {
    let mut client = connect().map_err(|e| e.to_string())?;
    let mut request = Message::new("start backup").field("wait", wait.as_str());
    if let Some(id) = id {
        request.push("backupid", id);
    }
    if snapshot_start {
        request.push("snapshot", "start");
    }
    let mut out = String::new();
    match wait {
        BackupWait::No => {}
        BackupWait::Started => out.push_str("Waiting for started, this may take several minutes\n"),
        BackupWait::Completed => {
            out.push_str("Waiting for completed, this may take several minutes\n")
        }
    }
    let reply = client.call(&request, BACKUP_REPLY_TIMEOUT).map_err(|e| {
        format!("{out}Backup failed\n*  3001: Could not start backup\n*        {e}")
    })?;
    let field = |name: &str| reply.get(name).unwrap_or("?").to_string();
    let (master, id, from) = (field("master"), field("backupid"), field("from"));
    out.push_str(&format!(
        "Node {master}: Backup {id} started from node {from}\n"
    ));
    if wait == BackupWait::Completed {
        out.push_str(&format!(
            "Node {master}: Backup {id} started from node {from} completed\n \
             StartGCP: {} StopGCP: {}\n #Records: {} #LogRecords: {}\n \
             Data: {} bytes Log: {} bytes\n",
            field("startgci"),
            field("stopgci"),
            field("records"),
            field("logrecords"),
            field("bytes"),
            field("logbytes")
        ));
    }
    Ok(out)
}

fn start(
    connect: &dyn Fn() -> Result<MgmClient, MgmError>,
    target: Target,
) -> Result<String, String> {
    let mut client = connect().map_err(|e| e.to_string())?;
    let request = match target {
        Target::All => Message::new("start").field("all", 1),
        Target::Node(id) => Message::new("start").field("node", id),
    };
    let reply = client
        .call(&request, REPLY_TIMEOUT)
        .map_err(|e| format!("Start failed.\n*  {e}"))?;
    if target == Target::All {
        return Ok("NDB Cluster is being started.\n".into());
    }
    let mut out = String::new();
    for id in reply
        .get("started")
        .unwrap_or("")
        .split(',')
        .filter(|s| !s.is_empty())
    {
        out.push_str(&format!("Database node {id} is being started.\n"));
    }
    Ok(out)
}

/// NDB's lines for a restart: the shutdown events, then `Node 2 is being restarted`.
fn restart(
    connect: &dyn Fn() -> Result<MgmClient, MgmError>,
    target: Target,
    initial: bool,
    no_start: bool,
    force: bool,
) -> Result<String, String> {
    let mut client = connect().map_err(|e| e.to_string())?;
    let request = match target {
        Target::All => Message::new("restart").field("all", 1),
        Target::Node(id) => Message::new("restart").field("node", id),
    }
    .field("initial", u8::from(initial))
    .field("nostart", u8::from(no_start))
    .field("force", u8::from(force));
    let reply = client
        .call(&request, STOP_REPLY_TIMEOUT)
        .map_err(|e| format!("Restart failed.\n*  {e}"))?;
    let mut completed = String::from("Node shutdown completed, restarting");
    if no_start {
        completed.push_str(", no start");
    }
    if initial {
        completed.push_str(", initial");
    }
    let mut out = String::new();
    if target == Target::All {
        out.push_str("Executing RESTART on all nodes.\nStarting shutdown. This may take a while. Please wait...\n");
    }
    for id in reply
        .get("restarted")
        .unwrap_or("")
        .split(',')
        .filter(|s| !s.is_empty())
    {
        out.push_str(&format!(
            "Node {id}: Node shutdown initiated\nNode {id}: {completed}.\nNode {id} is being restarted\n"
        ));
    }
    if target == Target::All {
        // ndb_mgmd starts them together once all are back (with -n, ALL START does).
        out.push_str("NDB Cluster is being restarted.\n");
    }
    Ok(out)
}

fn shutdown(connect: &dyn Fn() -> Result<MgmClient, MgmError>) -> Result<String, String> {
    let mut client = connect().map_err(|e| e.to_string())?;
    let request = Message::new("stop").field("all", 1).field("mgm", 1);
    let reply = client
        .call(&request, STOP_REPLY_TIMEOUT)
        .map_err(|e| format!("Shutdown failed.\n*  {e}"))?;
    let count = reply
        .get("stopped")
        .unwrap_or("")
        .split(',')
        .filter(|s| !s.is_empty())
        .count();
    Ok(format!(
        "{count} NDB Cluster node(s) have shutdown.\n\
         Disconnecting to allow management server to shutdown.\n\
         NDB Cluster management server shutdown.\n"
    ))
}

/// A data node's reported figure by name (`None`: not reported).
type Figures<'a> = &'a dyn Fn(&str) -> Option<u64>;

/// NDB's `Node 1: Data usage is 2%(55 32K pages of total 3200)`: rndb charges DataMemory by
/// bytes, shown here in NDB's 32 KiB pages (rounded up) so the figures read the same. Then the
/// record pools, as NDB's ndbinfo.resources shows them.
fn memory_lines(id: u16, get: Figures<'_>) -> Option<String> {
    const PAGE_BYTES: u64 = 32 * 1024;
    let used = get("datamemory.used")?;
    let total = get("datamemory.total").filter(|t| *t > 0)?;
    let mut out = format!(
        "Node {id}: Data usage is {}%({} 32K pages of total {})\n",
        used * 100 / total,
        used.div_ceil(PAGE_BYTES),
        total / PAGE_BYTES
    );
    for (name, used, total) in [
        ("Transaction record", "transactions", "transactions_max"),
        ("Operation record", "operations", "operations_max"),
    ] {
        if let (Some(used), Some(total)) = (get(used), get(total).filter(|t| *t > 0)) {
            out.push_str(&format!(
                "Node {id}: {name} usage is {}%({used} of total {total})\n",
                used * 100 / total
            ));
        }
    }
    if let Some(scans) = get("scans") {
        out.push_str(&format!("Node {id}: Scan records in use: {scans}\n"));
    }
    if let Some(bytes) = get("send_buffer_bytes") {
        out.push_str(&format!("Node {id}: Send buffer usage: {bytes} bytes\n"));
    }
    Some(out)
}

/// `REPORT BackupStatus`: the node's part of a running backup, as NDB words it.
fn backup_status_lines(id: u16, get: Figures<'_>) -> Option<String> {
    get("frames_sent")?;
    // BackupPhase + 1: 1 running, 2 scanned (0: no backup since the node started).
    let phase = get("backup.phase").unwrap_or(0);
    if !matches!(phase, 1 | 2) {
        return Some(format!("Node {id}: Backup not started\n"));
    }
    let g = |name: &str| get(name).unwrap_or(0);
    Some(format!(
        "Node {id}: Local backup status: backup {} {}\n #Records: {} #LogRecords: {}\n \
         Data: {} bytes Log: {} bytes\n",
        g("backup.id"),
        if phase == 1 {
            "scanning"
        } else {
            "scanned, logging to its stop GCP"
        },
        g("backup.records"),
        g("backup.logrecords"),
        g("backup.bytes"),
        g("backup.logbytes"),
    ))
}

/// `REPORT Counters`: locks, the transporter's counters and the checkpoint state.
fn counter_lines(id: u16, get: Figures<'_>) -> Option<String> {
    let g = |name: &str| get(name).unwrap_or(0);
    get("frames_sent")?;
    Some(format!(
        "Node {id}: Row locks held or waited for: {}, lock waits: {}\n         Node {id}: Transporter: {} frames ({} bytes) sent, {} frames ({} bytes) received, \
         {} send buffer overloads, {} bytes in send buffers\n         Node {id}: Global checkpoint {} (restorable {}), local checkpoint {} (restorable {}{})\n",
        g("row_locks"),
        g("lock_waits"),
        g("frames_sent"),
        g("bytes_sent"),
        g("frames_received"),
        g("bytes_received"),
        g("send_overloads"),
        g("send_buffer_bytes"),
        g("gci_current"),
        g("gci_restorable"),
        g("lcp_id"),
        g("lcp_restorable_id"),
        if g("lcp_running") == 1 { ", running" } else { "" },
    ))
}

/// A REPORT: each targeted data node's figures, formatted by `lines` (`None`: not reported,
/// so not connected).
fn report(
    connect: &dyn Fn() -> Result<MgmClient, MgmError>,
    target: Target,
    lines: fn(u16, Figures<'_>) -> Option<String>,
) -> Result<String, String> {
    let mut client = connect().map_err(|e| e.to_string())?;
    let reply = client
        .call(&Message::new("report memoryusage"), REPLY_TIMEOUT)
        .map_err(|e| e.to_string())?;
    let status = client.status().map_err(|e| e.to_string())?;
    let mut out = String::new();
    for node in status.of_type(NodeType::Ndb) {
        if target != Target::All && target != Target::Node(node.id) {
            continue;
        }
        let get = |name: &str| -> Option<u64> {
            reply
                .parse(&format!("node.{}.{name}", node.id))
                .ok()
                .flatten()
        };
        match lines(node.id, &get) {
            Some(text) => out.push_str(&text),
            None => out.push_str(&format!("Node {}: not connected\n", node.id)),
        }
    }
    if out.is_empty() {
        if let Target::Node(id) = target {
            return Err(format!("Node {id} is not a data node"));
        }
    }
    Ok(out)
}

fn clusterlog(
    connect: &dyn Fn() -> Result<MgmClient, MgmError>,
    mode: &str,
    severities: &[String],
) -> Result<String, String> {
    let mut client = connect().map_err(|e| e.to_string())?;
    let mut last = None;
    if severities.is_empty() {
        let request = Message::new("set clusterlog").field("mode", mode);
        last = Some(
            client
                .call(&request, REPLY_TIMEOUT)
                .map_err(|e| e.to_string())?,
        );
    }
    for severity in severities {
        let request = Message::new("set clusterlog")
            .field("mode", mode)
            .field("severity", severity);
        last = Some(
            client
                .call(&request, REPLY_TIMEOUT)
                .map_err(|e| e.to_string())?,
        );
    }
    let reply = last.ok_or("no reply")?;
    if reply.get("enabled") == Some("0") {
        return Ok("Cluster logging is disabled.\n".into());
    }
    Ok(format!(
        "Severities enabled: {}\n",
        reply.get("severities").unwrap_or("")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(line: &str, expected: Result<Command, &str>) {
        let got = parse(line);
        match expected {
            Ok(command) => assert_eq!(got, Ok(command), "{line:?}"),
            Err(text) => {
                let err = got.expect_err(line);
                assert!(err.contains(text), "{line:?}: {err}");
            }
        }
    }

    #[test]
    fn commands_parse_as_ndb_mgm_reads_them() {
        check("show", Ok(Command::Show));
        check("  SHOW ", Ok(Command::Show));
        check("all status", Ok(Command::Status(Target::All)));
        check("2 STATUS", Ok(Command::Status(Target::Node(2))));
        check(
            "2 stop",
            Ok(Command::Stop {
                target: Target::Node(2),
                force: false,
            }),
        );
        check(
            "2 stop -f",
            Ok(Command::Stop {
                target: Target::Node(2),
                force: true,
            }),
        );
        check(
            "all stop",
            Ok(Command::Stop {
                target: Target::All,
                force: false,
            }),
        );
        check("shutdown", Ok(Command::Shutdown));
        check(
            "all report MemoryUsage",
            Ok(Command::ReportMemoryUsage(Target::All)),
        );
        check(
            "clusterlog toggle debug",
            Ok(Command::ClusterLog {
                mode: "toggle",
                severities: vec!["DEBUG".into()],
            }),
        );
        check(
            "3 clusterlog startup=14 connection=2",
            Ok(Command::LogLevel {
                target: Target::Node(3),
                settings: vec![("STARTUP".into(), 14), ("CONNECTION".into(), 2)],
            }),
        );
        check("2 start", Ok(Command::Start(Target::Node(2))));
        check("all start", Ok(Command::Start(Target::All)));
        check(
            "enter single user mode 50",
            Ok(Command::EnterSingleUser(50)),
        );
        check("Exit Single User Mode", Ok(Command::ExitSingleUser));
        check("exit", Ok(Command::Quit));
        check(
            "start backup",
            Ok(Command::StartBackup {
                id: None,
                wait: BackupWait::Completed,
                snapshot_start: false,
            }),
        );
        check(
            "START BACKUP 12 NOWAIT",
            Ok(Command::StartBackup {
                id: Some(12),
                wait: BackupWait::No,
                snapshot_start: false,
            }),
        );
        check(
            "start backup wait started snapshotend",
            Ok(Command::StartBackup {
                id: None,
                wait: BackupWait::Started,
                snapshot_start: false,
            }),
        );
        check(
            "start backup 7 snapshotstart nowait",
            Ok(Command::StartBackup {
                id: Some(7),
                wait: BackupWait::No,
                snapshot_start: true,
            }),
        );
        assert!(parse("start backup 3 wait").is_err());
        check("abort backup 4", Ok(Command::AbortBackup(4)));
        check(
            "all report BackupStatus",
            Ok(Command::ReportBackupStatus(Target::All)),
        );
        assert!(parse("abort backup x").is_err());
        assert!(parse("enter single user mode")
            .unwrap_err()
            .starts_with("Invalid arguments: expected <NodeId>"));
        assert!(parse("enter single user mode x").is_err());
        assert!(parse("exit single user mode 5").is_err());
        check(
            "2 restart",
            Ok(Command::Restart {
                target: Target::Node(2),
                initial: false,
                no_start: false,
                force: false,
            }),
        );
        check(
            "3 RESTART -n -i -f",
            Ok(Command::Restart {
                target: Target::Node(3),
                initial: true,
                no_start: true,
                force: true,
            }),
        );
        check("2 restart -x", Err("Invalid command"));
        check("2 start now", Err("Invalid command"));
        check(
            "frobnicate",
            Err("Invalid command: frobnicate\nType HELP for help."),
        );
        check("2 frob", Err("Invalid command"));
        check("all stop -f", Err("Invalid command"));
        check("", Err("Invalid command"));
        check("1 clusterlog startup=16", Err("0..15"));
    }
}
