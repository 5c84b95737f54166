//! DBINFO: the rows of the ndbinfo tables (`rndb_protocol::ndbinfo`) made from this node's
//! blocks, for an API node's DBINFO_SCANREQ (NDB's DBINFO block).
//!
//! A request names where the read stands ([`Position`]) and is answered with the rows from
//! there on, up to a page, and where to go on from. The small tables are made whole for each
//! request and paged by row index. Those that grow with the load are walked in place, each
//! request examining at most [`RECORDS_PER_REQUEST`] records, so a request costs the execution
//! thread a bounded time however large the table, and nothing is kept between requests:
//! cluster_transactions over TC's transaction records (as NDB's DBINFO walks its record
//! pools), cluster_locks over every fragment's row slots (NDB walks ACC's operation records;
//! rndb's locks have no records of their own), table_fragments over the tables' fragments. A table read in several
//! pages may see rows move between two pages, as NDB's. The transporters' rows come from the
//! execution loop, which hands the kernel its links' state every timer tick
//! ([`Kernel::set_links`]), so they are at most one tick old.

use std::net::SocketAddr;
use std::time::Instant;

use rndb_config::{ClusterConfig, NodeId, ParamDefault, SectionKind, TransporterKind};
use rndb_protocol::ndbinfo::{
    self, table_id, DbinfoScanConf, DbinfoScanRef, DbinfoScanReq, InfoRow, Page, Position,
};
use rndb_protocol::{gsn, LockMode, OperationType};
use rndb_transporter::FrameHeader;

use super::acc::{LockKind, RowSlot, TransId};
use super::lqh::LqhWork;
use super::{reply, Kernel, Outbox};

/// Bytes of DataMemory shown as one page, as NDB's 32 KiB pages.
const PAGE_BYTES: u64 = 32 * 1024;

/// Records (transaction records, row slots) one request examines at most: a few hundred
/// microseconds of the execution thread.
pub const RECORDS_PER_REQUEST: usize = 16 * 1024;

/// One other node's link, as the execution loop last saw it.
#[derive(Clone, Debug)]
pub struct LinkInfo {
    pub node: NodeId,
    /// Linked now.
    pub connected: bool,
    pub address: Option<SocketAddr>,
    pub kind: Option<TransporterKind>,
    pub encrypted: bool,
    /// Bytes (headers and payloads) through the link now up (0 when none is).
    pub bytes_sent: u64,
    pub bytes_received: u64,
    /// Times a link to the node came up since this node started.
    pub connect_count: u64,
    /// A frame of the largest size would not fit the send buffer now.
    pub overloaded: bool,
    /// Times the link now up went into overload (a send found its send buffer over
    /// OverloadLimit after one that did not).
    pub overload_count: u64,
    pub send_buffer_bytes: u64,
}

impl LinkInfo {
    /// A node never linked.
    pub fn blank(node: NodeId) -> LinkInfo {
        LinkInfo {
            node,
            connected: false,
            address: None,
            kind: None,
            encrypted: false,
            bytes_sent: 0,
            bytes_received: 0,
            connect_count: 0,
            overloaded: false,
            overload_count: 0,
            send_buffer_bytes: 0,
        }
    }
}

/// What DBINFO keeps between requests.
#[derive(Debug)]
pub(crate) struct Dbinfo {
    /// The first timer tick: the node's uptime counts from it.
    born: Option<Instant>,
    /// The other nodes the config links this one to (data and API nodes), with the link's
    /// configured transporter.
    peers: Vec<(NodeId, TransporterKind)>,
    /// The execution loop's links, by node.
    links: Vec<LinkInfo>,
    /// The value of each implemented `[ndbd]` parameter this node runs with, by its number
    /// in `rndb_config::param_table()`.
    config_values: Vec<(u32, String)>,
}

impl Dbinfo {
    pub(crate) fn new(config: &ClusterConfig, me: NodeId) -> Dbinfo {
        let mgm = |n: NodeId| config.mgm_nodes.iter().any(|m| m.node_id == n);
        let mut peers: Vec<(NodeId, TransporterKind)> = config
            .links
            .iter()
            .filter_map(|l| match (l.node1 == me, l.node2 == me) {
                (true, _) => Some((l.node2, l.kind)),
                (_, true) => Some((l.node1, l.kind)),
                _ => None,
            })
            .filter(|(n, _)| !mgm(*n))
            .collect();
        peers.sort_by_key(|(n, _)| *n);
        let config_values = (rndb_config::param_table().iter().enumerate())
            .filter(|(_, p)| p.implemented && p.applies_to(SectionKind::Ndbd))
            .map(|(number, p)| {
                let value = config.param_value(me, p.name).unwrap_or_default();
                (number as u32, value)
            })
            .collect();
        Dbinfo {
            config_values,
            born: None,
            peers,
            links: Vec::new(),
        }
    }
}

