//! Commands: each runs inside a transaction it is given, its last execute with the `last`
//! execute type (Commit on its own, NoCommit inside MULTI, whose EXEC commits).
//!
//! A command's own mistakes (wrong arguments, a value that is not an integer, a value too
//! large) are replies; an NDB error is returned as `Err` (the transaction is then aborted on
//! the data node), and becomes `-ERR NDB error <code>: <message>` or, inside EXEC, aborts the
//! whole transaction.

use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use rndb_api::{
    AbortOption, BlobSize, Error, ExecType, Filter, IndexRange, InterpretedCode, LockMode,
    ScanOptions, TokioCluster, TokioTransaction, Value,
};

use crate::resp::Reply;
use crate::store::{
    bytes_value, value_of, Store, Tables, FIELD_BYTES_MAX, HASH_FIELD, KEY_BYTES_MAX, REST,
    STRING_EXPIRES_AT, STRING_VALUE,
};

/// What a command runs against.
#[derive(Clone, Copy, Debug)]
pub struct Context<'c> {
    pub db: TokioCluster<'c>,
    pub tables: &'c Tables,
    /// [`no_rest_condition`] of `tables` (unused for a table without `value_rest`).
    pub no_rest: &'c NoRest,
}

/// How a command's transaction reads and ends.
#[derive(Clone, Copy, Debug)]
pub struct Mode {
    /// The execute type of the command's last execute.
    pub last: ExecType,
    /// Plain reads: CommittedRead on their own; Read (shared locks) inside MULTI, so that a
    /// transaction sees one state of every key it reads.
    pub read: LockMode,
}

impl Mode {
    pub const AUTOCOMMIT: Mode = Mode {
        last: ExecType::Commit,
        read: LockMode::CommittedRead,
    };
    pub const IN_MULTI: Mode = Mode {
        last: ExecType::NoCommit,
        read: LockMode::Read,
    };
}

/// The reply to a wrong number of arguments.
pub fn wrong_args(name: &str) -> Reply {
    Reply::error(format!(
        "ERR wrong number of arguments for '{}' command",
        name.to_ascii_lowercase()
    ))
}

/// The reply to an NDB error.
pub fn ndb_error(e: &Error) -> Reply {
    match e.ndb() {
        Some(n) => Reply::error(format!("ERR NDB error {}: {}", n.code, n.message)),
        None => Reply::error(format!("ERR rndb: {e}")),
    }
}

fn not_integer() -> Reply {
    Reply::error("ERR value is not an integer or out of range")
}

fn syntax_error() -> Reply {
    Reply::error("ERR syntax error")
}

/// The commands this module runs in a transaction (the others are answered by the session).
pub fn is_data_command(name: &str) -> bool {
    matches!(
        name,
        "GET"
            | "SET"
            | "SETEX"
            | "PSETEX"
            | "MGET"
            | "MSET"
            | "DEL"
            | "EXISTS"
            | "INCR"
            | "INCRBY"
            | "DECR"
            | "DECRBY"
            | "APPEND"
            | "STRLEN"
            | "HGET"
            | "HSET"
            | "HMSET"
            | "HMGET"
            | "HGETALL"
            | "HDEL"
            | "HINCRBY"
            | "EXPIRE"
            | "PEXPIRE"
            | "TTL"
            | "PTTL"
            | "PERSIST"
    )
}

/// Checks a command's arguments before it is queued in MULTI or run: `Some(reply)` when they
/// are wrong.
pub fn check_args(tables: &Tables, name: &str, args: &[Bytes]) -> Option<Reply> {
    let n = args.len();
    let ok = match name {
        "GET" | "INCR" | "DECR" | "STRLEN" | "HGETALL" | "TTL" | "PTTL" | "PERSIST" => n == 1,
        "SET" => n >= 2,
        "MGET" | "DEL" | "EXISTS" => n >= 1,
        "MSET" => n >= 2 && n.is_multiple_of(2),
        "INCRBY" | "DECRBY" | "APPEND" | "HGET" | "EXPIRE" | "PEXPIRE" => n == 2,
        "HSET" | "HMSET" => n >= 3 && !n.is_multiple_of(2),
        "HMGET" | "HDEL" => n >= 2,
        "HINCRBY" | "SETEX" | "PSETEX" => n == 3,
        _ => true,
    };
    if !ok {
        return Some(wrong_args(name));
    }
    let too_long = |b: &Bytes, max: usize| b.len() > max;
    let keys: &[Bytes] = match name {
        "MGET" | "DEL" | "EXISTS" => args,
        "MSET" => &[],
        _ => &args[..1],
    };
    if keys.iter().any(|k| too_long(k, KEY_BYTES_MAX))
        || (name == "MSET" && args.chunks(2).any(|p| too_long(&p[0], KEY_BYTES_MAX)))
    {
        return Some(Reply::error(format!(
            "ERR key longer than {KEY_BYTES_MAX} bytes, the key column's size"
        )));
    }
    let value_limit = |bytes: usize, max: usize| (bytes > max).then(|| too_large(bytes, max));
    let value_max = tables.strings.value_bytes_max();
    match name {
        "SET" | "APPEND" => value_limit(args[1].len(), value_max),
        "SETEX" | "PSETEX" => value_limit(args[2].len(), value_max),
        "MSET" => args
            .chunks(2)
            .find_map(|p| value_limit(p[1].len(), value_max)),
        "HSET" | "HMSET" => args[1..].chunks(2).find_map(|p| {
            if p[0].len() > FIELD_BYTES_MAX {
                return Some(Reply::error(format!(
                    "ERR field longer than {FIELD_BYTES_MAX} bytes"
                )));
            }
            value_limit(p[1].len(), tables.hashes.value_bytes_max())
        }),
        _ => None,
    }
}

