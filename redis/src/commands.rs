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
    AbortOption, Error, ExecType, IndexRange, LockMode, ScanOptions, TokioCluster,
    TokioTransaction, Value,
};

use crate::resp::Reply;
use crate::store::{
    bytes_value, value_columns, value_of, Tables, FIELD_BYTES_MAX, HASH_FIELD, HASH_VALUE,
    HASH_VALUE_BYTES_MAX, KEY_BYTES_MAX, STRING_EXPIRES_AT, STRING_VALUE, VALUE_BYTES_MAX,
};

/// What a command runs against.
#[derive(Clone, Copy, Debug)]
pub struct Context<'c> {
    pub db: TokioCluster<'c>,
    pub tables: &'c Tables,
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
pub fn check_args(name: &str, args: &[Bytes]) -> Option<Reply> {
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
    let value_limit = |bytes: usize, max: usize| {
        (bytes > max).then(|| {
            Reply::error(format!(
                "ERR value of {bytes} bytes exceeds the row limit: at most {max} bytes \
                 (a value is stored in one row; rndb has no blobs yet)"
            ))
        })
    };
    match name {
        "SET" | "APPEND" => value_limit(args[1].len(), VALUE_BYTES_MAX),
        "SETEX" | "PSETEX" => value_limit(args[2].len(), VALUE_BYTES_MAX),
        "MSET" => args
            .chunks(2)
            .find_map(|p| value_limit(p[1].len(), VALUE_BYTES_MAX)),
        "HSET" | "HMSET" => args[1..].chunks(2).find_map(|p| {
            if p[0].len() > FIELD_BYTES_MAX {
                return Some(Reply::error(format!(
                    "ERR field longer than {FIELD_BYTES_MAX} bytes"
                )));
            }
            value_limit(p[1].len(), HASH_VALUE_BYTES_MAX)
        }),
        _ => None,
    }
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// A string row: its value and expiry (0: none), unless it is missing or expired.
fn live_string(row: Option<&[Value]>, now: i64) -> Option<(Vec<u8>, i64)> {
    let row = row?;
    let expires_at = match row[STRING_EXPIRES_AT] {
        Value::Int64(at) => at,
        _ => 0,
    };
    if expires_at != 0 && expires_at <= now {
        return None;
    }
    value_of(row, STRING_VALUE).map(|v| (v, expires_at))
}

fn key_of(key: &[u8]) -> [Value; 1] {
    [bytes_value(key)]
}

fn string_row(key: &[u8], value: Vec<u8>, expires_at: i64) -> [Value; 4] {
    let [head, rest] = value_columns(&value);
    [bytes_value(key), head, rest, Value::Int64(expires_at)]
}

fn hash_row(key: &[u8], field: &[u8], value: &[u8]) -> [Value; 4] {
    let [head, rest] = value_columns(value);
    [bytes_value(key), bytes_value(field), head, rest]
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

/// Reads the string rows of `keys` in one execute (`exec`), with `lock`: each key's live
/// value and expiry.
async fn read_strings<'c>(
    ctx: Context<'c>,
    tx: &mut TokioTransaction<'c>,
    keys: &[Bytes],
    lock: LockMode,
    exec: ExecType,
) -> Result<Vec<Option<(Vec<u8>, i64)>>, Error> {
    read_strings_noting(ctx, tx, keys, lock, exec, &mut Vec::new()).await
}

/// As [`read_strings`], adding to `expired` the keys whose row is there but expired.
async fn read_strings_noting<'c>(
    ctx: Context<'c>,
    tx: &mut TokioTransaction<'c>,
    keys: &[Bytes],
    lock: LockMode,
    exec: ExecType,
    expired: &mut Vec<Bytes>,
) -> Result<Vec<Option<(Vec<u8>, i64)>>, Error> {
    let table = &ctx.tables.strings;
    let mut ops = Vec::with_capacity(keys.len());
    for key in keys {
        ops.push(tx.read(table, &key_of(key), lock)?);
    }
    tx.execute_with(exec, AbortOption::IgnoreError).await?;
    let now = now_ms();
    ops.into_iter()
        .zip(keys)
        .map(|(op, key)| match tx.op_error(op) {
            Some(e) if e.code == 626 => Ok(None),
            Some(e) => Err(Error::Ndb(e.clone())),
            None => {
                let live = live_string(tx.row(op), now);
                if live.is_none() && tx.row(op).is_some() {
                    expired.push(key.clone());
                }
                Ok(live)
            }
        })
        .collect()
}