impl Kernel {
    /// The execution loop's links now (called every timer tick).
    pub fn set_links(&mut self, links: &mut dyn FnMut(&mut Vec<LinkInfo>)) {
        self.dbinfo.links.clear();
        links(&mut self.dbinfo.links);
    }

    /// Marks the node's start for `nodes.uptime` (the first call counts).
    pub(crate) fn dbinfo_tick(&mut self, now: Instant) {
        self.dbinfo.born.get_or_insert(now);
    }

    /// DBINFO_SCANREQ: one page of an ndbinfo table, or 709 for a table this node does not
    /// know.
    pub(crate) fn exec_dbinfo_scanreq(
        &mut self,
        from: NodeId,
        header: &FrameHeader,
        req: DbinfoScanReq,
        out: &mut dyn Outbox,
        now: Instant,
    ) {
        let me = u64::from(self.me.0);
        let page = match req.table_id {
            table_id::CLUSTER_TRANSACTIONS => Some(self.transaction_page(me, req.position, now)),
            table_id::CLUSTER_LOCKS => Some(self.lock_page(me, req.position)),
            table_id::TABLE_FRAGMENTS => Some(self.fragment_page(me, req.position)),
            id => (self.dbinfo_rows(id, now))
                .map(|rows| DbinfoScanConf::of_rows(id, rows, req.position)),
        };
        match page {
            Some(page) => reply(
                &mut self.unsent,
                out,
                from,
                header,
                gsn::DBINFO_SCANCONF,
                &mut |b| page.encode(b),
            ),
            None => {
                let refusal = DbinfoScanRef {
                    table_id: req.table_id,
                    error: 709,
                };
                reply(
                    &mut self.unsent,
                    out,
                    from,
                    header,
                    gsn::DBINFO_SCANREF,
                    &mut |b| refusal.encode(b),
                )
            }
        }
    }

    /// Every row of small table `id` now (`None`: no such table, or one walked in place).
    pub(crate) fn dbinfo_rows(&self, id: u32, now: Instant) -> Option<Vec<InfoRow>> {
        let me = u64::from(self.me.0);
        let node = || ndbinfo::InfoValue::Number(me);
        let rows = match id {
            table_id::TABLES | table_id::COLUMNS => ndbinfo::catalogue_rows(id)?,
            table_id::NODES => {
                let status = match (self.is_started(), self.single_user()) {
                    (false, _) => "STARTING",
                    (true, Some(_)) => "SINGLEUSER",
                    (true, None) => "STARTED",
                };
                let uptime = self
                    .dbinfo
                    .born
                    .map_or(0, |born| now.saturating_duration_since(born).as_secs());
                vec![vec![
                    node(),
                    uptime.into(),
                    status.into(),
                    u64::from(!self.is_started()).into(),
                ]]
            }
            table_id::MEMORYUSAGE => {
                let used = self.memory_used_bytes();
                let total = self.lqh.memory.limit_bytes();
                vec![vec![
                    node(),
                    "Data memory".into(),
                    used.into(),
                    used.div_ceil(PAGE_BYTES).into(),
                    total.into(),
                    (total / PAGE_BYTES).into(),
                ]]
            }
            table_id::TRANSPORTERS => self.transporter_rows(me),
            table_id::COUNTERS => self.counter_rows(me),
            table_id::POOLS => self.pool_rows(me),
            table_id::LOGSPACES => match &self.lqh.redo {
                Some(redo) => redo
                    .spaces()
                    .into_iter()
                    .map(|(part, total, used)| {
                        vec![
                            node(),
                            "REDO".into(),
                            0u64.into(),
                            u64::from(part).into(),
                            total.into(),
                            used.into(),
                        ]
                    })
                    .collect(),
                None => Vec::new(),
            },
            table_id::LOGBUFFERS => match &self.lqh.redo {
                // One RedoBuffer holds every part's bytes: one row, part 0.
                Some(redo) => vec![vec![
                    node(),
                    "REDO".into(),
                    0u64.into(),
                    0u64.into(),
                    self.durability.redo_buffer.into(),
                    redo.unwritten().into(),
                ]],
                None => Vec::new(),
            },
            table_id::CONFIG_PARAMS => (rndb_config::param_table().iter().enumerate())
                .map(|(number, p)| {
                    let (min, max) = match p.ty.is_numeric() {
                        true => (
                            rndb_config::format_number(p.ty, p.min),
                            rndb_config::format_number(p.ty, p.max),
                        ),
                        false => (String::new(), String::new()),
                    };
                    vec![
                        (number as u32).into(),
                        p.name.into(),
                        p.meaning.into(),
                        p.ty.name().into(),
                        p.default_text().into(),
                        min.into(),
                        max.into(),
                        u64::from(p.default == ParamDefault::Required).into(),
                        if p.implemented {
                            "implemented"
                        } else {
                            "recognised"
                        }
                        .into(),
                    ]
                })
                .collect(),
            table_id::CONFIG_VALUES => (self.dbinfo.config_values.iter())
                .map(|(number, value)| vec![node(), (*number).into(), value.as_str().into()])
                .collect(),
            table_id::BACKUP_ID => vec![vec![self.last_backup_id().into()]],
            table_id::ERROR_MESSAGES => rndb_protocol::error::all_codes()
                .map(|(code, class, message)| {
                    vec![
                        code.into(),
                        message.into(),
                        class.status().into(),
                        class.description().into(),
                    ]
                })
                .collect(),
            _ => return None,
        };
        Some(rows)
    }

