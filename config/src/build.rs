//! The third pass: typed sections to the nodes of a [`ClusterConfig`], with node ids assigned,
//! node groups formed and links chosen.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use crate::error::Diag;
use crate::groups::{self, DataDraft};
use crate::ids::{self, IdRequest};
use crate::layered::{collect_defaults, Layered};
use crate::links;
use crate::model::{
    ApiSlotConfig, Arbitration, ClusterConfig, DataNodeConfig, Durability, MgmNodeConfig, NodeId,
    NodeKind,
};
use crate::params::{param_table, ParamDefault, SectionKind};
use crate::syntax::Target;
use crate::values::TypedSection;

/// Builds the cluster from the typed sections, reporting every inconsistency in `diag`.
pub(crate) fn build(sections: &[TypedSection], source: &Path, diag: &mut Diag) -> ClusterConfig {
    let defaults = collect_defaults(sections);
    let mut data = Vec::new();
    let mut mgm = Vec::new();
    let mut api = Vec::new();
    let mut link_sections = Vec::new();
    for section in sections {
        let Target::Instance(kind) = section.target else {
            continue;
        };
        let layered = Layered::new(kind, Some(section), &defaults);
        check_required(&layered, diag);
        match kind {
            SectionKind::Ndbd => data.push(data_draft(&layered, diag)),
            SectionKind::Mgm => mgm.push((mgm_node(&layered), id_request(&layered, NodeKind::Mgm))),
            SectionKind::Api => api.push((api_slot(&layered), id_request(&layered, NodeKind::Api))),
            SectionKind::Tcp | SectionKind::Shm => link_sections.push(layered),
        }
    }
    let requests: Vec<&IdRequest> = data
        .iter()
        .map(|d| &d.id)
        .chain(mgm.iter().map(|(_, r)| r))
        .chain(api.iter().map(|(_, r)| r))
        .collect();
    let assigned = ids::assign(&requests, diag);
    let default_host_names: BTreeSet<NodeId> = requests
        .iter()
        .zip(&assigned)
        .filter(|(request, _)| request.host_name_is_default)
        .filter_map(|(_, id)| *id)
        .collect();
    let mut assigned = assigned.into_iter();
    let data: Vec<DataDraft> = data
        .into_iter()
        .zip(assigned.by_ref())
        .filter_map(|(mut d, id)| {
            id.map(|id| {
                d.config.node_id = id;
                d
            })
        })
        .collect();
    let mgm_nodes = with_ids(mgm, assigned.by_ref(), |n, id| n.node_id = id);
    let api_slots = with_ids(api, assigned.by_ref(), |n, id| n.node_id = id);
    if data.is_empty() {
        diag.error(
            0,
            None,
            None,
            "no data node: the file needs at least one [ndbd] section",
        );
    }
    let no_of_replicas = groups::check_replicas(&data, diag);
    let (mut data_nodes, node_groups) = groups::form(data, no_of_replicas, diag);
    let data_node_count = data_nodes.len() as u64;
    for node in data_nodes
        .iter_mut()
        .filter(|n| n.max_no_of_local_scans == 0)
    {
        let scans = 4 * u64::from(node.max_no_of_concurrent_scans) * data_node_count + 2;
        node.max_no_of_local_scans = u32::try_from(scans).unwrap_or(u32::MAX);
    }
    let no_of_replicas = no_of_replicas.map_or(1, |r| r.count);
    let mut config = ClusterConfig {
        source: PathBuf::from(source),
        no_of_replicas,
        data_nodes,
        mgm_nodes,
        api_slots,
        node_groups,
        links: Vec::new(),
        warnings: Vec::new(),
    };
    config.links = links::choose(
        &config,
        &link_sections,
        &defaults,
        &default_host_names,
        diag,
    );
    config
}