/// The reply to a value of `bytes` past `max`, the longest the table it goes to holds.
fn too_large(bytes: usize, max: usize) -> Reply {
    Reply::error(format!(
        "ERR value of {bytes} bytes exceeds the limit: at most {max} bytes"
    ))
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// How a command reads rows of strings or hashes.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Read {
    /// Values whole (a rest with its parts): GET, INCR, APPEND, HGET, HGETALL, HINCRBY.
    Whole,
    /// The row alone (a rest's head): whether the key or field is there, its expiry, its
    /// length, whether it has a rest.
    Row,
}

/// A string row a command read: its value and expiry (0: none) unless it is expired, the
/// value's length, and whether the row is there at all.
#[derive(Debug, Default)]
struct Found {
    /// The value (read `Read::Row`, only its bytes in the row) and expiry.
    live: Option<(Vec<u8>, i64)>,
    /// The live value's length.
    len: usize,
    /// The row is there (live or expired): whether its value has a rest (`value_rest`, with
    /// parts to delete when it is written or deleted).
    row: Option<bool>,
}

impl Found {
    fn of(row: Option<&[Value]>, read: Read, now: i64) -> Found {
        let Some(row) = row else {
            return Found::default();
        };
        let rest = match row.get(REST) {
            Some(Value::Varbinary(rest)) => Some(rest),
            _ => None,
        };
        let expires_at = match row[STRING_EXPIRES_AT] {
            Value::Int64(at) => at,
            _ => 0,
        };
        let live = (expires_at == 0 || expires_at > now)
            .then(|| {
                let value = value_of(row, STRING_VALUE)?;
                Some((value, expires_at))
            })
            .flatten();
        let mut found = Found {
            len: live.as_ref().map_or(0, |(value, _)| value.len()),
            live,
            row: Some(rest.is_some()),
        };
        match (rest, &mut found.live) {
            (Some(rest), Some((value, _))) if read == Read::Whole => {
                value.extend_from_slice(rest);
                found.len = value.len();
            }
            (Some(head), Some(_)) => {
                let rest = rndb_protocol::blob::head_length(head, BlobSize::Long).unwrap_or(0);
                found.len += rest as usize;
            }
            _ => {}
        }
        found
    }
}

fn key_of(key: &[u8]) -> [Value; 1] {
    [bytes_value(key)]
}

/// The row of string `key`.
fn string_row(tables: &Tables, key: &[u8], value: &[u8], expires_at: i64) -> Vec<Value> {
    let expiry = Some(Value::Int64(expires_at));
    tables.strings.row(vec![bytes_value(key)], value, expiry)
}

/// The row of field `field` of hash `key`.
fn hash_row(tables: &Tables, key: &[u8], field: &[u8], value: &[u8]) -> Vec<Value> {
    let pk = vec![bytes_value(key), bytes_value(field)];
    tables.hashes.row(pk, value, None)
}

/// The exit code of a blind write (`put_strings`) that met a value with a rest.
const HAS_REST: u16 = 6100;

/// Bytes of operations a command on many rows (MSET, MGET, DEL, EXISTS, HSET, HMGET, HDEL)
/// defines before it sends them (NoCommit) and goes on: one execute's batch must fit the
/// link's send buffer (4021 past it; NDB's default SendBufferMemory is 2 MB), as the library
/// sends a long value's parts 256 KiB at a time. Counted as keys and values plus
/// `OPERATION_BYTES` each.
const EXECUTE_BYTES: usize = 256 * 1024;

/// What an operation's frame adds to its key and value, at most: the frame's header, the
/// operation's fields, the values' encodings, an expiry, a blind write's condition (~80
/// bytes in all for a SET).
const OPERATION_BYTES: usize = 128;

/// Sends the operations `tx` holds (NoCommit, `abort`) once `unsent`, the bytes they count
/// (`EXECUTE_BYTES`), passes a batch's; called before each operation is defined.
async fn send_full_batch(
    tx: &mut TokioTransaction<'_>,
    unsent: &mut usize,
    abort: AbortOption,
) -> Result<(), Error> {
    if *unsent >= EXECUTE_BYTES {
        tx.execute_with(ExecType::NoCommit, abort).await?;
        *unsent = 0;
    }
    Ok(())
}

/// The condition of a blind write of a string (`put_strings`) or delete of a hash field
/// (`hdel`): the row has no rest (`HAS_REST` otherwise).
#[derive(Debug)]
pub struct NoRest {
    pub strings: InterpretedCode,
    pub hashes: InterpretedCode,
}

/// [`NoRest`] of `tables` (no condition on a table without `value_rest`).
pub fn no_rest_condition(tables: &Tables) -> Result<NoRest, Error> {
    let code = |store: &Store| -> Result<InterpretedCode, Error> {
        let mut code = InterpretedCode::new(&store.raw);
        if store.has_rest {
            (code.condition(Filter::IsNull(REST as u16))?).exit_nok(HAS_REST)?;
        }
        Ok(code)
    };
    Ok(NoRest {
        strings: code(&tables.strings)?,
        hashes: code(&tables.hashes)?,
    })
}

