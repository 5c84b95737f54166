//! [`ClusterSpec`]: a small test cluster described in code and written out as a config.ini.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::fs;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use rndb_config::NodeId;

use crate::{free_port, free_port_listener, Hosts};

/// The node id of the first data node; data nodes are numbered from here in file order.
pub const DATA_NODE_ID_FIRST: u16 = 1;
/// The node id of the first API slot; slots are numbered from here. It sits well above any data
/// node id a test uses, so a node id in a message says at once which kind of node it is.
pub const API_NODE_ID_FIRST: u16 = 50;
/// The most data nodes a spec may ask for, so data node ids stay below [`API_NODE_ID_FIRST`].
pub const DATA_NODE_COUNT_MAX: u16 = API_NODE_ID_FIRST - DATA_NODE_ID_FIRST;
/// The most API slots a spec may ask for (node ids stay ≤ 255).
pub const API_SLOT_COUNT_MAX: u16 = 255 - API_NODE_ID_FIRST + 1;

/// A test cluster: how many data nodes and API slots, and the few parameters tests vary.
///
/// Every node runs on 127.0.0.1 unless [`ClusterSpec::on_hosts`] places the data nodes on
/// [`Hosts`]; every data node gets a free `ServerPort` and a `DataDir` inside the test's
/// temporary directory, so tests run in parallel without sharing anything.
#[derive(Clone, Debug)]
pub struct ClusterSpec {
    /// Data nodes, numbered from [`DATA_NODE_ID_FIRST`].
    data_node_count: u16,
    /// NoOfReplicas.
    no_of_replicas: u32,
    /// API slots, numbered from [`API_NODE_ID_FIRST`], each with HostName=127.0.0.1 (or the
    /// test process's address on the hosts' subnet, with [`ClusterSpec::on_hosts`]).
    api_slot_count: u16,
    /// DataMemory as config.ini writes it (`16M`).
    data_memory: String,
    /// TransactionDeadlockDetectionTimeout in ms; `None` keeps NDB's default.
    deadlock_timeout_ms: Option<u32>,
    /// TransactionInactiveTimeout in ms; `None` keeps NDB's default (unlimited).
    inactive_timeout_ms: Option<u32>,
    /// UseShm on every data node (SHM links need the API slot on the data node's host, so it
    /// has no effect with [`ClusterSpec::on_hosts`]).
    use_shm: bool,
    /// SchedulerSpinTimer in µs; `None` keeps the default (0).
    scheduler_spin_timer_us: Option<u32>,
    /// Raw lines appended at the end of the file (extra `[tcp]` sections, say).
    extra_lines: Vec<String>,
    /// Further `[ndbd default]` parameters as (name, value), in the order given.
    data_node_params: Vec<(String, String)>,
    /// Where [`ClusterSpec::on_hosts`] put the nodes; `None`: everything on 127.0.0.1.
    hosts: Option<Placement>,
    /// HostNames of API slots without NodeId written before the numbered ones (see
    /// [`ClusterSpec::api_slot_first`]).
    first_api_slots: Vec<String>,
    /// Arguments every `ndbd` gets after the usual ones (`--ndb-tls-search-path`, say).
    ndbd_args: Vec<String>,
}

/// Data node `i` (in file order) on host `i + 1` of a [`Hosts`]; API slots on the test
/// process's address there.
#[derive(Clone, Debug)]
struct Placement {
    /// Each host's address and network namespace, host 1 first.
    hosts: Vec<(Ipv4Addr, String)>,
    /// The API slots' HostName.
    api: Ipv4Addr,
}

impl Default for ClusterSpec {
    /// One data node, one replica, four API slots, 16M of DataMemory, NDB's timeouts, TCP.
    fn default() -> Self {
        ClusterSpec {
            data_node_count: 1,
            no_of_replicas: 1,
            api_slot_count: 4,
            data_memory: "16M".to_string(),
            deadlock_timeout_ms: None,
            inactive_timeout_ms: None,
            use_shm: false,
            scheduler_spin_timer_us: None,
            extra_lines: Vec::new(),
            data_node_params: Vec::new(),
            hosts: None,
            first_api_slots: Vec::new(),
            ndbd_args: Vec::new(),
        }
    }
}

