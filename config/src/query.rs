//! Reading a resolved value back by its NDB parameter name, as `ndb_config --query` does.

use crate::model::{ClusterConfig, LinkConfig, NodeId, NodeKind};
use crate::params::{find_param, SectionKind};

impl ClusterConfig {
    /// The value of parameter `name` (NDB spelling, any case) for node `id`, as text.
    ///
    /// Besides the table's names this knows the pseudo-field `type` (`ndbd`, `mgmd` or `api`)
    /// and ndb_config's short names `id` and `host`. A parameter of the node's section that
    /// rndb does not implement reads as an empty string; a name that is no parameter of the
    /// node's section (or no node `id`) gives `None`.
    pub fn param_value(&self, id: NodeId, name: &str) -> Option<String> {
        let kind = self.node_kind(id)?;
        let name = canonical_query_name(name);
        if name == "type" {
            return Some(node_type_name(kind).to_string());
        }
        let section = match kind {
            NodeKind::Data => SectionKind::Ndbd,
            NodeKind::Mgm => SectionKind::Mgm,
            NodeKind::Api => SectionKind::Api,
        };
        let info = find_param(section, &name)?;
        if !info.implemented {
            return Some(String::new());
        }
        if matches!(info.name, "RequireTls" | "RequireCertificate") {
            let (tls, certificate) = self.tls_required(id);
            let on = if info.name == "RequireTls" {
                tls
            } else {
                certificate
            };
            return Some(u8::from(on).to_string());
        }
        match kind {
            NodeKind::Data => self
                .data_node(id)
                .and_then(|n| data_value(self, n.node_id, info.name)),
            NodeKind::Mgm => {
                let node = self.mgm_nodes.iter().find(|n| n.node_id == id)?;
                match info.name {
                    "NodeId" => Some(node.node_id.to_string()),
                    "HostName" => Some(node.host_name.clone()),
                    "PortNumber" => Some(node.port_number.to_string()),
                    "DataDir" => Some(node.data_dir.display().to_string()),
                    "ArbitrationRank" => Some(node.arbitration_rank.to_string()),
                    "ArbitrationDelay" => Some(node.arbitration_delay_ms.to_string()),
                    _ => None,
                }
            }
            NodeKind::Api => {
                let slot = self.api_slot(id)?;
                match info.name {
                    "NodeId" => Some(slot.node_id.to_string()),
                    "HostName" => Some(slot.host_name.clone().unwrap_or_default()),
                    "BatchSize" => Some(slot.batch_size.to_string()),
                    "ArbitrationRank" => Some(slot.arbitration_rank.to_string()),
                    "BatchByteSize" => Some(slot.batch_byte_size.to_string()),
                    "MaxScanBatchSize" => Some(slot.max_scan_batch_size.to_string()),
                    "RondisServerPort" => Some(
                        slot.rondis_server_port
                            .map_or_else(String::new, |p| p.to_string()),
                    ),
                    _ => None,
                }
            }
        }
    }
}

impl LinkConfig {
    /// The value of link parameter `name` (NDB spelling, any case), as text; `type` gives
    /// `TCP`, `SHM` or `URING`. `None` for a name that is no parameter of this kind of link.
    pub fn param_value(&self, name: &str) -> Option<String> {
        let name = canonical_query_name(name);
        if name == "type" {
            return Some(self.kind.to_string());
        }
        let section = match self.kind {
            crate::model::TransporterKind::Tcp | crate::model::TransporterKind::Uring => {
                SectionKind::Tcp
            }
            crate::model::TransporterKind::Shm => SectionKind::Shm,
        };
        let info = find_param(section, &name)?;
        let value = match info.name {
            "NodeId1" => self.node1.to_string(),
            "NodeId2" => self.node2.to_string(),
            "SendBufferMemory" => self.send_buffer_memory_bytes.to_string(),
            "ReceiveBufferMemory" => self.receive_buffer_memory_bytes.to_string(),
            "Checksum" => u8::from(self.checksum).to_string(),
            "OverloadLimit" => self.overload_limit_bytes.to_string(),
            "ShmSize" => self.shm_size_bytes.to_string(),
            "ShmSpintime" => self.shm_spintime_us.to_string(),
            "UseIoUring" => u8::from(self.kind == crate::model::TransporterKind::Uring).to_string(),
            _ => String::new(),
        };
        Some(value)
    }
}

/// `ndbd`, `mgmd` or `api`: the names `ndb_config --type` takes.
pub fn node_type_name(kind: NodeKind) -> &'static str {
    match kind {
        NodeKind::Data => "ndbd",
        NodeKind::Mgm => "mgmd",
        NodeKind::Api => "api",
    }
}

/// Folds ndb_config's short names (`id`, `host`, `nodeid`, `type`) onto the table's.
fn canonical_query_name(name: &str) -> String {
    match name.to_ascii_lowercase().as_str() {
        "id" => "NodeId".to_string(),
        "host" => "HostName".to_string(),
        "type" => "type".to_string(),
        _ => name.to_string(),
    }
}

