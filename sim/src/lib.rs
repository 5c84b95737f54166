//! rndb-sim: a deterministic simulator of a whole rndb cluster.
//!
//! N real data-node kernels (`rndb_ndbd::blocks::Kernel`) and M simulated API clients run in
//! one process and one thread, driven by one seed: one generator ([`rng`]) from which every
//! random choice is drawn, a simulated clock (nanoseconds that jump over idle time), and a
//! scheduler that pops the earliest event of a priority queue keyed by time ([`net`]).
//!
//! ```text
//!   seed ─► Knobs (swarm: counts, delays, fault rates) ─► World
//!   World: Queue ─pop─► Deliver ─► Kernel::on_frame + run_jobs ─► SimOutbox ─► Net ─► Queue
//!                     ├► Timer (10 ms) ─► Kernel::on_timer + run_jobs
//!                     ├► FsDone ─► SimDisk (next request) ─► Kernel::on_fs_conf + run_jobs
//!                     ├► Disconnected ─► Kernel::on_disconnect / Client::on_link_down
//!                     ├► ClientWake ─► Client (bank, registers, set) ─► Net ─► Queue
//!                     └► Fault (crash, client death, slow link, API link drop, pause, partition,
//!                              cluster crash and system restart)
//! ```
//!
//! - [`knobs`]: the user's options and what each seed draws from them.
//! - [`rng`]: the seeded generator.
//! - [`net`]: the event queue, the links (FIFO each, reordered only across links, dropped
//!   whole) and the sim's `Outbox`.
//! - [`disk`]: a data node's simulated disk: what a power loss keeps, ENOSPC and EIO, and
//!   the requests in flight.
//! - [`client`]: API nodes speaking the real protocol; the bank (with its ledger), register
//!   and set workloads.
//! - [`check`]: the bank invariant, the ledger check, and the linearizability checker
//!   (registers, and set elements as registers that inserts and deletes move between absent
//!   and present).
//! - [`durability`]: which acknowledged operations a cluster crash must keep.
//! - [`events`]: with `--faults events`, client 0's subscription to the tables' committed
//!   changes (the library's `EventMerge`), checked as they come and against the clients'
//!   acknowledged writes and final reads.
//! - [`world`]: one run, step by step; [`run_seed`] and [`run_seed_checked`].
//!
//! A run: clients register (API_REGREQ); client 0 creates the tables (some seeds first at a
//! non-master, which answers 702) and the set's unique hash index on its value column (read
//! through with TCINDXREQ), and inserts their rows; once the arbitrator runs (in seeds with
//! one) the fault plan is drawn and the workload runs (in some seeds the bank's full reads
//! are table scans: SCAN_TABREQ to every
//! data node, SCAN_NEXTREQ for each further batch, under locks checked like a read of every
//! key, or as committed reads whose every value some transfer must have written); then
//! faults stop, links heal, clients finish, and client 0 reads every row
//! under locks (the set: every key of its space, a missing row answered 626), then at its
//! backup (the replicas must agree); the register and set histories are checked last. After
//! every kernel step, a kernel that logged a change behind its own GCI's GCI_COMPLETED fails
//! the seed at once (`Kernel::take_broken_invariant`). Faults: data nodes crash at a random
//! time or right after handling a given
//! signal (never both replicas of a node group; what they sent is lost or still delivered),
//! clients die (some while a request is outstanding), links slow down, API links drop and
//! come back, data nodes pause (their events wait, their links stay up), BUGGIFY makes sends
//! find full buffers and ticks come late; `--faults crash-all` makes every data node lose power
//! at once (its disk keeps what was synced, and perhaps some of the rest, the last write torn)
//! and restart from its disk (a system restart), `--faults disk` fails writes and syncs with
//! ENOSPC or EIO (both only in the seeds whose data nodes keep files, most of them), and
//! `--faults partition` cuts data nodes from each other (client 0 arbitrates; the losing side
//! stops, and with `restart` rejoins); `--faults drop` has client 0 drop a scratch table that
//! every transfer writes, mid-workload (the drop must end, and leave no table or mark behind).
//!
//! **Architecture Invariant:** nothing in a run depends on anything but its seed and options:
//! no threads, no wall clock (the kernels get `base + simulated ns`), no iteration over a
//! randomly seeded hash map, and events are ordered by (time, kind, nodes, per-link sequence),
//! never by the order in which a kernel happened to send to two different nodes.

#![forbid(unsafe_code)]

pub mod check;
pub mod client;
pub mod disk;
pub mod durability;
pub mod events;
pub mod knobs;
pub mod net;
pub mod rng;
pub mod world;

pub use knobs::{Fault, Knobs, Options, Sabotage, Workload};
pub use world::{run_seed, run_seed_checked, run_seeds, DurabilityReport, Failure, Report};