/// A config file written by [`ClusterSpec::write`].
#[derive(Clone, Debug)]
pub struct WrittenConfig {
    /// The config.ini.
    pub path: PathBuf,
    /// The ServerPort of every data node.
    pub ports: BTreeMap<NodeId, u16>,
}

impl ClusterSpec {
    /// Every `ndbd` of the cluster gets `args` after the usual ones.
    pub fn ndbd_args(mut self, args: &[&str]) -> Self {
        self.ndbd_args = args.iter().map(|a| a.to_string()).collect();
        self
    }

    /// The arguments every `ndbd` gets after the usual ones.
    pub fn extra_ndbd_args(&self) -> &[String] {
        &self.ndbd_args
    }

    /// The default spec; see [`Default`].
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the number of data nodes (1..=[`DATA_NODE_COUNT_MAX`]).
    pub fn data_nodes(mut self, count: u16) -> Self {
        assert!(
            (1..=DATA_NODE_COUNT_MAX).contains(&count),
            "data node count {count}"
        );
        self.data_node_count = count;
        self
    }

    /// Sets NoOfReplicas.
    pub fn replicas(mut self, count: u32) -> Self {
        self.no_of_replicas = count;
        self
    }

    /// Sets the number of API slots (1..=[`API_SLOT_COUNT_MAX`]).
    pub fn api_slots(mut self, count: u16) -> Self {
        assert!(
            (1..=API_SLOT_COUNT_MAX).contains(&count),
            "API slot count {count}"
        );
        self.api_slot_count = count;
        self
    }

    /// Sets DataMemory, written as given (`1M`, `64M`).
    pub fn data_memory(mut self, size: &str) -> Self {
        self.data_memory = size.to_string();
        self
    }

    /// Sets TransactionDeadlockDetectionTimeout (how long a lock wait lasts before error 266).
    pub fn deadlock_timeout_ms(mut self, ms: u32) -> Self {
        self.deadlock_timeout_ms = Some(ms);
        self
    }

    /// Sets TransactionInactiveTimeout (how long an open transaction may stay idle).
    pub fn inactive_timeout_ms(mut self, ms: u32) -> Self {
        self.inactive_timeout_ms = Some(ms);
        self
    }

    /// Sets UseShm on every data node (API↔data links become SHM, as every node is on 127.0.0.1).
    pub fn use_shm(mut self, on: bool) -> Self {
        self.use_shm = on;
        self
    }

    /// Sets SchedulerSpinTimer on every data node.
    pub fn scheduler_spin_timer_us(mut self, us: u32) -> Self {
        self.scheduler_spin_timer_us = Some(us);
        self
    }

    /// Sets any data node parameter in `[ndbd default]` (MaxNoOfOrderedIndexes, say).
    pub fn data_node_param(mut self, name: &str, value: &str) -> Self {
        self.data_node_params
            .push((name.to_string(), value.to_string()));
        self
    }

    /// Appends raw lines (one or several, separated by newlines) at the end of the file.
    pub fn extra(mut self, lines: &str) -> Self {
        self.extra_lines.extend(lines.lines().map(str::to_string));
        self
    }

    /// The data node ids, in file order.
    pub fn data_node_ids(&self) -> Vec<NodeId> {
        (0..self.data_node_count)
            .map(|i| NodeId(DATA_NODE_ID_FIRST + i))
            .collect()
    }

    /// Puts data node `i` (in file order) on host `i + 1` of `hosts`, as its HostName, and
    /// gives the API slots the test process's address on the hosts' subnet, where its
    /// connections come from. [`TestCluster`](crate::TestCluster) then starts each data node
    /// inside its host's network namespace. [`ClusterSpec::write`] fails unless there is a
    /// host for every data node.
    pub fn on_hosts(mut self, hosts: &Hosts) -> Self {
        self.hosts = Some(Placement {
            hosts: (1..=hosts.count())
                .map(|host| (hosts.address(host), hosts.namespace(host)))
                .collect(),
            api: hosts.bridge_address(),
        });
        self
    }

    /// Adds an API slot with `host_name` and no NodeId before the numbered slots, so that an
    /// API node choosing a slot tries it first.
    pub fn api_slot_first(mut self, host_name: &str) -> Self {
        self.first_api_slots.push(host_name.to_string());
        self
    }

