//! rndb-protocol: the signals that data nodes and API nodes exchange, and their byte encodings.
//!
//! Both `rndb-ndbd` and `rndb-api` depend on this crate, so neither duplicates the other's
//! encoding. A signal travels as the payload of one transporter frame; the frame header's signal
//! number says which struct of [`signals`] the payload holds, and its request id names the
//! transaction (or dictionary request) the signal belongs to.
//!
//! - [`codec`]: a bounds-checked little-endian reader and a writer.
//! - [`schema`]: column types, values, table definitions, lock modes, execute types;
//!   [`decimal`] and [`time`]: the DECIMAL and TIME types' values and their text; [`blob`]:
//!   BLOB and TEXT columns' heads and parts tables.
//! - [`error`]: NDB's error codes with their classification (temporary or permanent).
//! - [`gsn`]: every signal number, in one list.
//! - [`signals`]: the payload of each signal between API and data nodes.
//! - [`lqh`]: the payloads of the signals between data nodes.
//! - [`dih`]: the global checkpoint protocol's payloads.
//! - [`qmgr`]: membership: a node failure reported and declared.
//! - [`scan`]: the scan signals (SCAN_TABREQ, SCAN_NEXTREQ, SCAN_ROWS, SCAN_TABCONF).
//! - [`filter`]: pushed-down scan filters, their encoding and their meaning.
//! - [`interpreter`]: interpreted updates' programs (a condition, then integer columns changed).
//! - [`ndbinfo`]: the data nodes' virtual tables of their own state, and the signals that read
//!   them.
//! - [`suma`]: the event API's subscriptions and the changes they carry.
//! - [`ids`]: ids that travel between nodes ([`TransId`]).
//! - [`id_hash`]: the hasher of maps keyed by request and transaction ids, which keeps their
//!   order.
//!
//! Signals come in NDB's families: `…Req` asks, `…Conf` answers yes, `…Ref` answers no with an
//! error code.

#![forbid(unsafe_code)]

pub mod blob;
pub mod codec;
pub mod decimal;
pub mod dih;
pub mod error;
pub mod filter;
pub mod gsn;
pub mod id_hash;
pub mod ids;
pub mod interpreter;
pub mod lqh;
pub mod ndbinfo;
pub mod qmgr;
pub mod scan;
pub mod schema;
pub mod signals;
pub mod suma;
pub mod time;

pub use codec::{DecodeError, Reader, Writer};
pub use error::{ErrorClass, NdbError};
pub use ids::TransId;
pub use schema::{
    AbortOption, BlobSize, ColumnDef, ColumnType, ExecType, IndexKind, LockMode, OperationType,
    TableDef, Value,
};