/// Defines the write of `row` (with a value of `len` bytes) of `store` in `tx`, whose read
/// under an exclusive lock found it as `found` (`None`: missing, else whether it has a rest).
/// A row with no rest, written with a value that needs none, is one plain operation; a
/// missing row is inserted (630 should another transaction insert it meanwhile: the command
/// then runs again, `run_autocommit`); the others are written as a BLOB is, reading the old
/// rest's head first.
fn define_put(
    store: &Store,
    tx: &mut TokioTransaction<'_>,
    row: &[Value],
    len: usize,
    found: Option<bool>,
) -> Result<(), Error> {
    let table = if len <= store.inline_bytes && found != Some(true) {
        &store.raw
    } else {
        &store.cooked
    };
    match found {
        None => tx.insert(table, row)?,
        Some(_) => tx.write(table, row)?,
    };
    Ok(())
}

/// Defines the delete of the row of `store` with primary key `pk` in `tx`, whose read under
/// an exclusive lock found it as `found`: nothing when there is none (a row inserted since by
/// another transaction is as if inserted after this one), its parts too when it has a rest.
fn define_delete(
    store: &Store,
    tx: &mut TokioTransaction<'_>,
    pk: &[Value],
    found: Option<bool>,
) -> Result<(), Error> {
    match found {
        None => {}
        Some(false) => _ = tx.delete(&store.raw, pk)?,
        Some(true) => _ = tx.delete(&store.cooked, pk)?,
    }
    Ok(())
}

/// Defines the change of string `key`'s expiry (0: none) in `tx`, which found its row.
fn set_expiry(
    tables: &Tables,
    tx: &mut TokioTransaction<'_>,
    key: &[u8],
    expires_at: i64,
) -> Result<(), Error> {
    let set = [(STRING_EXPIRES_AT, Value::Int64(expires_at))];
    tx.update(&tables.strings.raw, &key_of(key), &set)?;
    Ok(())
}

/// Writes strings without reading them first (SET, MSET), their last execute `mode.last`. A
/// value the row holds whole is one plain operation: a write on condition that the row, if
/// it is there, has no rest (`Transaction::interpreted_write`, else `HAS_REST`); a value that
/// needs a rest is written as a BLOB is (the old rest's head read first). On its own (a
/// commit), the command's executes are AbortOnError (one, unless its rows pass
/// `EXECUTE_BYTES`): should a row have had a rest, it runs again in a transaction of its own,
/// every value written as a BLOB. Inside MULTI the conditional writes' failures are ignored
/// and those rows written as BLOBs next, in the same transaction.
async fn put_strings<'c>(
    ctx: Context<'c>,
    tx: &mut TokioTransaction<'c>,
    mode: Mode,
    pairs: &[(&[u8], &[u8], i64)],
) -> Result<(), Error> {
    let (tables, strings) = (ctx.tables, &ctx.tables.strings);
    let (mut blind, mut plain) = (Vec::new(), Vec::new());
    let commit = mode.last == ExecType::Commit;
    let abort = if commit {
        AbortOption::AbortOnError
    } else {
        AbortOption::IgnoreError
    };
    let (mut unsent, mut sent) = (0, Ok(()));
    for (index, &(key, value, expires_at)) in pairs.iter().enumerate() {
        let row = string_row(tables, key, value, expires_at);
        if value.len() > strings.inline_bytes {
            plain.push(tx.write(&strings.cooked, &row)?);
        } else if !strings.has_rest {
            plain.push(tx.write(&strings.raw, &row)?);
        } else {
            let write = tx.interpreted_write(&strings.raw, &row, &ctx.no_rest.strings)?;
            blind.push((write, row));
        }
        unsent += key.len() + value.len() + OPERATION_BYTES;
        if unsent >= EXECUTE_BYTES && index + 1 < pairs.len() {
            sent = tx.execute_with(ExecType::NoCommit, abort).await;
            if sent.is_err() {
                break;
            }
            unsent = 0;
        }
    }
    let has_rest = |e: &rndb_api::NdbError| e.code == u32::from(HAS_REST);
    if commit {
        let done = match sent {
            Ok(()) => tx.execute(ExecType::Commit).await,
            Err(e) => Err(e),
        };
        return match done {
            Err(Error::Ndb(e)) if has_rest(&e) => {
                let mut again = ctx.db.start_transaction();
                for &(key, value, expires_at) in pairs {
                    let row = string_row(tables, key, value, expires_at);
                    again.write(&strings.cooked, &row)?;
                }
                again.execute(ExecType::Commit).await
            }
            done => done,
        };
    }
    sent?;
    tx.execute_with(mode.last, AbortOption::IgnoreError).await?;
    // Only the conditional writes may fail: any other failure fails the command (and EXEC).
    if let Some(e) = plain.into_iter().find_map(|op| tx.op_error(op)) {
        return Err(Error::Ndb(e.clone()));
    }
    let mut later = Vec::new();
    for (write, row) in blind {
        match tx.op_error(write) {
            None => {}
            Some(e) if has_rest(e) => later.push(row),
            Some(e) => return Err(Error::Ndb(e.clone())),
        }
    }
    if later.is_empty() {
        return Ok(());
    }
    for row in &later {
        tx.write(&strings.cooked, row)?;
    }
    tx.execute(mode.last).await
}

fn parse_i64(bytes: &[u8]) -> Option<i64> {
    std::str::from_utf8(bytes).ok()?.parse().ok()
}

