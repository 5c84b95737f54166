//! Single user mode (ndb_mgm's ENTER SINGLE USER MODE, NDB's NDBCNTR and DBTC state): one API
//! node alone may use the database. Every other API node's new transactions, scans and schema
//! changes are refused with 299, and its open transactions are aborted once idle (their next
//! execute is told 299); an execute or scan already running when the mode begins runs to its
//! end (a transaction with a scan open is not idle). Management servers set the mode on each
//! data node through its reports (`mgm_report.rs`); the kernel only holds it.

use rndb_config::NodeId;
use rndb_protocol::scan::ScanTabReq;
use rndb_protocol::signals::gsn;
use rndb_protocol::NdbError;
use rndb_transporter::FrameHeader;

use super::acc::TransId;
use super::{dict, refuse, tc, Kernel, Outbox, Signal};

impl Kernel {
    /// The API node single user mode lets in, when the node is in that mode.
    pub fn single_user(&self) -> Option<NodeId> {
        self.single_user
    }

    /// Enters single user mode for API node `api`, or leaves it (`None`). Other API nodes'
    /// idle transactions are aborted at the next timer tick.
    pub fn set_single_user(&mut self, api: Option<NodeId>) {
        if self.single_user != api {
            match api {
                Some(api) => tracing::info!("single user mode: access for API node {api} only"),
                None => tracing::info!("single user mode left"),
            }
        }
        self.single_user = api;
    }

    /// In single user mode, aborts the idle transactions of API nodes other than the one let
    /// in (their next execute is told 299).
    pub(super) fn single_user_sweep(&mut self) {
        let Some(api) = self.single_user else {
            return;
        };
        self.abort_idle_except(api, &single_user_error(api));
    }

    /// Aborts the idle transactions of API nodes other than `api` with `error` (their next
    /// execute is told it).
    pub(super) fn abort_idle_except(&mut self, api: NodeId, error: &NdbError) {
        // A transaction with a scan open is between two batches, not idle: its scan runs to
        // its end (aborted, the scan's next batch would find its record gone).
        let scanning = self.scans.transactions();
        let spared = |trans| scanning.contains(&trans);
        for trans in self.tc.abort_idle_except(api, error, &spared) {
            self.jobs.push_back(Signal::TcContinueB(trans));
        }
    }

    /// In single user mode, refuses (with 299) a request of API node `from`, which is not the
    /// one let in: a new transaction, scan or schema change. A request of a transaction TC
    /// holds open goes on after the transaction, if idle, is aborted: TC then answers it
    /// with the abort's error. True when the frame was handled.
    pub(super) fn refuse_single_user(
        &mut self,
        from: NodeId,
        header: &FrameHeader,
        payload: &[u8],
        out: &mut dyn Outbox,
    ) -> bool {
        let Some(api) = self.single_user else {
            return false;
        };
        if from == api {
            return false;
        }
        self.refuse_new_work(from, header, payload, out, single_user_error(api))
    }

    /// Refuses with `error` a request of API node `from` that would start work: a new
    /// transaction, scan or schema change. A request of a transaction TC holds open goes on
    /// after the transaction, if idle, is aborted with `error`: TC then answers it with that
    /// error. True when the frame was handled. Single user mode and a graceful stop
    /// (`graceful_stop.rs`) refuse so.
    pub(super) fn refuse_new_work(
        &mut self,
        from: NodeId,
        header: &FrameHeader,
        payload: &[u8],
        out: &mut dyn Outbox,
        error: NdbError,
    ) -> bool {
        if self.qmgr.is_data_node(from) {
            return false;
        }
        match header.signal {
            gsn::TCKEYREQ | gsn::TCINDXREQ | gsn::TC_EXECUTE_REQ => {
                let trans = tc::trans_id(from, header.request_id);
                if self.tc.knows(trans) {
                    self.abort_if_idle(trans, &error);
                    return false;
                }
                self.refuse_api_request_with(from, header, payload, out, error)
            }
            gsn::SCAN_TABREQ => {
                // A malformed request is left to `on_frame`, which closes the link.
                let Ok(req) = ScanTabReq::decode(payload) else {
                    return false;
                };
                self.abort_if_idle(tc::trans_id(from, req.trans_request_id), &error);
                self.refuse_api_request_with(from, header, payload, out, error)
            }
            gsn::CREATE_TABLE_REQ
            | gsn::DROP_TABLE_REQ
            | gsn::CREATE_INDEX_REQ
            | gsn::DROP_INDEX_REQ => {
                let ref_signal = dict::schema::answers_of(header.signal).1;
                refuse(&mut self.unsent, out, from, header, ref_signal, &error);
                true
            }
            _ => false,
        }
    }

    /// Aborts `trans` if TC holds it open and idle, without a scan open, and it is no scan
    /// part another node coordinates.
    fn abort_if_idle(&mut self, trans: TransId, error: &NdbError) {
        if !self.scans.open_in(trans)
            && !self.tc.is_scan_part(trans)
            && self.tc.abort_idle(trans, error.clone())
        {
            self.jobs.push_back(Signal::TcContinueB(trans));
        }
    }
}

/// NDB's 299, naming the API node let in.
fn single_user_error(api: NodeId) -> NdbError {
    NdbError::with_detail(
        299,
        format!("the cluster is in single user mode: only API node {api} may use it"),
    )
}