    /// The network namespace of each data node placed on a host by [`ClusterSpec::on_hosts`].
    pub fn namespaces(&self) -> BTreeMap<NodeId, String> {
        let Some(placement) = &self.hosts else {
            return BTreeMap::new();
        };
        self.data_node_ids()
            .into_iter()
            .zip(placement.hosts.iter().map(|(_, ns)| ns.clone()))
            .collect()
    }

    /// The API slot ids, in file order.
    pub fn api_node_ids(&self) -> Vec<NodeId> {
        (0..self.api_slot_count)
            .map(|i| NodeId(API_NODE_ID_FIRST + i))
            .collect()
    }

    /// Picks a free port for every data node, creates every DataDir under `dir` and writes
    /// `dir/config.ini`.
    pub fn write(&self, dir: &Path) -> Result<WrittenConfig> {
        if let Some(placement) = &self.hosts {
            anyhow::ensure!(
                placement.hosts.len() >= usize::from(self.data_node_count),
                "{} data nodes but {} hosts to put them on",
                self.data_node_count,
                placement.hosts.len()
            );
        }
        let ports = distinct_free_ports(&self.data_node_ids());
        for id in self.data_node_ids() {
            let data_dir = data_dir(dir, id);
            fs::create_dir_all(&data_dir)
                .with_context(|| format!("create DataDir {}", data_dir.display()))?;
        }
        let path = dir.join("config.ini");
        fs::write(&path, self.render(dir, &ports))
            .with_context(|| format!("write {}", path.display()))?;
        Ok(WrittenConfig { path, ports })
    }

    /// The text of the config.ini, with data directories under `dir` and the given ports.
    pub fn render(&self, dir: &Path, ports: &BTreeMap<NodeId, u16>) -> String {
        let mut text = String::from("# Written by the rndb test harness.\n\n[ndbd default]\n");
        let mut set = |name: &str, value: String| {
            let _ = writeln!(text, "{name}={value}");
        };
        set("NoOfReplicas", self.no_of_replicas.to_string());
        set("DataMemory", self.data_memory.clone());
        set("HostName", "127.0.0.1".to_string());
        set("UseShm", u8::from(self.use_shm).to_string());
        if let Some(ms) = self.deadlock_timeout_ms {
            set("TransactionDeadlockDetectionTimeout", ms.to_string());
        }
        if let Some(ms) = self.inactive_timeout_ms {
            set("TransactionInactiveTimeout", ms.to_string());
        }
        if let Some(us) = self.scheduler_spin_timer_us {
            set("SchedulerSpinTimer", us.to_string());
        }
        for (name, value) in &self.data_node_params {
            set(name, value.clone());
        }
        for (i, id) in self.data_node_ids().into_iter().enumerate() {
            let port = ports.get(&id).copied().unwrap_or_else(free_port);
            let _ = write!(
                text,
                "\n[ndbd]\nNodeId={id}\nServerPort={port}\nDataDir={}\n",
                data_dir(dir, id).display()
            );
            if let Some((address, _)) = self.hosts.as_ref().and_then(|p| p.hosts.get(i)) {
                let _ = writeln!(text, "HostName={address}");
            }
        }
        let api_host = self
            .hosts
            .as_ref()
            .map_or(Ipv4Addr::LOCALHOST, |placement| placement.api);
        for host in &self.first_api_slots {
            let _ = write!(text, "\n[api]\nHostName={host}\n");
        }
        for id in self.api_node_ids() {
            let _ = write!(text, "\n[api]\nNodeId={id}\nHostName={api_host}\n");
        }
        if !self.extra_lines.is_empty() {
            text.push('\n');
            for line in &self.extra_lines {
                text.push_str(line);
                text.push('\n');
            }
        }
        text
    }
}

/// The DataDir of data node `id` inside the test directory.
pub fn data_dir(dir: &Path, id: NodeId) -> PathBuf {
    dir.join(format!("ndb_{id}"))
}

/// A free port for each of `ids`, all different: each port's socket stays bound until every
/// port is chosen, so the kernel cannot hand out one port twice.
fn distinct_free_ports(ids: &[NodeId]) -> BTreeMap<NodeId, u16> {
    let listeners: Vec<(NodeId, std::net::TcpListener)> =
        ids.iter().map(|&id| (id, free_port_listener())).collect();
    listeners
        .iter()
        .map(|(id, l)| (*id, l.local_addr().expect("read the bound address").port()))
        .collect()
}
