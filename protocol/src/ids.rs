//! Ids that travel between nodes, as types rather than bare integers.

use std::fmt;

/// A transaction's id: the API node that started it in the high 32 bits, the API's request id
/// for it in the low 32 (`(api << 32) | request_id`). The TC that coordinates it and every
/// replica that runs its operations know it by this id.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TransId(pub u64);

impl TransId {
    /// The transaction API node `api` runs under its request id `request_id`.
    pub fn new(api: u16, request_id: u32) -> TransId {
        TransId((u64::from(api) << 32) | u64::from(request_id))
    }

    /// The API node that started the transaction.
    pub fn api_node(self) -> u16 {
        (self.0 >> 32) as u16
    }

    /// The API's request id for the transaction.
    pub fn request_id(self) -> u32 {
        self.0 as u32
    }

    /// True when the id is one [`TransId::new`] can make (the bits above the node id are zero).
    pub fn is_well_formed(self) -> bool {
        self.0 >> 48 == 0
    }
}

impl fmt::Display for TransId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#x}", self.0)
    }
}

impl fmt::LowerHex for TransId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::LowerHex::fmt(&self.0, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_transaction_id_is_its_node_and_request() {
        let trans = TransId::new(0x33, 7);
        assert_eq!(trans, TransId(0x0033_0000_0007));
        assert_eq!((trans.api_node(), trans.request_id()), (0x33, 7));
        assert!(trans.is_well_formed());
        assert!(!TransId(u64::MAX).is_well_formed());
        assert_eq!(trans.to_string(), "0x3300000007");
    }
}