/// Reports every required parameter the section (and its defaults) leaves out.
fn check_required(layered: &Layered<'_>, diag: &mut Diag) {
    let required = param_table()
        .iter()
        .filter(|p| p.applies_to(layered.kind) && p.default == ParamDefault::Required);
    for param in required {
        if layered.setting(param.name).is_none() && !layered.rejected(param.name) {
            let section = layered.section_name();
            diag.error(
                layered.line(),
                section,
                Some(param.name),
                "required but not given",
            );
        }
    }
}

/// Keeps the nodes that got an id, with the id written in.
fn with_ids<T>(
    nodes: Vec<(T, IdRequest)>,
    ids: impl Iterator<Item = Option<NodeId>>,
    set: impl Fn(&mut T, NodeId),
) -> Vec<T> {
    nodes
        .into_iter()
        .zip(ids)
        .filter_map(|((mut node, _), id)| {
            let id = id?;
            set(&mut node, id);
            Some(node)
        })
        .collect()
}

fn id_request(layered: &Layered<'_>, kind: NodeKind) -> IdRequest {
    IdRequest {
        kind,
        explicit: layered
            .opt_int("NodeId")
            .and_then(|n| u16::try_from(n).ok()),
        rejected: layered.rejected("NodeId"),
        line: layered.line_of("NodeId"),
        section: layered.section_name().unwrap_or_default().to_string(),
        host_name_is_default: layered.setting("HostName").is_none(),
    }
}