/// Runs one data command (its arguments already checked) in `tx`.
pub async fn run<'c>(
    ctx: Context<'c>,
    tx: &mut TokioTransaction<'c>,
    mode: Mode,
    name: &str,
    args: &[Bytes],
) -> Result<Reply, Error> {
    match name {
        "GET" => get(ctx, tx, mode, args).await,
        "MGET" => mget(ctx, tx, mode, args).await,
        "SET" => set(ctx, tx, mode, args).await,
        // SETEX key seconds value: SET key value EX seconds (PSETEX: PX).
        "SETEX" | "PSETEX" => {
            let unit = Bytes::from_static(if name == "SETEX" { b"EX" } else { b"PX" });
            let as_set = [args[0].clone(), args[2].clone(), unit, args[1].clone()];
            set(ctx, tx, mode, &as_set).await
        }
        "MSET" => mset(ctx, tx, mode, args).await,
        "DEL" => del(ctx, tx, mode, args).await,
        "EXISTS" => exists(ctx, tx, mode, args).await,
        "INCR" => incr_by(ctx, tx, mode, &args[0], Some(1)).await,
        "DECR" => incr_by(ctx, tx, mode, &args[0], Some(-1)).await,
        "INCRBY" => incr_by(ctx, tx, mode, &args[0], parse_i64(&args[1])).await,
        "DECRBY" => {
            let by = parse_i64(&args[1]).and_then(i64::checked_neg);
            incr_by(ctx, tx, mode, &args[0], by).await
        }
        "APPEND" => append(ctx, tx, mode, args).await,
        "STRLEN" => strlen(ctx, tx, mode, args).await,
        "EXPIRE" | "PEXPIRE" => expire(ctx, tx, mode, name == "PEXPIRE", args).await,
        "TTL" | "PTTL" => ttl(ctx, tx, mode, name == "PTTL", args).await,
        "PERSIST" => persist(ctx, tx, mode, args).await,
        "HGET" => hmget(ctx, tx, mode, args, true).await,
        "HMGET" => hmget(ctx, tx, mode, args, false).await,
        "HSET" => hset(ctx, tx, mode, args).await,
        // The older form of HSET: the same, answered with OK.
        "HMSET" => Ok(match hset(ctx, tx, mode, args).await? {
            Reply::Int(_) => Reply::Simple("OK"),
            other => other,
        }),
        "HGETALL" => hgetall(ctx, tx, mode, args).await,
        "HDEL" => hdel(ctx, tx, mode, args).await,
        "HINCRBY" => hincrby(ctx, tx, mode, args).await,
        _ => Ok(Reply::error(format!("ERR unknown command '{name}'"))),
    }
}

/// How many times a command runs again after its insert met a row another transaction
/// inserted since its read found none (630: `define_put`).
pub const RACE_RETRIES: u32 = 3;

/// Runs one data command (its arguments already checked) in a transaction of its own; run
/// again, in a new one, when it lost a race to insert its key (`RACE_RETRIES`; an EXEC runs
/// again likewise).
pub async fn run_autocommit(ctx: Context<'_>, name: &str, args: &[Bytes]) -> Result<Reply, Error> {
    let mut retries = 0;
    loop {
        let mut tx = ctx.db.start_transaction();
        match run(ctx, &mut tx, Mode::AUTOCOMMIT, name, args).await {
            Err(e) if e.code() == Some(630) && retries < RACE_RETRIES => retries += 1,
            done => return done,
        }
    }
}

/// Reads the string rows of `keys` in one execute (`exec`), with `lock`.
async fn read_strings<'c>(
    ctx: Context<'c>,
    tx: &mut TokioTransaction<'c>,
    keys: &[Bytes],
    (read, lock): (Read, LockMode),
    exec: ExecType,
) -> Result<Vec<Found>, Error> {
    read_strings_noting(ctx, tx, keys, (read, lock), exec, &mut Vec::new()).await
}

/// As [`read_strings`], adding to `expired` the keys whose row is there but expired.
async fn read_strings_noting<'c>(
    ctx: Context<'c>,
    tx: &mut TokioTransaction<'c>,
    keys: &[Bytes],
    (read, lock): (Read, LockMode),
    exec: ExecType,
    expired: &mut Vec<Bytes>,
) -> Result<Vec<Found>, Error> {
    let table = match read {
        Read::Whole => &ctx.tables.strings.cooked,
        Read::Row => &ctx.tables.strings.raw,
    };
    let (mut ops, mut unsent) = (Vec::with_capacity(keys.len()), 0);
    for key in keys {
        send_full_batch(tx, &mut unsent, AbortOption::IgnoreError).await?;
        ops.push(tx.read(table, &key_of(key), lock)?);
        unsent += key.len() + OPERATION_BYTES;
    }
    tx.execute_with(exec, AbortOption::IgnoreError).await?;
    let now = now_ms();
    ops.into_iter()
        .zip(keys)
        .map(|(op, key)| match tx.op_error(op) {
            Some(e) if e.code == 626 => Ok(Found::default()),
            Some(e) => Err(Error::Ndb(e.clone())),
            None => {
                let found = Found::of(tx.row(op), read, now);
                if found.live.is_none() && found.row.is_some() {
                    expired.push(key.clone());
                }
                Ok(found)
            }
        })
        .collect()
}

/// The one string row `read_strings` read.
fn only(mut found: Vec<Found>) -> Found {
    found.pop().unwrap_or_default()
}

