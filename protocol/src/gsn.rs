//! Every signal number, in one list: the frame header's `signal` field says which payload a
//! frame holds. Numbers are NDB's idea (a global signal number, GSN), not NDB's values. The
//! data node's internal signals between its own blocks use the same names (see
//! `rndb_ndbd::blocks`).
//!
//! [`ALL`] names each number, for logs and for the test that no two signals share one.
//! The transporter's handshake signals use 0xFFF0 and above, so no signal here may.

/// Declares each signal number as a constant and lists it in [`ALL`], so a number cannot be
/// added without being checked for uniqueness.
macro_rules! signals {
    ($($(#[$doc:meta])* $name:ident = $value:expr;)*) => {
        $($(#[$doc])* pub const $name: u16 = $value;)*

        /// Every signal number with its name, in the order declared.
        pub const ALL: &[(u16, &str)] = &[$(($name, stringify!($name))),*];
    };
}

signals! {
    // API node ↔ data node: requests and their answers.
    PING_REQ = 1;
    PING_CONF = 2;
    CREATE_TABLE_REQ = 10;
    CREATE_TABLE_CONF = 11;
    CREATE_TABLE_REF = 12;
    DROP_TABLE_REQ = 13;
    DROP_TABLE_CONF = 14;
    DROP_TABLE_REF = 15;
    GET_TABINFO_REQ = 16;
    GET_TABINFO_CONF = 17;
    GET_TABINFO_REF = 18;
    TCKEYREQ = 20;
    TCKEY_ROW = 21;
    TCKEYREF = 22;
    TC_EXECUTE_REQ = 23;
    /// The execute succeeded: `signals::TcExecuteConf`, which names the GCI of a commit.
    TC_EXECUTE_CONF = 24;
    TC_EXECUTE_REF = 25;
    /// A key operation through a unique hash index (NDB's TCINDXREQ): a `TcKeyReq` whose table
    /// id and version name the index and whose key is the unique columns' values.
    TCINDXREQ = 26;
    /// A read's row that also confirms its execute: TCKEY_ROW and TC_EXECUTE_CONF in one
    /// frame, payload as TCKEY_ROW followed by TC_EXECUTE_CONF's (`signals::TcKeyRow::
    /// decode_conf`: a commit's GCI, or nothing). A data node sends it when the read was the
    /// last answer of an execute in which nothing failed: a NoCommit one at once; a Commit one
    /// once the commit is over, the row kept until then (as NDB's TCKEYCONF carries the
    /// commit with the operations' confirmations).
    TCKEY_ROW_CONF = 27;
    CREATE_INDEX_REQ = 30;
    CREATE_INDEX_CONF = 31;
    CREATE_INDEX_REF = 32;
    DROP_INDEX_REQ = 33;
    DROP_INDEX_CONF = 34;
    DROP_INDEX_REF = 35;
    GET_INDEX_REQ = 36;
    GET_INDEX_CONF = 37;
    GET_INDEX_REF = 38;
    /// The dictionary's tables and indexes, a page at a time (NDB's LIST_TABLES_REQ):
    /// `signals::ListTablesReq`, answered by LIST_TABLES_CONF (`signals::ListTablesConf`).
    LIST_TABLES_REQ = 45;
    LIST_TABLES_CONF = 46;
    /// A page of one of the data node's ndbinfo tables (NDB's DBINFO_SCANREQ):
    /// `ndbinfo::DbinfoScanReq`, answered by DBINFO_SCANCONF (`ndbinfo::DbinfoScanConf`) or
    /// DBINFO_SCANREF (`ndbinfo::DbinfoScanRef`).
    DBINFO_SCANREQ = 47;
    DBINFO_SCANCONF = 48;
    DBINFO_SCANREF = 49;
    /// The event API (NDB's SUMA): subscribe to a table's committed changes
    /// (`suma::SubStartReq`), answered by SUB_START_CONF (`suma::SubStartConf`) or SUB_START_REF
    /// (`signals::Refusal`); then, under the same request id, SUB_TABLE_DATA
    /// (`suma::SubTableData`) per change and SUB_GCP_COMPLETE_REP (`suma::SubGcpCompleteRep`)
    /// per completed epoch, until SUB_STOP_REQ (empty) is answered by SUB_STOP_CONF (or a
    /// SUB_START_REF ends the subscription: its table was dropped).
    SUB_START_REQ = 50;
    SUB_START_CONF = 51;
    SUB_START_REF = 52;
    SUB_STOP_REQ = 53;
    SUB_STOP_CONF = 54;
    SUB_TABLE_DATA = 55;
    SUB_GCP_COMPLETE_REP = 56;
    SCAN_TABREQ = 40;
    SCAN_TABCONF = 41;
    SCAN_TABREF = 42;
    SCAN_NEXTREQ = 43;
    SCAN_ROWS = 44;
    // Data node ↔ data node (and API_REGREQ from API nodes).
    /// A key operation for a fragment's replica: `lqh::LqhKeyReq`.
    LQHKEYREQ = 60;
    /// The operation succeeded on every replica: `lqh::LqhKeyConf`.
    LQHKEYCONF = 61;
    /// The operation failed: `lqh::LqhKeyRef`.
    LQHKEYREF = 62;
    /// Commit what the transaction holds on this node (everything, or only its backup rows):
    /// `lqh::LqhCommitReq`.
    LQH_COMMITREQ = 63;
    LQH_COMMITCONF = 64;
    /// Undo everything the transaction holds on this node: `lqh::TransSignal`.
    LQH_ABORTREQ = 65;
    LQH_ABORTCONF = 66;
    /// An API node asks whether the cluster has started (NDB's API_REGREQ).
    API_REGREQ = 67;
    /// `lqh::ApiRegConf`.
    API_REGCONF = 68;
    /// A transaction's coordinator failed: what did it leave on your node? `lqh::TcFailQuery`.
    TC_FAIL_QUERY = 69;
    /// `lqh::TcFailAnswer`.
    TC_FAIL_ANSWER = 70;
    /// Entries of a unique index being built, for a replica of their partition:
    /// `lqh::IndexBuildRows`.
    INDEX_BUILD_ROWS = 71;
    /// The sender has sent all its entries of a unique index build: `lqh::IndexBuildDone`.
    INDEX_BUILD_DONE = 72;
    /// A survivor holds a transaction of a failed coordinator open and asks the master to decide
    /// it: `lqh::TcFailQuery`.
    TC_FAIL_REPORT = 73;
    /// The master's decision on a transaction of a failed coordinator, for every survivor:
    /// `lqh::TcFailAnswer` (Committed or Aborted).
    TC_FAIL_DECISION = 74;
    // DIH's global checkpoint protocol (master ↔ every data node), each `dih::GcpSignal`.
    /// The master proposes the next epoch: hold commits that have not started.
    GCP_PREPARE = 80;
    GCP_PREPARECONF = 81;
    /// The new epoch starts: commits take its GCI from now on.
    GCP_COMMIT = 82;
    /// Every commit of the old epoch has ended on the sender (NDB's GCP_NODEFINISH).
    GCP_NODEFINISH = 83;
    /// Write and sync the redo log up to this GCI (its high word).
    GCP_SAVEREQ = 84;
    GCP_SAVECONF = 85;
    /// This GCI is saved on every node: write it in the sysfile.
    COPY_GCIREQ = 86;
    COPY_GCICONF = 87;
    /// A starting node's newest restorable GCI, to the master (NDB's CNTR_START_REQ).
    CNTR_START_REQ = 88;
    /// The GCI the cluster restarts at, from the master (NDB's CNTR_START_CONF).
    CNTR_START_CONF = 89;
    /// A node needs a global checkpoint saved now: durable commits wait for it, or its redo log
    /// is more than half full and a complete local checkpoint waits for a save to release it.
    /// The master starts one at once (not in NDB, whose master only keeps its interval).
    GCP_SAVE_WANTED = 90;
    /// A starting node restored its files up to the restart GCI, and its sysfile names the
    /// restart's number (the high word), to the master (NDB's CNTR_WAITREP).
    CNTR_WAITREP = 91;
    /// Every starting node has restored: the cluster serves, from the master (NDB's
    /// CNTR_START_REP).
    CNTR_START_REP = 92;
    /// A new master (its predecessor failed) asks every node for the epoch it is in (NDB's
    /// MASTER_GCPREQ), and starts no round before all answered.
    MASTER_GCPREQ = 93;
    /// The epoch commits start in on the sender (NDB's MASTER_GCPCONF).
    MASTER_GCPCONF = 94;
    /// The president includes a restarting node: the epoch commits start in now, which a
    /// round run before the inclusion may have moved past its START_PERMCONF's (NDB carries
    /// it in INCL_NODEREQ).
    GCP_EPOCH_REP = 95;
    /// GCP_SAVEREQ done, but this node's files cannot restore the GCI: it is being copied to,
    /// or it was and its first local checkpoint since is not complete (NDB's GCP_SAVEREF,
    /// NodeRestartInProgress). The master makes a GCI restorable (COPY_GCIREQ) only once every
    /// node group has a node that confirmed it (GCP_SAVECONF).
    GCP_SAVEREF = 96;
    /// COPY_GCIREQ done at a node that wrote no sysfile (being copied to, or holding its
    /// sysfile after a node restart): only another node's sysfile makes the GCI restorable.
    /// Not in NDB, whose node restart ends only after its local checkpoint.
    COPY_GCIREF = 97;
    /// The master heard COPY_GCICONF from a node that wrote its sysfile: the GCI is
    /// restorable, to each node that answered COPY_GCIREF. Not in NDB.
    GCP_RESTORABLE_REP = 98;
    /// Every node the master sent COPY_GCIREQ answered it: the GCI is durable (a system
    /// restart, even one without some node, comes back at least there), to each of them;
    /// durable commits are answered up to it. Not in NDB.
    GCP_DURABLE_REP = 99;
    // QMGR's membership (data node ↔ data node).
    /// I am alive (every HeartbeatIntervalDbDb ms, to every other data node); no payload.
    HEARTBEAT = 100;
    /// A node saw another fail (missed heartbeats; in a failure round, any failure it saw),
    /// to the president: `qmgr::FailRep`.
    FAIL_REP = 101;
    /// The president declares a node failed, to every data node it has a link to, the failed
    /// one included (which then stops): `qmgr::FailRep`.
    NODE_FAILREP = 102;
    /// The sender stops gracefully (SIGTERM), to every data node, just before its links
    /// close; one byte: 1 in a stop of every data node (SHUTDOWN), else 0 (older nodes sent
    /// none). Byte 2: the sender begins to stop alone, to the live members of its node group,
    /// which answer NODE_STOPPING_CONF. Byte 3: every data node stops (the sender's stop began
    /// so, or became so as its group's last member), to every live data node, which stops too.
    /// Also, with no payload, from a data node that begins to stop alone, to every API
    /// node linked to it: send new transactions to other data nodes (NDB's STOPPING_1, which
    /// API nodes learn from API_REGCONF's node state); answered with NODE_STOPPING_CONF.
    NODE_STOPPING_REP = 103;
    // Node restart (data node ↔ data node).
    /// The first signal on every data-node link, each way: whether the sender serves
    /// (`qmgr::CmRegReq`). A node that is not started and hears "started" joins by node restart.
    CM_REGREQ = 104;
    /// A restarting node asks the president to be let in; no payload.
    START_PERMREQ = 105;
    /// The president lets it in: its GCI, the live nodes and the dictionary
    /// (`qmgr::StartPermConf`).
    START_PERMCONF = 106;
    /// The president cannot let it in now (another node restarts, a schema change runs, or
    /// the president is another node); the node asks again later: `qmgr::StartPermRef`.
    START_PERMREF = 107;
    /// The restarting node has replayed the dictionary, to the president; no payload.
    START_INFOCONF = 108;
    /// Include a restarting node (`qmgr::FailRep` names it): it takes part in writes (last in
    /// every chain) and global checkpoints, and is read from once started.
    INCL_NODEREQ = 109;
    /// The sender included it, and its transactions from before have ended: `qmgr::FailRep`.
    INCL_NODECONF = 110;
    /// Copy to the restarting node the fragments it needs from the sender: `qmgr::FailRep`.
    COPY_FRAGREQ = 111;
    /// Committed rows for the restarting node: redo-format PUT records (`qmgr` module doc).
    COPY_ROWS = 112;
    /// The sender has copied everything it had to (its COPY_ROWS came first); no payload.
    COPY_FRAGCONF = 113;
    /// The restarting node has every fragment, to the president; no payload.
    START_COPYCONF = 114;
    /// The restarting node is started: it is read from like any replica (`qmgr::FailRep`).
    NODE_STARTED_REP = 115;
    // Arbitration (`qmgr::Arbit` for each): the president and an API node that arbitrates,
    // the president and the other data nodes.
    /// President → API node: be the arbitrator, for this ticket.
    ARBIT_STARTREQ = 116;
    /// API node → president: it arbitrates for the ticket.
    ARBIT_STARTCONF = 117;
    /// President → data nodes: the arbitrator (`node`) and its ticket, so that the president
    /// of either side of a split can ask it.
    ARBIT_PREPREQ = 118;
    /// A side's president → the arbitrator: may the side of these data nodes (`nodes`) go on?
    ARBIT_CHOOSEREQ = 119;
    /// The arbitrator → a side's president: yes (the first side to ask for the ticket).
    ARBIT_CHOOSECONF = 120;
    /// The arbitrator → a side's president: no (another side asked first, or the ticket is
    /// not the arbitrator's).
    ARBIT_CHOOSEREF = 121;
    /// A side's president → the side's other data nodes: the side goes on (`node` = 1) or
    /// stops (0); `ticket` names the PREP_FAILREQ its nodes confirmed, `nodes` the side.
    ARBIT_VERDICT = 122;
    // Primaries moving back after a node restart (`rndb_ndbd`'s `blocks/primary.rs`), each a
    // `qmgr::Arbit`: ticket = the round, node and nodes as each says.
    /// President → every data node: start no transaction (1204) until the round ends, and
    /// confirm once the ones running have ended; `node` moves back, `nodes` the new order of
    /// rejoined nodes.
    PRIMARY_SWITCH_REQ = 123;
    /// Data node → president: its transactions from before the round have ended.
    PRIMARY_SWITCH_CONF = 124;
    /// President → every data node: the round ends; `node` 1 applies the order `nodes`, 0 not.
    PRIMARY_SWITCH_COMMIT = 125;
    /// Data node → a new president: the one that ran a round this node holds for failed.
    PRIMARY_SWITCH_QUERY = 126;
    // A failure settled at the president (NDB's PREP_FAILREQ/CONF; ARBIT_VERDICT is its
    // COMMIT_FAILREQ), each a `qmgr::Arbit`: ticket = the request, nodes = the side.
    /// A side's president → each other data node it counts: the side is the first `node` of
    /// `nodes` (the rest are being copied to, on no side); fail every node not named and
    /// confirm. A node that holds one of the side failed answers with FAIL_REP naming it.
    PREP_FAILREQ = 127;
    /// Data node → the side's president: it has failed every node outside the side of request
    /// `ticket`, and counts on that side only.
    PREP_FAILCONF = 128;
    // A node let stop asks its node group's live peers first (`rndb_ndbd`'s
    // `blocks/stop_perm.rs`), each a `qmgr::Arbit`: ticket = the attempt, node = the sender.
    /// Node let stop → each live member of its node group: may it stop?
    STOP_PERM_REQ = 129;
    /// Yes: the sender does not ask to stop itself (or gave its own attempt up).
    STOP_PERM_CONF = 130;
    /// No: the sender asks to stop too, and has the lower id.
    STOP_PERM_REF = 131;
    /// Node let stop → the president that let it: it stays (a peer refused, or failed); its
    /// next request to be stopped is judged afresh.
    STOP_ABORT_REP = 132;
    /// Master → every data node: every commit of epoch `gci` and before has ended on every
    /// live node (each sent GCP_NODEFINISH); SUMA reports the epoch complete to its
    /// subscribers once no failed coordinator's transaction waits here (`dih::GcpSignal`, the
    /// master's failed nodes). NDB's DIH sends SUB_GCP_COMPLETE_REP to SUMA for this.
    GCP_COMPLETE_REP = 133;
    // DICT's drop of a table (master → every data node; NDB's PREP_DROP_TAB_REQ and
    // WAIT_DROP_TAB_REQ in one), payload the table id (u32).
    /// Mark the table as being dropped (no operation or scan starts on it: 283), and answer
    /// once no transaction holds a row of it on this node any more.
    PREP_DROP_TAB_REQ = 134;
    /// No transaction holds a row of the table here, and none can start one.
    PREP_DROP_TAB_CONF = 135;
    /// A data node that became DICT master by its predecessor's failure → every other data
    /// node (NDB's DICT_TAKEOVER_REQ); no payload.
    DICT_TAKEOVER_REQ = 136;
    /// The last schema change the node handled: its sequence number, the node's id counter
    /// and the change as the master passed it on (ndbd's `dict/takeover.rs`).
    DICT_TAKEOVER_CONF = 137;
    /// A node restored its files at a system restart: the tables and indexes it holds, to the
    /// master, before its CNTR_WAITREP. Not in NDB (whose system restart takes the master's
    /// schema file).
    DICT_RESTORED_REP = 138;
    /// The master of a system restart, before CNTR_START_REP: the tables and indexes some
    /// restored node lacks, which every node drops. Not in NDB.
    DICT_RESTART_DROP = 139;
    /// A data node in a stop of every data node (SHUTDOWN, ALL RESTART) saved a global
    /// checkpoint of every commit it answered, to every live data node: each leaves once
    /// every other live one said so. No payload. Not in NDB, whose master runs the system
    /// stop (NDBCNTR's STOP_REQ).
    STOP_SAVED_REP = 140;
    /// An API node read a data node's NODE_STOPPING_REP: it starts no new transaction there
    /// while another data node serves. No payload. The stopping node refuses API nodes' new
    /// work (280) once every linked API node said so, or after `STOP_API_MAX`. Also from a
    /// data node to a member of its group that begins to stop alone: it knows, and leaves
    /// alone only while a member that does not stop serves on. Not in NDB.
    NODE_STOPPING_CONF = 141;
}

/// The name of signal `number`, or `None` for a number no signal has.
pub fn name(number: u16) -> Option<&'static str> {
    ALL.iter()
        .find(|(n, _)| *n == number)
        .map(|(_, name)| *name)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    #[test]
    fn every_signal_has_its_own_number() {
        let mut seen: BTreeMap<u16, &str> = BTreeMap::new();
        for &(number, name) in ALL {
            if let Some(other) = seen.insert(number, name) {
                panic!("{name} and {other} share signal number {number}");
            }
        }
        assert_eq!(seen.len(), ALL.len());
        assert!(
            seen.keys().all(|&n| n < 0xFFF0),
            "0xFFF0 and above are the transporter's handshake signals"
        );
    }

    #[test]
    fn names_are_found_by_number() {
        assert_eq!(name(LQHKEYREQ), Some("LQHKEYREQ"));
        assert_eq!(name(TCKEYREQ), Some("TCKEYREQ"));
        assert_eq!(name(0), None);
    }

    #[test]
    fn the_data_node_range_holds_only_data_node_signals() {
        // The data node dispatches LQHKEYREQ..=LQH_ABORTCONF as one range.
        for number in LQHKEYREQ..=LQH_ABORTCONF {
            let name = name(number).expect("no gap in the range");
            assert!(name.starts_with("LQH"), "{name} is inside the LQH range");
        }
    }
}