    fn transporter_rows(&self, me: u64) -> Vec<InfoRow> {
        self.dbinfo
            .peers
            .iter()
            .map(|&(peer, configured)| {
                let blank = LinkInfo::blank(peer);
                let l = (self.dbinfo.links.iter().find(|l| l.node == peer)).unwrap_or(&blank);
                let kind = l.kind.unwrap_or(configured);
                vec![
                    me.into(),
                    u64::from(peer.0).into(),
                    if l.connected {
                        "CONNECTED"
                    } else {
                        "DISCONNECTED"
                    }
                    .into(),
                    l.address
                        .filter(|_| l.connected)
                        .map_or(String::new(), |a| a.ip().to_string())
                        .into(),
                    l.bytes_sent.into(),
                    l.bytes_received.into(),
                    l.connect_count.into(),
                    u64::from(l.overloaded).into(),
                    l.overload_count.into(),
                    u64::from(l.encrypted).into(),
                    l.send_buffer_bytes.into(),
                    transporter_name(kind).into(),
                ]
            })
            .collect()
    }

    /// A page of cluster_transactions: TC's transaction records from record `position[0]` on.
    fn transaction_page(&self, me: u64, position: Position, now: Instant) -> DbinfoScanConf {
        let mut page = Page::default();
        let mut next = None;
        let records = self.tc.transaction_records(position[0] as usize, now);
        for (examined, (record, transaction)) in records.enumerate() {
            if examined == RECORDS_PER_REQUEST || page.is_full() {
                next = Some([record as u32, 0, 0, 0]);
                break;
            }
            let Some(t) = transaction else {
                continue;
            };
            page.push(vec![
                me.into(),
                0u64.into(),
                t.trans.0.into(),
                t.state.into(),
                u64::from(t.operations).into(),
                u64::from(t.outstanding).into(),
                t.inactive_seconds.into(),
                (t.trans.0 >> 32).into(),
                (t.trans.0 & 0xFFFF_FFFF).into(),
            ]);
        }
        page.into_conf(table_id::CLUSTER_TRANSACTIONS, next)
    }

