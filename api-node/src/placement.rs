//! Where an API process's spinning threads run beside the data nodes of its host.
//!
//! A data node bound to a CPU (LockExecuteThreadToCPU) and an API thread that spins on a
//! shared-memory link to it must not share that CPU: the spinner keeps the data node off it
//! until the spinner's time slice ends, milliseconds in which the answer it spins for cannot be
//! made. `perf sched` showed the scheduler putting rndb-redis's runtime thread there (it wakes
//! on the CPU of the data node that woke it) and spinning for 0.2-0.4 ms at a time while both
//! data nodes of `local-spin.ini` waited (docs/redis-gateway.md).

use std::collections::BTreeSet;

use rndb_config::TransporterKind;

use crate::Cluster;

impl Cluster {
    /// The CPUs this thread may run on, less those that the data nodes this API node links
    /// over spinning shared memory (ShmSpintime > 0) bind their execution threads to. `None`
    /// when no such data node is bound, or when that leaves no CPU.
    pub fn cpus_beside_spinning_data_nodes(&self) -> Option<Vec<usize>> {
        let me = self.node_id();
        let config = self.config();
        let taken: BTreeSet<usize> = self
            .linked()
            .filter(|c| c.kind == TransporterKind::Shm)
            .filter(|c| {
                config
                    .link(me, c.peer)
                    .is_some_and(|link| link.shm_spintime_us > 0)
            })
            .filter_map(|c| config.data_node(c.peer))
            .flat_map(|node| node.lock_execute_thread_to_cpu.iter().copied())
            .collect();
        if taken.is_empty() {
            return None;
        }
        let allowed = rustix::thread::sched_getaffinity(None).ok()?;
        let free: Vec<usize> = (0..rustix::thread::CpuSet::MAX_CPU)
            .filter(|&cpu| allowed.is_set(cpu) && !taken.contains(&cpu))
            .collect();
        (!free.is_empty()).then_some(free)
    }
}

/// Binds the calling thread (and the threads it starts after) to `cpus`.
pub fn bind_this_thread(cpus: &[usize]) -> std::io::Result<()> {
    let mut set = rustix::thread::CpuSet::new();
    for &cpu in cpus {
        set.set(cpu);
    }
    rustix::thread::sched_setaffinity(None, &set).map_err(std::io::Error::from)
}