fn data_draft(l: &Layered<'_>, diag: &mut Diag) -> DataDraft {
    let config = DataNodeConfig {
        node_id: NodeId(0),
        host_name: l.text("HostName").unwrap_or_default(),
        server_port: l.opt_int("ServerPort").and_then(|n| u16::try_from(n).ok()),
        data_dir: PathBuf::from(l.text("DataDir").unwrap_or_default()),
        node_group: 0,
        data_memory_bytes: l.int("DataMemory"),
        min_free_pct: l.u32("MinFreePct") as u8,
        max_no_of_concurrent_operations: l.u32("MaxNoOfConcurrentOperations"),
        max_no_of_local_operations: l
            .opt_int("MaxNoOfLocalOperations")
            .and_then(|n| u32::try_from(n).ok())
            .unwrap_or_else(|| {
                let concurrent = u64::from(l.u32("MaxNoOfConcurrentOperations"));
                u32::try_from(concurrent * 11 / 10).unwrap_or(u32::MAX)
            }),
        max_dml_operations_per_transaction: l.u32("MaxDMLOperationsPerTransaction"),
        max_no_of_concurrent_index_operations: l.u32("MaxNoOfConcurrentIndexOperations"),
        max_no_of_fired_triggers: l.u32("MaxNoOfFiredTriggers"),
        stop_on_error: l.bool("StopOnError"),
        max_start_fail_retries: l.u32("MaxStartFailRetries"),
        start_fail_retry_delay_s: l.u32("StartFailRetryDelay"),
        time_between_watchdog_check_ms: l.u32("TimeBetweenWatchDogCheck"),
        start_failure_timeout_ms: l.u32("StartFailureTimeout"),
        max_no_of_saved_messages: l.u32("MaxNoOfSavedMessages"),
        mem_report_frequency_s: l.u32("MemReportFrequency"),
        backup_report_frequency_s: l.u32("BackupReportFrequency"),
        max_no_of_subscriptions: l.u32("MaxNoOfSubscriptions"),
        max_no_of_subscribers: l.u32("MaxNoOfSubscribers"),
        max_buffered_epochs: l.u32("MaxBufferedEpochs"),
        max_buffered_epoch_bytes: l.int("MaxBufferedEpochBytes"),
        max_no_of_concurrent_transactions: l.u32("MaxNoOfConcurrentTransactions"),
        max_no_of_concurrent_scans: l.u32("MaxNoOfConcurrentScans"),
        // 0 (below the minimum): absent, computed once the data nodes are counted.
        max_no_of_local_scans: l
            .opt_int("MaxNoOfLocalScans")
            .and_then(|n| u32::try_from(n).ok())
            .unwrap_or(0),
        batch_size_per_local_scan: l.u32("BatchSizePerLocalScan"),
        max_no_of_tables: l.u32("MaxNoOfTables"),
        max_no_of_attributes: l.u32("MaxNoOfAttributes"),
        max_no_of_ordered_indexes: l.u32("MaxNoOfOrderedIndexes"),
        max_no_of_unique_hash_indexes: l.u32("MaxNoOfUniqueHashIndexes"),
        transaction_deadlock_detection_timeout_ms: l.u32("TransactionDeadlockDetectionTimeout"),
        transaction_inactive_timeout_ms: l.u32("TransactionInactiveTimeout"),
        heartbeat_interval_db_db_ms: l.u32("HeartbeatIntervalDbDb"),
        heartbeat_interval_db_api_ms: l.u32("HeartbeatIntervalDbApi"),
        start_partial_timeout_ms: l.u32("StartPartialTimeout"),
        lock_pages_in_main_memory: l.u32("LockPagesInMainMemory") as u8,
        tcp_bind_inaddr_any: l.bool("TcpBind_INADDR_ANY"),
        arbitration: arbitration(l, diag),
        arbitration_timeout_ms: l.u32("ArbitrationTimeout"),
        durability: Durability {
            diskless: l.bool("Diskless"),
            file_system_path: l.text("FileSystemPath").map(PathBuf::from),
            time_between_global_checkpoints_ms: l.u32("TimeBetweenGlobalCheckpoints"),
            time_between_global_checkpoints_timeout_ms: l
                .u32("TimeBetweenGlobalCheckpointsTimeout"),
            time_between_epochs_ms: l.u32("TimeBetweenEpochs"),
            no_of_fragment_log_parts: l.u32("NoOfFragmentLogParts"),
            no_of_fragment_log_files: l.u32("NoOfFragmentLogFiles"),
            fragment_log_file_size: l.int("FragmentLogFileSize"),
            redo_buffer: l.int("RedoBuffer"),
            time_between_local_checkpoints: l.u32("TimeBetweenLocalCheckpoints"),
            backup_data_dir: l.text("BackupDataDir").map(PathBuf::from),
            backup_log_buffer_size: l.int("BackupLogBufferSize"),
            backup_data_buffer_size: l.int("BackupDataBufferSize"),
            backup_write_size: l.int("BackupWriteSize"),
            backup_max_write_size: l.int("BackupMaxWriteSize"),
        },
        use_shm: l.bool("UseShm"),
        max_no_of_execution_threads: l.u32("MaxNoOfExecutionThreads"),
        scheduler_spin_timer_us: l.u32("SchedulerSpinTimer"),
        lock_execute_thread_to_cpu: cpu_list(l, diag),
        require_tls: l.bool("RequireTls"),
        require_certificate: l.bool("RequireCertificate"),
        line: l.line(),
    };
    DataDraft {
        config,
        id: id_request(l, NodeKind::Data),
        nodegroup: l.opt_int("Nodegroup").and_then(|n| u32::try_from(n).ok()),
        replicas: (!l.rejected("NoOfReplicas")).then(|| l.u32("NoOfReplicas")),
        replicas_is_default: l.setting("NoOfReplicas").is_none(),
        replicas_line: l.line_of("NoOfReplicas"),
    }
}

fn mgm_node(l: &Layered<'_>) -> MgmNodeConfig {
    MgmNodeConfig {
        node_id: NodeId(0),
        host_name: l.text("HostName").unwrap_or_default(),
        port_number: u16::try_from(l.int("PortNumber")).unwrap_or(u16::MAX),
        data_dir: PathBuf::from(l.text("DataDir").unwrap_or_default()),
        arbitration_rank: l.u32("ArbitrationRank"),
        arbitration_delay_ms: l.u32("ArbitrationDelay"),
        require_tls: l.bool("RequireTls"),
        require_certificate: l.bool("RequireCertificate"),
        line: l.line(),
    }
}