    /// A page of cluster_locks: every row lock held or waited for, walking the tables in id
    /// order, their fragments and their row slots, from `position` = (table, fragment, slot,
    /// lock entry) on. A slot's holders come first, then its waiters in queue order.
    fn lock_page(&self, me: u64, position: Position) -> DbinfoScanConf {
        let [at_table, at_fragment, at_slot, at_entry] = position;
        let mut tables: Vec<u32> = (self.lqh.fragments.keys().copied())
            .filter(|&t| t >= at_table)
            .collect();
        tables.sort_unstable();
        let mut page = Page::default();
        let mut examined = 0;
        for table in tables {
            let fragments = &self.lqh.fragments[&table];
            let first_fragment = if table == at_table { at_fragment } else { 0 };
            for fragment in first_fragment..fragments.len() as u32 {
                let rows = &fragments[fragment as usize].rows;
                let here = table == at_table && fragment == at_fragment;
                for slot_id in if here { at_slot } else { 0 }..rows.id_end() {
                    let first_entry = if here && slot_id == at_slot {
                        at_entry
                    } else {
                        0
                    };
                    if examined == RECORDS_PER_REQUEST || page.is_full() {
                        let next = [table, fragment, slot_id, first_entry];
                        return page.into_conf(table_id::CLUSTER_LOCKS, Some(next));
                    }
                    examined += 1;
                    let Some(slot) = rows.slot(slot_id).filter(|s| !s.lock.is_idle()) else {
                        continue;
                    };
                    let entries = slot.lock.entries();
                    for i in (first_entry as usize)..entries.len() {
                        if page.is_full() {
                            let next = [table, fragment, slot_id, i as u32];
                            return page.into_conf(table_id::CLUSTER_LOCKS, Some(next));
                        }
                        page.push(lock_row(me, [table, fragment, slot_id], slot, &entries, i));
                    }
                }
            }
        }
        page.into_conf(table_id::CLUSTER_LOCKS, None)
    }

    /// A page of table_fragments: each table's fragments in (table, fragment) order from
    /// `position` on, with the partition's replicas: the config's order, and the live ones
    /// primary first (failed nodes and nodes still being copied to left out).
    fn fragment_page(&self, me: u64, position: Position) -> DbinfoScanConf {
        let [at_table, at_fragment, ..] = position;
        let parts = u64::from(self.durability.no_of_fragment_log_parts.max(1));
        let mut page = Page::default();
        let mut examined = 0;
        let tables = self.dict.table_ids().into_iter().filter(|&t| t >= at_table);
        for table_id in tables {
            let Some(table) = self.dict.get(table_id) else {
                continue;
            };
            let first = if table_id == at_table { at_fragment } else { 0 };
            for fragment in first..table.fragment_count {
                if examined == RECORDS_PER_REQUEST || page.is_full() {
                    let next = [table_id, fragment, 0, 0];
                    return page.into_conf(table_id::TABLE_FRAGMENTS, Some(next));
                }
                examined += 1;
                let configured = self.dih.replicas(fragment);
                let live = self.live_replicas(fragment);
                let alive = (configured.iter())
                    .filter(|&&n| self.qmgr.is_alive(n))
                    .count();
                let nth = |i: usize| live.get(i).map_or(0, |n| u64::from(n.0));
                page.push(vec![
                    me.into(),
                    table_id.into(),
                    fragment.into(),
                    fragment.into(),
                    (u64::from(fragment) % parts).into(),
                    (configured.len() as u64).into(),
                    nth(0).into(),
                    configured.first().map_or(0, |n| u64::from(n.0)).into(),
                    nth(1).into(),
                    nth(2).into(),
                    nth(3).into(),
                    (alive as u64).into(),
                    ((configured.len() - alive) as u64).into(),
                ]);
            }
        }
        page.into_conf(table_id::TABLE_FRAGMENTS, None)
    }

    fn counter_rows(&self, me: u64) -> Vec<InfoRow> {
        let tc = &self.tc.counters;
        // NDB's block names and counter ids (ndbinfo.counters).
        let counters: [(&str, u64, &str, u64); 11] = [
            ("DBTC", 2, "TRANSACTIONS", tc.transactions),
            ("DBTC", 3, "COMMITS", tc.commits),
            ("DBTC", 4, "READS", tc.reads),
            ("DBTC", 5, "SIMPLE_READS", tc.simple_reads),
            ("DBTC", 6, "WRITES", tc.writes),
            ("DBTC", 7, "ABORTS", tc.aborts),
            ("DBTC", 8, "TABLE_SCANS", tc.table_scans),
            ("DBTC", 9, "RANGE_SCANS", tc.range_scans),
            ("DBLQH", 10, "OPERATIONS", self.lqh.operations_total),
            ("DBTC", 24, "LOCAL_READS", tc.local_reads),
            ("DBTC", 25, "LOCAL_WRITES", tc.local_writes),
        ];
        counters
            .into_iter()
            .map(|(block, id, name, value)| {
                vec![
                    me.into(),
                    block.into(),
                    0u64.into(),
                    id.into(),
                    name.into(),
                    value.into(),
                ]
            })
            .collect()
    }