/// Deletes the expired keys a read came across, each in a transaction of its own that checks,
/// under an exclusive lock, that the key is still expired (a SET may have renewed it since):
/// an expired key disappears on read, not only from view. Only outside MULTI, whose own
/// transaction may still hold the rows locked.
async fn purge_expired(ctx: Context<'_>, expired: &[Bytes]) {
    for key in expired {
        let mut tx = ctx.db.start_transaction();
        let keys = std::slice::from_ref(key);
        let locked = (Read::Row, LockMode::Exclusive);
        let read = read_strings(ctx, &mut tx, keys, locked, ExecType::NoCommit).await;
        let deleted = async {
            if let Ok(
                [Found {
                    live: None, row, ..
                }],
            ) = read.as_deref()
            {
                define_delete(&ctx.tables.strings, &mut tx, &key_of(key), *row)?;
            }
            tx.execute_with(ExecType::Commit, AbortOption::IgnoreError)
                .await
        };
        // A failed purge leaves the row for the next read or write: nothing else depends on it.
        if let Err(e) = deleted.await {
            tracing::debug!("purge an expired key: {e}");
        }
    }
}

/// The reply to a read value.
fn bulk_or_nil(found: Found) -> Reply {
    found.live.map_or(Reply::Nil, |(v, _)| Reply::bulk(v))
}

/// Batched GETs from a pipeline: one execute for all of them.
pub async fn get_many<'c>(
    ctx: Context<'c>,
    tx: &mut TokioTransaction<'c>,
    keys: &[Bytes],
) -> Result<Vec<Reply>, Error> {
    let mut expired = Vec::new();
    let committed = (Read::Whole, LockMode::CommittedRead);
    let values =
        read_strings_noting(ctx, tx, keys, committed, ExecType::Commit, &mut expired).await?;
    purge_expired(ctx, &expired).await;
    Ok(values.into_iter().map(bulk_or_nil).collect())
}

async fn get<'c>(
    ctx: Context<'c>,
    tx: &mut TokioTransaction<'c>,
    mode: Mode,
    args: &[Bytes],
) -> Result<Reply, Error> {
    let mut expired = Vec::new();
    let keys = &args[..1];
    let read = (Read::Whole, mode.read);
    let values = read_strings_noting(ctx, tx, keys, read, mode.last, &mut expired).await?;
    if mode.last == ExecType::Commit {
        purge_expired(ctx, &expired).await;
    }
    Ok(bulk_or_nil(only(values)))
}

async fn mget<'c>(
    ctx: Context<'c>,
    tx: &mut TokioTransaction<'c>,
    mode: Mode,
    args: &[Bytes],
) -> Result<Reply, Error> {
    let mut expired = Vec::new();
    let read = (Read::Whole, mode.read);
    let values = read_strings_noting(ctx, tx, args, read, mode.last, &mut expired).await?;
    if mode.last == ExecType::Commit {
        purge_expired(ctx, &expired).await;
    }
    Ok(Reply::Array(values.into_iter().map(bulk_or_nil).collect()))
}

/// SET's options.
struct SetOptions {
    expires_at: i64,
    nx: bool,
    xx: bool,
}

fn set_options(args: &[Bytes]) -> Result<SetOptions, Reply> {
    let mut options = SetOptions {
        expires_at: 0,
        nx: false,
        xx: false,
    };
    let mut rest = args.iter();
    while let Some(word) = rest.next() {
        let word = String::from_utf8_lossy(word).to_ascii_uppercase();
        match word.as_str() {
            "NX" => options.nx = true,
            "XX" => options.xx = true,
            "EX" | "PX" => {
                let amount = rest
                    .next()
                    .and_then(|a| parse_i64(a))
                    .ok_or_else(not_integer)?;
                if amount <= 0 {
                    return Err(Reply::error("ERR invalid expire time in 'set' command"));
                }
                let ms = if word == "EX" {
                    amount.saturating_mul(1000)
                } else {
                    amount
                };
                options.expires_at = now_ms().saturating_add(ms);
            }
            _ => return Err(syntax_error()),
        }
    }
    if options.nx && options.xx {
        return Err(syntax_error());
    }
    Ok(options)
}

async fn set<'c>(
    ctx: Context<'c>,
    tx: &mut TokioTransaction<'c>,
    mode: Mode,
    args: &[Bytes],
) -> Result<Reply, Error> {
    let options = match set_options(&args[2..]) {
        Ok(options) => options,
        Err(reply) => return Ok(reply),
    };
    let (key, value) = (&args[0], &args[1]);
    if options.nx || options.xx {
        // Whether the key is there (an expired key is not) decides; the row stays locked
        // until the write.
        let keys = &args[..1];
        let locked = (Read::Row, LockMode::Exclusive);
        let found = only(read_strings(ctx, tx, keys, locked, ExecType::NoCommit).await?);
        if found.live.is_some() == options.nx {
            tx.execute(mode.last).await?;
            return Ok(Reply::Nil);
        }
        let row = string_row(ctx.tables, key, value, options.expires_at);
        define_put(&ctx.tables.strings, tx, &row, value.len(), found.row)?;
        tx.execute(mode.last).await?;
        return Ok(Reply::Simple("OK"));
    }
    put_strings(ctx, tx, mode, &[(key, value, options.expires_at)]).await?;
    Ok(Reply::Simple("OK"))
}

async fn mset<'c>(
    ctx: Context<'c>,
    tx: &mut TokioTransaction<'c>,
    mode: Mode,
    args: &[Bytes],
) -> Result<Reply, Error> {
    // A key given twice takes its last value, as in Redis: only that one is written.
    let mut seen = std::collections::HashSet::new();
    let mut pairs: Vec<(&[u8], &[u8], i64)> = Vec::with_capacity(args.len() / 2);
    for pair in args.chunks(2).rev() {
        if seen.insert(&pair[0]) {
            pairs.push((&pair[0], &pair[1], 0));
        }
    }
    pairs.reverse();
    put_strings(ctx, tx, mode, &pairs).await?;
    Ok(Reply::Simple("OK"))
}