fn api_slot(l: &Layered<'_>) -> ApiSlotConfig {
    ApiSlotConfig {
        node_id: NodeId(0),
        node_id_explicit: l.opt_int("NodeId").is_some(),
        host_name: l.text("HostName").filter(|h| !h.is_empty()),
        batch_size: l.u32("BatchSize"),
        batch_byte_size: l.u32("BatchByteSize"),
        max_scan_batch_size: l.u32("MaxScanBatchSize"),
        // Range-checked to 0..=65535 by the parameter table.
        rondis_server_port: l
            .opt_int("RondisServerPort")
            .and_then(|n| u16::try_from(n).ok()),
        require_tls: l.bool("RequireTls"),
        arbitration_rank: l.u32("ArbitrationRank"),
        line: l.line(),
    }
}

/// Arbitration: Default, Disabled or WaitExternal; another value is an error at its line.
fn arbitration(l: &Layered<'_>, diag: &mut Diag) -> Arbitration {
    const NAME: &str = "Arbitration";
    let Some(text) = l.text(NAME) else {
        return Arbitration::Default;
    };
    Arbitration::parse(&text).unwrap_or_else(|| {
        let reason = format!("'{text}' is not one of Default, Disabled, WaitExternal");
        diag.error(l.line_of(NAME), l.section_name(), Some(NAME), reason);
        Arbitration::Default
    })
}

/// The most CPUs a CPU list may name (a bound on what a config line can make us allocate).
const CPU_ID_MAX: usize = 4095;

/// LockExecuteThreadToCPU as a list of CPU ids: comma-separated ids and `a-b` ranges, as NDB
/// writes them. A malformed list is an error at its line; an absent one is empty.
fn cpu_list(l: &Layered<'_>, diag: &mut Diag) -> Vec<usize> {
    const NAME: &str = "LockExecuteThreadToCPU";
    let Some(text) = l.text(NAME) else {
        return Vec::new();
    };
    match parse_cpu_list(&text) {
        Ok(cpus) => cpus,
        Err(reason) => {
            let line = l.line_of(NAME);
            diag.error(line, l.section_name(), Some(NAME), reason);
            Vec::new()
        }
    }
}

/// Parses `0`, `0-3`, `1,3,5-6` into sorted, distinct CPU ids.
pub(crate) fn parse_cpu_list(text: &str) -> Result<Vec<usize>, String> {
    let mut cpus = Vec::new();
    for part in text.split(',').map(str::trim) {
        let (first, last) = match part.split_once('-') {
            Some((a, b)) => (a.trim(), b.trim()),
            None => (part, part),
        };
        let parse = |s: &str| {
            s.parse::<usize>()
                .ok()
                .filter(|&n| n <= CPU_ID_MAX)
                .ok_or_else(|| format!("{text:?} is not a CPU list (like 1, 0-3 or 0,2); CPU ids are 0..={CPU_ID_MAX}"))
        };
        let (first, last) = (parse(first)?, parse(last)?);
        if first > last {
            return Err(format!("CPU range {part} runs backwards"));
        }
        cpus.extend(first..=last);
    }
    cpus.sort_unstable();
    cpus.dedup();
    Ok(cpus)
}

#[cfg(test)]
mod tests {
    use super::parse_cpu_list;

    #[test]
    fn cpu_lists_parse_as_ndb_writes_them() {
        assert_eq!(parse_cpu_list("1"), Ok(vec![1]));
        assert_eq!(parse_cpu_list("0-3"), Ok(vec![0, 1, 2, 3]));
        assert_eq!(parse_cpu_list("5, 1,2-3,2"), Ok(vec![1, 2, 3, 5]));
        assert!(parse_cpu_list("3-1").is_err());
        assert!(parse_cpu_list("one").is_err());
        assert!(parse_cpu_list("").is_err());
        assert!(parse_cpu_list("0-99999999").is_err());
    }
}