fn data_value(config: &ClusterConfig, id: NodeId, name: &str) -> Option<String> {
    let n = config.data_node(id)?;
    let value = match name {
        "NodeId" => n.node_id.to_string(),
        "HostName" => n.host_name.clone(),
        "ServerPort" => config.data_node_port(id)?.to_string(),
        "DataDir" => n.data_dir.display().to_string(),
        "Diskless" => u8::from(n.durability.diskless).to_string(),
        "FileSystemPath" => n.durability.file_system_path.as_ref().map_or_else(
            || n.data_dir.display().to_string(),
            |p| p.display().to_string(),
        ),
        "TimeBetweenGlobalCheckpoints" => {
            n.durability.time_between_global_checkpoints_ms.to_string()
        }
        "TimeBetweenGlobalCheckpointsTimeout" => n
            .durability
            .time_between_global_checkpoints_timeout_ms
            .to_string(),
        "TimeBetweenEpochs" => n.durability.time_between_epochs_ms.to_string(),
        "HeartbeatIntervalDbDb" => n.heartbeat_interval_db_db_ms.to_string(),
        "HeartbeatIntervalDbApi" => n.heartbeat_interval_db_api_ms.to_string(),
        "StartPartialTimeout" => n.start_partial_timeout_ms.to_string(),
        "LockPagesInMainMemory" => n.lock_pages_in_main_memory.to_string(),
        "TcpBind_INADDR_ANY" => u8::from(n.tcp_bind_inaddr_any).to_string(),
        "Arbitration" => n.arbitration.as_str().to_string(),
        "ArbitrationTimeout" => n.arbitration_timeout_ms.to_string(),
        "NoOfFragmentLogParts" => n.durability.no_of_fragment_log_parts.to_string(),
        "NoOfFragmentLogFiles" => n.durability.no_of_fragment_log_files.to_string(),
        "FragmentLogFileSize" => n.durability.fragment_log_file_size.to_string(),
        "RedoBuffer" => n.durability.redo_buffer.to_string(),
        "TimeBetweenLocalCheckpoints" => n.durability.time_between_local_checkpoints.to_string(),
        "BackupDataDir" => n.durability.backup_dir(&n.data_dir).display().to_string(),
        "BackupLogBufferSize" => n.durability.backup_log_buffer_size.to_string(),
        "BackupDataBufferSize" => n.durability.backup_data_buffer_size.to_string(),
        "BackupWriteSize" => n.durability.backup_write_size.to_string(),
        "BackupMaxWriteSize" => n.durability.backup_max_write_size.to_string(),
        "NoOfReplicas" => config.no_of_replicas.to_string(),
        "DataMemory" => n.data_memory_bytes.to_string(),
        "MinFreePct" => n.min_free_pct.to_string(),
        "MaxNoOfConcurrentOperations" => n.max_no_of_concurrent_operations.to_string(),
        "MaxNoOfLocalOperations" => n.max_no_of_local_operations.to_string(),
        "MaxDMLOperationsPerTransaction" => n.max_dml_operations_per_transaction.to_string(),
        "MaxNoOfConcurrentIndexOperations" => n.max_no_of_concurrent_index_operations.to_string(),
        "MaxNoOfFiredTriggers" => n.max_no_of_fired_triggers.to_string(),
        "StopOnError" => u8::from(n.stop_on_error).to_string(),
        "MaxStartFailRetries" => n.max_start_fail_retries.to_string(),
        "StartFailRetryDelay" => n.start_fail_retry_delay_s.to_string(),
        "TimeBetweenWatchDogCheck" => n.time_between_watchdog_check_ms.to_string(),
        "StartFailureTimeout" => n.start_failure_timeout_ms.to_string(),
        "MaxNoOfSavedMessages" => n.max_no_of_saved_messages.to_string(),
        "MemReportFrequency" => n.mem_report_frequency_s.to_string(),
        "BackupReportFrequency" => n.backup_report_frequency_s.to_string(),
        "MaxNoOfSubscriptions" => n.max_no_of_subscriptions.to_string(),
        "MaxNoOfSubscribers" => n.max_no_of_subscribers.to_string(),
        "MaxBufferedEpochs" => n.max_buffered_epochs.to_string(),
        "MaxBufferedEpochBytes" => n.max_buffered_epoch_bytes.to_string(),
        "MaxNoOfConcurrentTransactions" => n.max_no_of_concurrent_transactions.to_string(),
        "MaxNoOfConcurrentScans" => n.max_no_of_concurrent_scans.to_string(),
        "MaxNoOfLocalScans" => n.max_no_of_local_scans.to_string(),
        "BatchSizePerLocalScan" => n.batch_size_per_local_scan.to_string(),
        "MaxNoOfTables" => n.max_no_of_tables.to_string(),
        "MaxNoOfAttributes" => n.max_no_of_attributes.to_string(),
        "MaxNoOfOrderedIndexes" => n.max_no_of_ordered_indexes.to_string(),
        "MaxNoOfUniqueHashIndexes" => n.max_no_of_unique_hash_indexes.to_string(),
        "TransactionDeadlockDetectionTimeout" => {
            n.transaction_deadlock_detection_timeout_ms.to_string()
        }
        "TransactionInactiveTimeout" => n.transaction_inactive_timeout_ms.to_string(),
        "Nodegroup" => n.node_group.to_string(),
        "UseShm" => u8::from(n.use_shm).to_string(),
        "MaxNoOfExecutionThreads" => n.max_no_of_execution_threads.to_string(),
        "SchedulerSpinTimer" => n.scheduler_spin_timer_us.to_string(),
        "LockExecuteThreadToCPU" => {
            let cpus: Vec<String> = n
                .lock_execute_thread_to_cpu
                .iter()
                .map(usize::to_string)
                .collect();
            cpus.join(",")
        }
        _ => return None,
    };
    Some(value)
}