/// Deletes the expired keys a read came across, each in a transaction of its own that checks,
/// under an exclusive lock, that the key is still expired (a SET may have renewed it since):
/// an expired key disappears on read, not only from view. Only outside MULTI, whose own
/// transaction may still hold the rows locked.
async fn purge_expired(ctx: Context<'_>, expired: &[Bytes]) {
    for key in expired {
        let mut tx = ctx.db.start_transaction();
        let keys = std::slice::from_ref(key);
        let read = read_strings(ctx, &mut tx, keys, LockMode::Exclusive, ExecType::NoCommit).await;
        let still_expired = matches!(read.as_deref(), Ok([None]));
        let deleted = async {
            if still_expired {
                tx.delete(&ctx.tables.strings, &key_of(key))?;
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

/// Batched GETs from a pipeline: one execute for all of them.
pub async fn get_many<'c>(
    ctx: Context<'c>,
    tx: &mut TokioTransaction<'c>,
    keys: &[Bytes],
) -> Result<Vec<Reply>, Error> {
    let mut expired = Vec::new();
    let values = read_strings_noting(
        ctx,
        tx,
        keys,
        LockMode::CommittedRead,
        ExecType::Commit,
        &mut expired,
    )
    .await?;
    purge_expired(ctx, &expired).await;
    Ok(values
        .into_iter()
        .map(|v| v.map_or(Reply::Nil, |(v, _)| Reply::bulk(v)))
        .collect())
}

async fn get<'c>(
    ctx: Context<'c>,
    tx: &mut TokioTransaction<'c>,
    mode: Mode,
    args: &[Bytes],
) -> Result<Reply, Error> {
    let mut expired = Vec::new();
    let keys = &args[..1];
    let mut values = read_strings_noting(ctx, tx, keys, mode.read, mode.last, &mut expired).await?;
    if mode.last == ExecType::Commit {
        purge_expired(ctx, &expired).await;
    }
    Ok(values
        .pop()
        .flatten()
        .map_or(Reply::Nil, |(v, _)| Reply::bulk(v)))
}

async fn mget<'c>(
    ctx: Context<'c>,
    tx: &mut TokioTransaction<'c>,
    mode: Mode,
    args: &[Bytes],
) -> Result<Reply, Error> {
    let mut expired = Vec::new();
    let values = read_strings_noting(ctx, tx, args, mode.read, mode.last, &mut expired).await?;
    if mode.last == ExecType::Commit {
        purge_expired(ctx, &expired).await;
    }
    Ok(Reply::Array(
        values
            .into_iter()
            .map(|v| v.map_or(Reply::Nil, |(v, _)| Reply::bulk(v)))
            .collect(),
    ))
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
        let current = read_strings(ctx, tx, &args[..1], LockMode::Exclusive, ExecType::NoCommit)
            .await?
            .pop()
            .flatten();
        if current.is_some() == options.nx {
            tx.execute(mode.last).await?;
            return Ok(Reply::Nil);
        }
    }
    let row = string_row(key, value.to_vec(), options.expires_at);
    tx.write(&ctx.tables.strings, &row)?;
    tx.execute(mode.last).await?;
    Ok(Reply::Simple("OK"))
}

async fn mset<'c>(
    ctx: Context<'c>,
    tx: &mut TokioTransaction<'c>,
    mode: Mode,
    args: &[Bytes],
) -> Result<Reply, Error> {
    for pair in args.chunks(2) {
        tx.write(
            &ctx.tables.strings,
            &string_row(&pair[0], pair[1].to_vec(), 0),
        )?;
    }
    tx.execute(mode.last).await?;
    Ok(Reply::Simple("OK"))
}