    fn pool_rows(&self, me: u64) -> Vec<InfoRow> {
        let (operations, operations_max) = self.tc.operations_in_use();
        let (index_ops, index_ops_max) = self.tc.index_operations_in_use();
        let (fired, fired_max) = self.tc.fired_triggers_in_use();
        let (scans, scans_max, fragment_scans, fragment_scans_max) = self.scans.pools();
        let (local_ops, local_ops_max) = self.lqh.operation_records();
        let pools: [(&str, &str, u64, u64, &str); 7] = [
            (
                "DBTC",
                "Transaction Record",
                self.transaction_count() as u64,
                u64::from(self.tc.transactions_max()),
                "MaxNoOfConcurrentTransactions",
            ),
            (
                "DBTC",
                "Operation Record",
                u64::from(operations),
                u64::from(operations_max),
                "MaxNoOfConcurrentOperations",
            ),
            (
                "DBTC",
                "Scan Record",
                scans as u64,
                u64::from(scans_max),
                "MaxNoOfConcurrentScans",
            ),
            (
                "DBTC",
                "Index Operation",
                u64::from(index_ops),
                u64::from(index_ops_max),
                "MaxNoOfConcurrentIndexOperations",
            ),
            (
                "DBTC",
                "Fired Trigger",
                u64::from(fired),
                u64::from(fired_max),
                "MaxNoOfFiredTriggers",
            ),
            (
                "DBTC",
                "Scan Fragment",
                fragment_scans as u64,
                u64::from(fragment_scans_max),
                "MaxNoOfLocalScans",
            ),
            (
                "DBLQH",
                "Operation Record",
                local_ops,
                local_ops_max,
                "MaxNoOfLocalOperations",
            ),
        ];
        pools
            .into_iter()
            .map(|(block, pool, used, total, param)| {
                vec![
                    me.into(),
                    block.into(),
                    0u64.into(),
                    pool.into(),
                    used.into(),
                    total.into(),
                    param.into(),
                ]
            })
            .collect()
    }
}

/// The cluster_locks row of entry `i` of `entries` (`Lock::entries` of `slot`, the row slot at
/// table, fragment, slot id).
fn lock_row(
    me: u64,
    [table, fragment, slot_id]: [u32; 3],
    slot: &RowSlot<LqhWork>,
    entries: &[(TransId, LockKind, Option<&LqhWork>)],
    i: usize,
) -> InfoRow {
    let (trans, kind, waits) = entries[i];
    let exclusive = kind == LockKind::Exclusive;
    let op = match waits {
        Some(work) => waiting_op(work, exclusive),
        None if !exclusive => "READ-SH",
        None => match &slot.pending {
            Some(p) if p.trans == trans => match (&slot.committed, &p.image) {
                (_, None) => "DELETE",
                (None, Some(_)) => "INSERT",
                (Some(_), Some(_)) => "UPDATE",
            },
            _ => "READ-EX",
        },
    };
    // A waiter waits for the first holder of another transaction (a lock upgrade's waiter
    // may share the lock with itself).
    let waiting_for = waits.map_or(0, |_| {
        (entries.iter())
            .find(|(t, _, w)| w.is_none() && *t != trans)
            .map_or(0, |(t, _, _)| t.0)
    });
    vec![
        me.into(),
        0u64.into(),
        table.into(),
        fragment.into(),
        slot_id.into(),
        trans.0.into(),
        if exclusive { "X" } else { "S" }.into(),
        if waits.is_some() { "W" } else { "H" }.into(),
        if i == 0 && waits.is_none() { "*" } else { "" }.into(),
        op.into(),
        waiting_for.into(),
    ]
}

/// NDB's name of the operation a waiter waits to run (`exclusive`: the lock it asks for).
fn waiting_op(work: &LqhWork, exclusive: bool) -> &'static str {
    match work {
        LqhWork::Key(req) => match (req.op_type, req.lock_mode) {
            (OperationType::Read, LockMode::Exclusive) => "READ-EX",
            (OperationType::Read, _) => "READ-SH",
            (OperationType::Insert, _) => "INSERT",
            (OperationType::Update, _) => "UPDATE",
            (OperationType::Delete, _) => "DELETE",
            (OperationType::Write, _) => "WRITE",
        },
        LqhWork::Scan { .. } if exclusive => "SCAN-EX",
        LqhWork::Scan { .. } => "SCAN-SH",
    }
}

/// NDB's name of a transporter type.
fn transporter_name(kind: TransporterKind) -> &'static str {
    match kind {
        TransporterKind::Tcp => "TCP",
        TransporterKind::Shm => "SHM",
        TransporterKind::Uring => "IOURING",
    }
}
