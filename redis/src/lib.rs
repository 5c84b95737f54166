//! rndb-redis: an API node of an rndb cluster that serves the Redis protocol (RESP2, and RESP3
//! after `HELLO 3`), built on rndb-api's tokio interface.
//!
//! ```text
//! client ──TCP──► session (one task per connection, on the gateway's runtime thread)
//!                   parse requests (resp) ──► run: a pipeline's commands on distinct keys at
//!                   once, each (commands) in a transaction of its own (its plain GETs in one),
//!                   their executes in one flush; any other command alone; MULTI … EXEC in one
//!                   transaction ──► write every reply of the round at once
//! ```
//!
//! - [`resp`]: requests parsed with every length bounded; replies in RESP2 or RESP3.
//! - [`session`]: a connection's loop, pipelining, MULTI/EXEC, the commands that touch no table.
//! - [`commands`]: the data commands, each in the transaction it is given.
//! - [`store`]: the tables, created at start-up when missing.
//!
//! # Port
//!
//! `--port` when given; else the `RondisServerPort` of the `[api]`/`[mysqld]` slot the gateway
//! takes (an rndb extension, named after RonDB's `Rondis.ServerPort`; 0 asks for any free
//! port, a value outside 0..65535 is a config error naming its line); else 6379. The port
//! taken is printed at start-up. It is kept should the gateway later take another API slot
//! (another API node took its own while it had no link: see rndb-api's `Cluster::node_id`),
//! whose RondisServerPort may differ; give `--port` or `--ndb-nodeid` where that matters.
//!
//! # Table layout
//!
//! Keys and values are ordinary rows, readable through rndb-api and `ndb_desc` like any other,
//! replicated, locked and (with durability) durable as they are:
//!
//! ```text
//! redis_strings                             one row per string key
//!   key            Varbinary(1024)  PK      the key's bytes
//!   value          Varbinary(8000)          the value's first 8000 bytes (a column's most)
//!   value_more     Varbinary(4689)          the next ones, to 12 689 bytes (what a row holds)
//!   expires_at_ms  Int64                    Unix time in ms when the key expires; 0: never
//!   value_rest     LONGBLOB NULL            the rest of a longer value; NULL when it has none
//!
//! redis_hashes                              one row per field of a hash
//!   key            Varbinary(1024)  PK      the hash's key
//!   field          Varbinary(1024)  PK      the field
//!   value          Varbinary(8000)          the field value's first 8000 bytes
//!   value_more     Varbinary(3671)          the next ones, to 11 671 bytes (what a row holds)
//!   value_rest     LONGBLOB NULL            the rest of a longer value; NULL when it has none
//! redis_hashes_key  ordered index on redis_hashes(key): HGETALL, DEL and EXISTS read a hash
//!                   as one range of it
//! ```
//!
//! A value of up to 12 689 bytes is read and written with its row alone: a GET is one round
//! trip, and so is a SET, one write on condition that the row, if there, has no rest
//! (`Transaction::interpreted_write`). A longer value's rest is a BLOB (its parts in the parts table of
//! `value_rest`, `NDB$BLOB_<id>_4`): written after its old head is read, as NDB writes one,
//! and read whole; every command that replaces or deletes it deletes the parts the new value
//! does not have. Hash values likewise, past 11 671 bytes. A `redis_strings` or `redis_hashes`
//! of four columns (made by a gateway before `value_rest`) is served as it is, its values
//! limited to 12 800 (11 900) bytes; another layout stops the gateway with an error naming
//! the table.
//!
//! Integers (INCR, HINCRBY) are stored as their decimal text, as Redis stores them. A key whose
//! `expires_at_ms` has passed is treated as missing by every command (GET, EXISTS, TTL, …); a
//! GET or MGET outside MULTI that finds one deletes its row (checking under an exclusive lock
//! that it is still expired), and any write overwrites it. A string and a hash may share a key
//! name (there is no WRONGTYPE check across the two tables), and TTLs apply to string keys
//! only. A command that read a key missing and then inserts it (INCR, APPEND, SET NX) runs
//! again, in a new transaction, should another client have inserted it meanwhile (630), up to
//! three times; an EXEC likewise runs all its commands again (nothing of it was applied).
//! Commands that need no value read the row alone, a rest's head and not its parts: DEL,
//! EXISTS, EXPIRE, TTL, PERSIST, STRLEN and SET NX/XX a string's, HSET and HDEL a field's
//! (HDEL reads its fields first: two round trips), DEL and EXISTS a hash's fields' (through
//! the index's raw handle, `Index::raw`).
//!
//! # Limits
//!
//! A string or hash value is at most 1 MiB (a request's longest bulk string), a key or field
//! at most 1024 bytes; past them a command is refused with an
//! `ERR` reply naming the limit. A request's arguments are at most 65 536; a request breaking
//! those limits, or the protocol, is answered with `ERR Protocol error` and its connection
//! closed, as Redis does. An NDB error becomes `ERR NDB error <code>: <message>`; inside EXEC
//! it aborts the whole transaction (`EXECABORT … NDB error <code>`), unlike Redis, so that
//! MULTI/EXEC is one rndb transaction: all of it or nothing.

#![forbid(unsafe_code)]

pub mod commands;
pub mod resp;
pub mod session;
pub mod store;

use std::net::SocketAddr;

use tokio::net::TcpListener;

use commands::Context;

/// Accepts clients on `listener` and serves each in a task of the runtime, until
/// the listener fails.
pub async fn serve(ctx: Context<'static>, listener: TcpListener) -> std::io::Result<()> {
    loop {
        let (socket, peer) = listener.accept().await?;
        tokio::spawn(async move {
            if let Err(e) = session::serve(ctx, socket).await {
                tracing::debug!(%peer, "client connection: {e}");
            }
        });
    }
}

/// The port Redis clients are served on when nothing says otherwise: Redis's own.
pub const DEFAULT_PORT: u16 = 6379;

/// The port to serve on: `--port` when given, else the RondisServerPort of the API slot the
/// gateway took (an rndb extension of `[api]`/`[mysqld]`, named after RonDB's
/// `Rondis.ServerPort`; the config parser checks its range), else [`DEFAULT_PORT`].
pub fn serving_port(flag: Option<u16>, cluster: &rndb_api::Cluster) -> u16 {
    flag.or_else(|| {
        cluster
            .config()
            .api_slot(cluster.node_id())?
            .rondis_server_port
    })
    .unwrap_or(DEFAULT_PORT)
}

/// The address the gateway listens on.
pub fn listen_addr(bind: &str, port: u16) -> std::io::Result<SocketAddr> {
    use std::net::ToSocketAddrs;
    (bind, port)
        .to_socket_addrs()?
        .next()
        .ok_or_else(|| std::io::Error::other(format!("no address for {bind}")))
}