/// The fields of hash `key`, read through the index on `redis_hashes.key` with `lock`: whole,
/// or (`Read::Row`) with their rests' heads only.
async fn hash_rows<'c>(
    ctx: Context<'c>,
    tx: &mut TokioTransaction<'c>,
    key: &[u8],
    (read, lock): (Read, LockMode),
) -> Result<Vec<Vec<Value>>, Error> {
    let options = ScanOptions {
        lock,
        ranges: vec![IndexRange::eq(vec![bytes_value(key)])],
        ..ScanOptions::default()
    };
    let index = match read {
        Read::Whole => &ctx.tables.hashes_by_key,
        Read::Row => &ctx.tables.hashes_by_key_raw,
    };
    let mut scan = tx.scan_index(index, &options).await?;
    let mut rows = Vec::new();
    while let Some(row) = scan.next_row().await {
        rows.push(row?);
    }
    Ok(rows)
}

async fn del<'c>(
    ctx: Context<'c>,
    tx: &mut TokioTransaction<'c>,
    mode: Mode,
    args: &[Bytes],
) -> Result<Reply, Error> {
    let locked = (Read::Row, LockMode::Exclusive);
    let found = read_strings(ctx, tx, args, locked, ExecType::NoCommit).await?;
    let (mut deleted, mut unsent) = (0, 0);
    // A key given twice is deleted, and counted, once (as in Redis).
    let mut seen = std::collections::HashSet::new();
    for (key, found) in args.iter().zip(found) {
        if !seen.insert(key) {
            continue;
        }
        send_full_batch(tx, &mut unsent, AbortOption::AbortOnError).await?;
        let fields = hash_rows(ctx, tx, key, (Read::Row, LockMode::Exclusive)).await?;
        unsent += (1 + fields.len()) * (key.len() + OPERATION_BYTES)
            + fields
                .iter()
                .map(|f| f.get(1).map_or(0, Value::stored_bytes))
                .sum::<usize>();
        if found.live.is_some() || !fields.is_empty() {
            deleted += 1;
        }
        for row in fields {
            let found = Some(Store::has_rest(&row));
            define_delete(&ctx.tables.hashes, tx, &row[..2], found)?;
        }
        define_delete(&ctx.tables.strings, tx, &key_of(key), found.row)?;
    }
    // Only rows found under an exclusive lock are deleted: any failure fails the command.
    tx.execute(mode.last).await?;
    Ok(Reply::Int(deleted))
}

async fn exists<'c>(
    ctx: Context<'c>,
    tx: &mut TokioTransaction<'c>,
    mode: Mode,
    args: &[Bytes],
) -> Result<Reply, Error> {
    let found = read_strings(ctx, tx, args, (Read::Row, mode.read), ExecType::NoCommit).await?;
    let mut count = 0;
    for (key, found) in args.iter().zip(&found) {
        let read = (Read::Row, mode.read);
        if found.live.is_some() || !hash_rows(ctx, tx, key, read).await?.is_empty() {
            count += 1;
        }
    }
    tx.execute(mode.last).await?;
    Ok(Reply::Int(count))
}

async fn incr_by<'c>(
    ctx: Context<'c>,
    tx: &mut TokioTransaction<'c>,
    mode: Mode,
    key: &Bytes,
    by: Option<i64>,
) -> Result<Reply, Error> {
    let Some(by) = by else {
        return Ok(not_integer());
    };
    let keys = std::slice::from_ref(key);
    let locked = (Read::Whole, LockMode::Exclusive);
    let found = only(read_strings(ctx, tx, keys, locked, ExecType::NoCommit).await?);
    let (old, expires_at) = match &found.live {
        None => (0, 0),
        Some((v, at)) => match parse_i64(v) {
            Some(n) => (n, *at),
            None => return Ok(not_integer()),
        },
    };
    let Some(new) = old.checked_add(by) else {
        return Ok(Reply::error("ERR increment or decrement would overflow"));
    };
    let value = new.to_string().into_bytes();
    let row = string_row(ctx.tables, key, &value, expires_at);
    define_put(&ctx.tables.strings, tx, &row, value.len(), found.row)?;
    tx.execute(mode.last).await?;
    Ok(Reply::Int(new))
}

async fn append<'c>(
    ctx: Context<'c>,
    tx: &mut TokioTransaction<'c>,
    mode: Mode,
    args: &[Bytes],
) -> Result<Reply, Error> {
    let keys = &args[..1];
    let locked = (Read::Whole, LockMode::Exclusive);
    let found = only(read_strings(ctx, tx, keys, locked, ExecType::NoCommit).await?);
    let (mut value, expires_at) = found.live.unwrap_or_default();
    value.extend_from_slice(&args[1]);
    let max = ctx.tables.strings.value_bytes_max();
    if value.len() > max {
        tx.execute(mode.last).await?;
        return Ok(too_large(value.len(), max));
    }
    let len = value.len() as i64;
    let row = string_row(ctx.tables, &args[0], &value, expires_at);
    define_put(&ctx.tables.strings, tx, &row, value.len(), found.row)?;
    tx.execute(mode.last).await?;
    Ok(Reply::Int(len))
}

async fn strlen<'c>(
    ctx: Context<'c>,
    tx: &mut TokioTransaction<'c>,
    mode: Mode,
    args: &[Bytes],
) -> Result<Reply, Error> {
    let read = (Read::Row, mode.read);
    let found = only(read_strings(ctx, tx, &args[..1], read, mode.last).await?);
    Ok(Reply::Int(found.len as i64))
}