/// The fields of hash `key`, read through the index on `redis_hashes.key` with `lock`.
async fn hash_rows<'c>(
    ctx: Context<'c>,
    tx: &mut TokioTransaction<'c>,
    key: &[u8],
    lock: LockMode,
) -> Result<Vec<Vec<Value>>, Error> {
    let options = ScanOptions {
        lock,
        ranges: vec![IndexRange::eq(vec![bytes_value(key)])],
        ..ScanOptions::default()
    };
    let mut scan = tx.scan_index(&ctx.tables.hashes_by_key, &options).await?;
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
    let live = read_strings(ctx, tx, args, LockMode::Exclusive, ExecType::NoCommit).await?;
    let mut deleted = 0;
    for (key, value) in args.iter().zip(&live) {
        let fields = hash_rows(ctx, tx, key, LockMode::Exclusive).await?;
        if value.is_some() || !fields.is_empty() {
            deleted += 1;
        }
        for row in fields {
            tx.delete(&ctx.tables.hashes, &row[..2])?;
        }
    }
    for key in args {
        tx.delete(&ctx.tables.strings, &key_of(key))?;
    }
    tx.execute_with(mode.last, AbortOption::IgnoreError).await?;
    Ok(Reply::Int(deleted))
}

async fn exists<'c>(
    ctx: Context<'c>,
    tx: &mut TokioTransaction<'c>,
    mode: Mode,
    args: &[Bytes],
) -> Result<Reply, Error> {
    let live = read_strings(ctx, tx, args, mode.read, ExecType::NoCommit).await?;
    let mut count = 0;
    for (key, value) in args.iter().zip(&live) {
        if value.is_some() || !hash_rows(ctx, tx, key, mode.read).await?.is_empty() {
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
    let current = read_strings(ctx, tx, keys, LockMode::Exclusive, ExecType::NoCommit)
        .await?
        .pop()
        .flatten();
    let (old, expires_at) = match &current {
        None => (0, 0),
        Some((v, at)) => match parse_i64(v) {
            Some(n) => (n, *at),
            None => return Ok(not_integer()),
        },
    };
    let Some(new) = old.checked_add(by) else {
        return Ok(Reply::error("ERR increment or decrement would overflow"));
    };
    let row = string_row(key, new.to_string().into_bytes(), expires_at);
    tx.write(&ctx.tables.strings, &row)?;
    tx.execute(mode.last).await?;
    Ok(Reply::Int(new))
}

async fn append<'c>(
    ctx: Context<'c>,
    tx: &mut TokioTransaction<'c>,
    mode: Mode,
    args: &[Bytes],
) -> Result<Reply, Error> {
    let current = read_strings(ctx, tx, &args[..1], LockMode::Exclusive, ExecType::NoCommit)
        .await?
        .pop()
        .flatten();
    let (mut value, expires_at) = current.unwrap_or_default();
    value.extend_from_slice(&args[1]);
    if value.len() > VALUE_BYTES_MAX {
        return Ok(Reply::error(format!(
            "ERR value of {} bytes exceeds the row limit: at most {VALUE_BYTES_MAX} bytes \
             (a value is stored in one row; rndb has no blobs yet)",
            value.len()
        )));
    }
    let len = value.len() as i64;
    tx.write(
        &ctx.tables.strings,
        &string_row(&args[0], value, expires_at),
    )?;
    tx.execute(mode.last).await?;
    Ok(Reply::Int(len))
}

async fn strlen<'c>(
    ctx: Context<'c>,
    tx: &mut TokioTransaction<'c>,
    mode: Mode,
    args: &[Bytes],
) -> Result<Reply, Error> {
    let current = read_strings(ctx, tx, &args[..1], mode.read, mode.last)
        .await?
        .pop()
        .flatten();
    Ok(Reply::Int(current.map_or(0, |(v, _)| v.len() as i64)))
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
    let current = read_strings(ctx, tx, &args[..1], LockMode::Exclusive, ExecType::NoCommit)
        .await?
        .pop()
        .flatten();
    let Some((value, _)) = current else {
        tx.execute(mode.last).await?;
        return Ok(Reply::Int(0));
    };
    if ms <= 0 {
        // An expiry in the past deletes the key, as in Redis.
        tx.delete(&ctx.tables.strings, &key_of(&args[0]))?;
    } else {
        let row = string_row(&args[0], value, now_ms().saturating_add(ms));
        tx.write(&ctx.tables.strings, &row)?;
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
    let current = read_strings(ctx, tx, &args[..1], mode.read, mode.last)
        .await?
        .pop()
        .flatten();
    Ok(Reply::Int(match current {
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
    let current = read_strings(ctx, tx, &args[..1], LockMode::Exclusive, ExecType::NoCommit)
        .await?
        .pop()
        .flatten();
    match current {
        Some((value, at)) if at != 0 => {
            tx.write(&ctx.tables.strings, &string_row(&args[0], value, 0))?;
            tx.execute(mode.last).await?;
            Ok(Reply::Int(1))
        }
        _ => {
            tx.execute(mode.last).await?;
            Ok(Reply::Int(0))
        }
    }
}

/// Reads `fields` of hash `key` in one execute (`exec`) with `lock`.
async fn read_fields<'c>(
    ctx: Context<'c>,
    tx: &mut TokioTransaction<'c>,
    key: &[u8],
    fields: &[Bytes],
    lock: LockMode,
    exec: ExecType,
) -> Result<Vec<Option<Vec<u8>>>, Error> {
    let mut ops = Vec::with_capacity(fields.len());
    for field in fields {
        let pk = [bytes_value(key), bytes_value(field)];
        ops.push(tx.read(&ctx.tables.hashes, &pk, lock)?);
    }
    tx.execute_with(exec, AbortOption::IgnoreError).await?;
    ops.into_iter()
        .map(|op| match tx.op_error(op) {
            Some(e) if e.code == 626 => Ok(None),
            Some(e) => Err(Error::Ndb(e.clone())),
            None => Ok(tx.row(op).and_then(|row| value_of(row, HASH_VALUE))),
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
    let values = read_fields(ctx, tx, &args[0], &args[1..], mode.read, mode.last).await?;
    let mut replies: Vec<Reply> = values
        .into_iter()
        .map(|v| v.map_or(Reply::Nil, Reply::bulk))
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
    let existing = read_fields(
        ctx,
        tx,
        key,
        &fields,
        LockMode::Exclusive,
        ExecType::NoCommit,
    )
    .await?;
    let mut added = 0;
    for (pair, old) in pairs.chunks(2).zip(&existing) {
        if old.is_none() {
            added += 1;
        }
        tx.write(&ctx.tables.hashes, &hash_row(key, &pair[0], &pair[1]))?;
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
    let rows = hash_rows(ctx, tx, &args[0], mode.read).await?;
    tx.execute(mode.last).await?;
    let pairs = rows
        .into_iter()
        .filter_map(|mut row| {
            let value = value_of(&row, HASH_VALUE)?;
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
    let mut ops = Vec::new();
    for field in &args[1..] {
        let pk = [bytes_value(&args[0]), bytes_value(field)];
        ops.push(tx.delete(&ctx.tables.hashes, &pk)?);
    }
    tx.execute_with(mode.last, AbortOption::IgnoreError).await?;
    let mut deleted = 0;
    for op in ops {
        match tx.op_error(op) {
            None => deleted += 1,
            Some(e) if e.code == 626 => {}
            Some(e) => return Err(Error::Ndb(e.clone())),
        }
    }
    Ok(Reply::Int(deleted))
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
    let current = read_fields(
        ctx,
        tx,
        &args[0],
        fields,
        LockMode::Exclusive,
        ExecType::NoCommit,
    )
    .await?
    .pop()
    .flatten();
    let old = match current {
        None => 0,
        Some(v) => match parse_i64(&v) {
            Some(n) => n,
            None => return Ok(Reply::error("ERR hash value is not an integer")),
        },
    };
    let Some(new) = old.checked_add(by) else {
        return Ok(Reply::error("ERR increment or decrement would overflow"));
    };
    let row = hash_row(&args[0], &args[1], new.to_string().as_bytes());
    tx.write(&ctx.tables.hashes, &row)?;
    tx.execute(mode.last).await?;
    Ok(Reply::Int(new))
}