async fn expire<'c>(
    ctx: Context<'c>,
    tx: &mut TokioTransaction<'c>,
    mode: Mode,
    millis: bool,
    args: &[Bytes],
) -> Result<Reply, Error> {
    let Some(amount) = parse_i64(&args[1]) else {
        return Ok(not_integer());
    };
    let ms = if millis {
        amount
    } else {
        amount.saturating_mul(1000)
    };
    let keys = &args[..1];
    let locked = (Read::Row, LockMode::Exclusive);
    let found = only(read_strings(ctx, tx, keys, locked, ExecType::NoCommit).await?);
    if found.live.is_none() {
        tx.execute(mode.last).await?;
        return Ok(Reply::Int(0));
    }
    if ms <= 0 {
        // An expiry in the past deletes the key, as in Redis.
        define_delete(&ctx.tables.strings, tx, &key_of(&args[0]), found.row)?;
    } else {
        set_expiry(ctx.tables, tx, &args[0], now_ms().saturating_add(ms))?;
    }
    tx.execute(mode.last).await?;
    Ok(Reply::Int(1))
}

async fn ttl<'c>(
    ctx: Context<'c>,
    tx: &mut TokioTransaction<'c>,
    mode: Mode,
    millis: bool,
    args: &[Bytes],
) -> Result<Reply, Error> {
    let read = (Read::Row, mode.read);
    let found = only(read_strings(ctx, tx, &args[..1], read, mode.last).await?);
    Ok(Reply::Int(match found.live {
        None => -2,
        Some((_, 0)) => -1,
        Some((_, at)) => {
            let left = (at - now_ms()).max(0);
            if millis {
                left
            } else {
                (left + 500) / 1000
            }
        }
    }))
}

async fn persist<'c>(
    ctx: Context<'c>,
    tx: &mut TokioTransaction<'c>,
    mode: Mode,
    args: &[Bytes],
) -> Result<Reply, Error> {
    let keys = &args[..1];
    let locked = (Read::Row, LockMode::Exclusive);
    match only(read_strings(ctx, tx, keys, locked, ExecType::NoCommit).await?).live {
        Some((_, at)) if at != 0 => {
            set_expiry(ctx.tables, tx, &args[0], 0)?;
            tx.execute(mode.last).await?;
            Ok(Reply::Int(1))
        }
        _ => {
            tx.execute(mode.last).await?;
            Ok(Reply::Int(0))
        }
    }
}

/// A field of a hash a command read: its value (read `Read::Row`, only its bytes in the row),
/// and, when it is there, whether its value has a rest.
#[derive(Debug, Default)]
struct FieldFound {
    value: Option<Vec<u8>>,
    row: Option<bool>,
}

/// Reads `fields` of hash `key` in one execute (`exec`) with `lock`.
async fn read_fields<'c>(
    ctx: Context<'c>,
    tx: &mut TokioTransaction<'c>,
    key: &[u8],
    fields: &[Bytes],
    (read, lock): (Read, LockMode),
    exec: ExecType,
) -> Result<Vec<FieldFound>, Error> {
    let hashes = &ctx.tables.hashes;
    let table = match read {
        Read::Whole => &hashes.cooked,
        Read::Row => &hashes.raw,
    };
    let (mut ops, mut unsent) = (Vec::with_capacity(fields.len()), 0);
    for field in fields {
        send_full_batch(tx, &mut unsent, AbortOption::IgnoreError).await?;
        let pk = [bytes_value(key), bytes_value(field)];
        ops.push(tx.read(table, &pk, lock)?);
        unsent += key.len() + field.len() + OPERATION_BYTES;
    }
    tx.execute_with(exec, AbortOption::IgnoreError).await?;
    ops.into_iter()
        .map(|op| match (tx.op_error(op), tx.row(op)) {
            (Some(e), _) if e.code == 626 => Ok(FieldFound::default()),
            (Some(e), _) => Err(Error::Ndb(e.clone())),
            (None, None) => Ok(FieldFound::default()),
            (None, Some(row)) => Ok(FieldFound {
                value: match read {
                    Read::Whole => hashes.value_of(row),
                    Read::Row => value_of(row, hashes.value),
                },
                row: Some(Store::has_rest(row)),
            }),
        })
        .collect()
}

async fn hmget<'c>(
    ctx: Context<'c>,
    tx: &mut TokioTransaction<'c>,
    mode: Mode,
    args: &[Bytes],
    single: bool,
) -> Result<Reply, Error> {
    let read = (Read::Whole, mode.read);
    let values = read_fields(ctx, tx, &args[0], &args[1..], read, mode.last).await?;
    let mut replies: Vec<Reply> = values
        .into_iter()
        .map(|f| f.value.map_or(Reply::Nil, Reply::bulk))
        .collect();
    if single {
        return Ok(replies.pop().unwrap_or(Reply::Nil));
    }
    Ok(Reply::Array(replies))
}

async fn hset<'c>(
    ctx: Context<'c>,
    tx: &mut TokioTransaction<'c>,
    mode: Mode,
    args: &[Bytes],
) -> Result<Reply, Error> {
    let (key, pairs) = (&args[0], &args[1..]);
    let fields: Vec<Bytes> = pairs.chunks(2).map(|p| p[0].clone()).collect();
    let locked = (Read::Row, LockMode::Exclusive);
    let existing = read_fields(ctx, tx, key, &fields, locked, ExecType::NoCommit).await?;
    let (mut added, mut unsent) = (0, 0);
    // A field given twice takes its last value, as in Redis: only that one is written.
    let mut seen = std::collections::HashSet::new();
    let last_first = pairs.chunks(2).zip(&existing).rev();
    for (pair, old) in last_first.filter(|(pair, _)| seen.insert(&pair[0])) {
        send_full_batch(tx, &mut unsent, AbortOption::AbortOnError).await?;
        if old.row.is_none() {
            added += 1;
        }
        let row = hash_row(ctx.tables, key, &pair[0], &pair[1]);
        define_put(&ctx.tables.hashes, tx, &row, pair[1].len(), old.row)?;
        unsent += key.len() + pair[0].len() + pair[1].len() + OPERATION_BYTES;
    }
    tx.execute(mode.last).await?;
    Ok(Reply::Int(added))
}

async fn hgetall<'c>(
    ctx: Context<'c>,
    tx: &mut TokioTransaction<'c>,
    mode: Mode,
    args: &[Bytes],
) -> Result<Reply, Error> {
    let rows = hash_rows(ctx, tx, &args[0], (Read::Whole, mode.read)).await?;
    tx.execute(mode.last).await?;
    let hashes = &ctx.tables.hashes;
    let pairs = rows
        .into_iter()
        .filter_map(|mut row| {
            let value = hashes.value_of(&row)?;
            match std::mem::replace(&mut row[HASH_FIELD], Value::Null) {
                Value::Varbinary(field) => Some((Reply::bulk(field), Reply::bulk(value))),
                _ => None,
            }
        })
        .collect();
    Ok(Reply::Map(pairs))
}

async fn hdel<'c>(
    ctx: Context<'c>,
    tx: &mut TokioTransaction<'c>,
    mode: Mode,
    args: &[Bytes],
) -> Result<Reply, Error> {
    let (key, fields) = (&args[0], &args[1..]);
    if mode.last == ExecType::Commit {
        // On its own, first as if every field were there with no rest: one round trip.
        let mut first = ctx.db.start_transaction();
        match hdel_all_short(ctx, &mut first, key, fields).await {
            Ok(deleted) => return Ok(Reply::Int(deleted)),
            Err(Error::Ndb(e)) if e.code == 626 || e.code == u32::from(HAS_REST) => {}
            Err(e) => return Err(e),
        }
    }
    let locked = (Read::Row, LockMode::Exclusive);
    let found = read_fields(ctx, tx, key, fields, locked, ExecType::NoCommit).await?;
    let (mut deleted, mut unsent) = (0, 0);
    // A field given twice is deleted, and counted, once.
    let mut seen = std::collections::HashSet::new();
    for (field, found) in fields.iter().zip(found) {
        if found.row.is_some() && seen.insert(field) {
            send_full_batch(tx, &mut unsent, AbortOption::AbortOnError).await?;
            unsent += key.len() + field.len() + OPERATION_BYTES;
            deleted += 1;
            let pk = [bytes_value(key), bytes_value(field)];
            define_delete(&ctx.tables.hashes, tx, &pk, found.row)?;
        }
    }
    tx.execute(mode.last).await?;
    Ok(Reply::Int(deleted))
}

/// HDEL in one execute of `tx` that commits, AbortOnError: each field's row deleted on
/// condition that it has no rest. A field that is not there (626) or has a rest (`HAS_REST`)
/// fails it whole, and nothing is deleted. The count of fields deleted otherwise.
async fn hdel_all_short<'c>(
    ctx: Context<'c>,
    tx: &mut TokioTransaction<'c>,
    key: &Bytes,
    fields: &[Bytes],
) -> Result<i64, Error> {
    let mut seen = std::collections::HashSet::new();
    let (mut unsent, mut deleted) = (0, 0);
    for field in fields.iter().filter(|f| seen.insert(*f)) {
        send_full_batch(tx, &mut unsent, AbortOption::AbortOnError).await?;
        let (hashes, pk) = (&ctx.tables.hashes, [bytes_value(key), bytes_value(field)]);
        if hashes.has_rest {
            tx.interpreted_delete(&hashes.raw, &pk, &ctx.no_rest.hashes)?;
        } else {
            tx.delete(&hashes.raw, &pk)?;
        }
        unsent += key.len() + field.len() + OPERATION_BYTES;
        deleted += 1;
    }
    tx.execute(ExecType::Commit).await?;
    Ok(deleted)
}

async fn hincrby<'c>(
    ctx: Context<'c>,
    tx: &mut TokioTransaction<'c>,
    mode: Mode,
    args: &[Bytes],
) -> Result<Reply, Error> {
    let Some(by) = parse_i64(&args[2]) else {
        return Ok(not_integer());
    };
    let fields = std::slice::from_ref(&args[1]);
    let locked = (Read::Whole, LockMode::Exclusive);
    let found = read_fields(ctx, tx, &args[0], fields, locked, ExecType::NoCommit).await?;
    let found = found.into_iter().next().unwrap_or_default();
    let old = match found.value {
        None => 0,
        Some(v) => match parse_i64(&v) {
            Some(n) => n,
            None => return Ok(Reply::error("ERR hash value is not an integer")),
        },
    };
    let Some(new) = old.checked_add(by) else {
        return Ok(Reply::error("ERR increment or decrement would overflow"));
    };
    let value = new.to_string().into_bytes();
    let row = hash_row(ctx.tables, &args[0], &args[1], &value);
    define_put(&ctx.tables.hashes, tx, &row, value.len(), found.row)?;
    tx.execute(mode.last).await?;
    Ok(Reply::Int(new))
}
