//! One client connection: read requests, run them (a pipeline's independent commands at once,
//! each in a transaction of its own, their executes in one flush), write the replies, until
//! the client leaves or breaks the protocol.

use std::future::Future;
use std::pin::Pin;
use std::task::Poll;

use bytes::{Bytes, BytesMut};
use rndb_api::{Error, ExecType};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::commands::{self, check_args, is_data_command, ndb_error, wrong_args, Context, Mode};
use crate::resp::{parse_request, Reply, REQUEST_BYTES_MAX};
use crate::store::Tables;

/// Requests taken from the input in one round: their replies are written together.
const PIPELINE_REQUESTS_MAX: usize = 1024;
/// Bytes read from the socket at a time.
const READ_CHUNK_BYTES: usize = 16 * 1024;
/// Commands of a pipeline run at once, each in a transaction of its own (see [`run_batch`]):
/// bounds the transactions one connection keeps open on the data nodes (MaxNoOfConcurrent-
/// Transactions, 4096 by default, is shared by every client of every API node).
const PIPELINE_TRANSACTIONS_MAX: usize = 64;
/// Commands one MULTI may queue.
const MULTI_QUEUED_MAX: usize = 10_000;

/// What a connection remembers between requests.
#[derive(Debug, Default)]
struct Session {
    /// HELLO 3 switched the replies to RESP3.
    resp3: bool,
    /// Inside MULTI: the commands queued for EXEC, and whether one was refused (EXEC then
    /// discards the transaction).
    multi: Option<(Queued, bool)>,
}

/// Commands queued by MULTI: (name, arguments).
type Queued = Vec<(String, Vec<Bytes>)>;

/// Serves one client until it disconnects, sends QUIT, or breaks the protocol.
pub async fn serve(ctx: Context<'_>, mut socket: TcpStream) -> std::io::Result<()> {
    socket.set_nodelay(true)?;
    let mut input = BytesMut::with_capacity(READ_CHUNK_BYTES);
    let mut output = BytesMut::with_capacity(READ_CHUNK_BYTES);
    let mut session = Session::default();
    loop {
        let mut requests = Vec::new();
        let mut broken = None;
        while requests.len() < PIPELINE_REQUESTS_MAX {
            match parse_request(&mut input) {
                Ok(Some(args)) if args.is_empty() => {}
                Ok(Some(args)) => requests.push(args),
                Ok(None) => break,
                Err(e) => {
                    broken = Some(e);
                    break;
                }
            }
        }
        if requests.is_empty() && broken.is_none() {
            if input.len() >= REQUEST_BYTES_MAX {
                let reply = Reply::error("ERR Protocol error: request too large");
                reply.write(&mut output, session.resp3);
                socket.write_all(&output).await?;
                return Ok(());
            }
            input.reserve(READ_CHUNK_BYTES);
            if socket.read_buf(&mut input).await? == 0 {
                return Ok(());
            }
            continue;
        }
        let quit = session.run_all(ctx, requests, &mut output).await;
        if let Some(e) = &broken {
            Reply::error(format!("ERR Protocol error: {}", e.0)).write(&mut output, session.resp3);
        }
        if !output.is_empty() {
            socket.write_all(&output).await?;
            output.clear();
        }
        if quit || broken.is_some() {
            return Ok(());
        }
    }
}

impl Session {
    /// Runs a round of pipelined requests, appending their replies; true after QUIT.
    async fn run_all(
        &mut self,
        ctx: Context<'_>,
        requests: Vec<Vec<Bytes>>,
        output: &mut BytesMut,
    ) -> bool {
        let mut index = 0;
        while index < requests.len() {
            let batch = self.batchable_run(ctx.tables, &requests[index..]);
            if batch > 1 {
                for reply in run_batch(ctx, &requests[index..index + batch]).await {
                    reply.write(output, self.resp3);
                }
                index += batch;
                continue;
            }
            let args = &requests[index];
            let name = String::from_utf8_lossy(&args[0]).to_ascii_uppercase();
            if name == "QUIT" {
                Reply::Simple("OK").write(output, self.resp3);
                return true;
            }
            let reply = self.run_one(ctx, &name, &args[1..]).await;
            reply.write(output, self.resp3);
            index += 1;
        }
        false
    }

    /// How many requests from the front of `requests` run at once as a pipeline batch (see
    /// [`run_batch`]), outside MULTI: a run of data commands on one key each, none writing a key
    /// another of them touches. 0 or 1: none.
    fn batchable_run(&self, tables: &Tables, requests: &[Vec<Bytes>]) -> usize {
        if self.multi.is_some() {
            return 0;
        }
        let mut read = std::collections::HashSet::new();
        let mut written = std::collections::HashSet::new();
        requests
            .iter()
            .take(PIPELINE_TRANSACTIONS_MAX)
            .take_while(|args| {
                let name = String::from_utf8_lossy(&args[0]).to_ascii_uppercase();
                let Some(writes) = single_key_command(&name) else {
                    return false;
                };
                if check_args(tables, &name, &args[1..]).is_some() {
                    return false;
                }
                let key = &args[1];
                if written.contains(key) || (writes && read.contains(key)) {
                    return false;
                }
                if writes {
                    written.insert(key.clone());
                }
                read.insert(key.clone());
                true
            })
            .count()
    }

    async fn run_one(&mut self, ctx: Context<'_>, name: &str, args: &[Bytes]) -> Reply {
        match name {
            "MULTI" if self.multi.is_some() => Reply::error("ERR MULTI calls can not be nested"),
            "MULTI" => {
                self.multi = Some((Vec::new(), false));
                Reply::Simple("OK")
            }
            "EXEC" => match self.multi.take() {
                None => Reply::error("ERR EXEC without MULTI"),
                Some((_, true)) => {
                    Reply::error("EXECABORT Transaction discarded because of previous errors.")
                }
                Some((queued, false)) => exec(ctx, queued).await,
            },
            "DISCARD" => match self.multi.take() {
                None => Reply::error("ERR DISCARD without MULTI"),
                Some(_) => Reply::Simple("OK"),
            },
            _ if self.multi.is_some() && is_data_command(name) => {
                let refused = check_args(ctx.tables, name, args);
                let Some((queued, failed)) = self.multi.as_mut() else {
                    return Reply::error("ERR not in MULTI");
                };
                if let Some(reply) = refused {
                    *failed = true;
                    return reply;
                }
                if queued.len() >= MULTI_QUEUED_MAX {
                    *failed = true;
                    return Reply::error(format!(
                        "ERR MULTI holds at most {MULTI_QUEUED_MAX} commands"
                    ));
                }
                queued.push((name.to_string(), args.to_vec()));
                Reply::Simple("QUEUED")
            }
            _ if is_data_command(name) => {
                if let Some(reply) = check_args(ctx.tables, name, args) {
                    return reply;
                }
                (commands::run_autocommit(ctx, name, args).await).unwrap_or_else(|e| ndb_error(&e))
            }
            _ => self.run_connection_command(ctx, name, args),
        }
    }

    /// Commands that touch no table.
    fn run_connection_command(&mut self, ctx: Context<'_>, name: &str, args: &[Bytes]) -> Reply {
        match name {
            "PING" => match args {
                [] => Reply::Simple("PONG"),
                [message] => Reply::Bulk(message.clone()),
                _ => wrong_args(name),
            },
            "ECHO" => match args {
                [message] => Reply::Bulk(message.clone()),
                _ => wrong_args(name),
            },
            "SELECT" => match args {
                [db] if &db[..] == b"0" => Reply::Simple("OK"),
                [_] => Reply::error("ERR DB index is out of range"),
                _ => wrong_args(name),
            },
            "HELLO" => self.hello(ctx, args),
            "INFO" => Reply::bulk(info(ctx)),
            "COMMAND" => match args.first().map(|a| a.to_ascii_uppercase()) {
                Some(sub) if sub == b"COUNT" => Reply::Int(commands_known().len() as i64),
                Some(sub) if sub == b"DOCS" => Reply::Map(Vec::new()),
                _ => Reply::Array(
                    commands_known()
                        .iter()
                        .map(|c| Reply::bulk(c.to_ascii_lowercase()))
                        .collect(),
                ),
            },
            // redis-benchmark and clients ask for these at start-up; nothing is configurable.
            "CONFIG" => match args {
                [sub, param] if sub.eq_ignore_ascii_case(b"GET") => {
                    Reply::Map(vec![(Reply::Bulk(param.clone()), Reply::bulk(""))])
                }
                _ => Reply::error("ERR CONFIG supports only GET"),
            },
            "CLIENT" => Reply::Simple("OK"),
            _ => Reply::error(format!(
                "ERR unknown command '{}', with args beginning with: {}",
                name.to_ascii_lowercase(),
                args.iter()
                    .take(3)
                    .map(|a| format!("'{}' ", String::from_utf8_lossy(a)))
                    .collect::<String>()
            )),
        }
    }

    /// HELLO [protover]: switches to RESP3 (3) or RESP2 (2) and describes the server.
    fn hello(&mut self, ctx: Context<'_>, args: &[Bytes]) -> Reply {
        if let Some(version) = args.first() {
            match &version[..] {
                b"2" => self.resp3 = false,
                b"3" => self.resp3 = true,
                _ => return Reply::error("NOPROTO unsupported protocol version"),
            }
        }
        let field = |k: &'static str, v: Reply| (Reply::bulk(k), v);
        Reply::Map(vec![
            field("server", Reply::bulk("redis")),
            field("version", Reply::bulk("7.0.0")),
            field("proto", Reply::Int(if self.resp3 { 3 } else { 2 })),
            field("id", Reply::Int(i64::from(ctx.db.cluster().node_id().0))),
            field("mode", Reply::bulk("standalone")),
            field("role", Reply::bulk("master")),
            field("modules", Reply::Array(Vec::new())),
        ])
    }
}

/// The data commands that touch one key, their first argument, and whether they write it
/// (`Some(true)`). GET may delete an expired row, but only one that no command may see.
fn single_key_command(name: &str) -> Option<bool> {
    match name {
        "GET" | "STRLEN" | "TTL" | "PTTL" | "HGET" | "HMGET" | "HGETALL" => Some(false),
        "SET" | "SETEX" | "PSETEX" | "INCR" | "INCRBY" | "DECR" | "DECRBY" | "APPEND"
        | "EXPIRE" | "PEXPIRE" | "PERSIST" | "HSET" | "HMSET" | "HINCRBY" | "HDEL" => Some(true),
        _ => None,
    }
}

/// One part of a pipeline batch, run as a transaction of its own.
enum Member<'r> {
    /// Plain GETs (committed reads, which lock nothing), in one transaction and one execute:
    /// (index in the batch, key).
    Gets(Vec<(usize, Bytes)>),
    /// Any other command: (index in the batch, name, arguments).
    One(usize, String, &'r [Bytes]),
}

/// Runs a batch from `Session::batchable_run`: each command in a transaction of its own (the
/// plain GETs together in one), all at once, so that their executes leave in one flush and
/// come back together, and the replies in the requests' order. Separate transactions, unlike
/// one for the whole batch, hold one row lock each: two clients' pipelines writing the same
/// keys in different orders then wait for each other's commits instead of deadlocking (266).
/// The commands touch distinct keys (or only read a shared one), so running them at once
/// gives what running them in order would.
async fn run_batch(ctx: Context<'_>, requests: &[Vec<Bytes>]) -> Vec<Reply> {
    let mut gets = Vec::new();
    let mut members = Vec::with_capacity(requests.len());
    for (index, args) in requests.iter().enumerate() {
        let name = String::from_utf8_lossy(&args[0]).to_ascii_uppercase();
        if name == "GET" {
            gets.push((index, args[1].clone()));
        } else {
            members.push(Member::One(index, name, &args[1..]));
        }
    }
    if !gets.is_empty() {
        members.push(Member::Gets(gets));
    }
    let mut replies = vec![Reply::Nil; requests.len()];
    let runs = members.into_iter().map(|member| run_member(ctx, member));
    for done in join_all(runs).await {
        for (index, reply) in done {
            replies[index] = reply;
        }
    }
    replies
}

/// Runs one member of a batch in a transaction of its own: the replies by batch index.
async fn run_member(ctx: Context<'_>, member: Member<'_>) -> Vec<(usize, Reply)> {
    match member {
        Member::Gets(gets) => {
            let mut tx = ctx.db.start_transaction();
            let keys: Vec<Bytes> = gets.iter().map(|(_, key)| key.clone()).collect();
            match commands::get_many(ctx, &mut tx, &keys).await {
                Ok(replies) => gets.iter().map(|(index, _)| *index).zip(replies).collect(),
                Err(e) => gets
                    .iter()
                    .map(|(index, _)| (*index, ndb_error(&e)))
                    .collect(),
            }
        }
        Member::One(index, name, args) => {
            let reply = (commands::run_autocommit(ctx, &name, args).await)
                .unwrap_or_else(|e| ndb_error(&e));
            vec![(index, reply)]
        }
    }
}

/// Polls every future of `futures` in the same task until all are ready: their outputs in
/// order. (Their executes, appended in the same turn, leave in one flush: see rndb-api's
/// tokio interface.) Each is boxed as it is made: a command's future takes ~1.8 KB, and a
/// vector of them first would copy each once more.
async fn join_all<F: Future>(futures: impl Iterator<Item = F>) -> Vec<F::Output> {
    let mut futures: Vec<Pin<Box<F>>> = futures.map(Box::pin).collect();
    let mut outputs: Vec<Option<F::Output>> = futures.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (future, output) in futures.iter_mut().zip(outputs.iter_mut()) {
            if output.is_none() {
                match future.as_mut().poll(cx) {
                    Poll::Ready(value) => *output = Some(value),
                    Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            Poll::Pending
        } else {
            Poll::Ready(())
        }
    })
    .await;
    outputs.into_iter().flatten().collect()
}

/// EXEC: every queued command in one rndb transaction, committed at the end. An NDB error
/// aborts the transaction and discards every command's effect.
async fn exec(ctx: Context<'_>, queued: Queued) -> Reply {
    let mut retries = 0;
    loop {
        match exec_once(ctx, &queued).await {
            // A command lost a race to insert its key (as `commands::run_autocommit`): nothing
            // of the transaction was applied, and it runs again, its replies computed afresh.
            Err(e) if e.code() == Some(630) && retries < commands::RACE_RETRIES => retries += 1,
            Ok(replies) => return Reply::Array(replies),
            Err(e) => return exec_abort(&e),
        }
    }
}

/// The queued commands in one transaction, committed: their replies.
async fn exec_once(ctx: Context<'_>, queued: &Queued) -> Result<Vec<Reply>, Error> {
    let mut tx = ctx.db.start_transaction();
    let mut replies = Vec::with_capacity(queued.len());
    for (name, args) in queued {
        replies.push(commands::run(ctx, &mut tx, Mode::IN_MULTI, name, args).await?);
    }
    tx.execute(ExecType::Commit).await?;
    Ok(replies)
}

fn exec_abort(e: &rndb_api::Error) -> Reply {
    let Reply::Error(text) = ndb_error(e) else {
        return Reply::error("EXECABORT Transaction aborted");
    };
    Reply::error(format!(
        "EXECABORT Transaction aborted, nothing of it was applied: {}",
        text.trim_start_matches("ERR ")
    ))
}

fn commands_known() -> &'static [&'static str] {
    &[
        "GET", "SET", "SETEX", "PSETEX", "MGET", "MSET", "DEL", "EXISTS", "INCR", "INCRBY", "DECR",
        "DECRBY", "APPEND", "STRLEN", "HGET", "HSET", "HMSET", "HMGET", "HGETALL", "HDEL",
        "HINCRBY", "EXPIRE", "PEXPIRE", "TTL", "PTTL", "PERSIST", "PING", "ECHO", "SELECT",
        "HELLO", "INFO", "COMMAND", "CONFIG", "CLIENT", "MULTI", "EXEC", "DISCARD", "QUIT",
    ]
}

fn info(ctx: Context<'_>) -> String {
    let cluster = ctx.db.cluster();
    let mut info = format!(
        "# Server\r\nredis_version:7.0.0\r\nredis_mode:standalone\r\nrndb_gateway:rndb-redis \
         {}\r\nrndb_api_node_id:{}\r\nrndb_data_nodes:{}\r\nrndb_no_of_replicas:{}\r\n\
         \r\n# Ndbapi\r\n",
        env!("CARGO_PKG_VERSION"),
        cluster.node_id().0,
        cluster.config().data_nodes.len(),
        cluster.config().no_of_replicas,
    );
    // NDB's client statistics, named as mysqld's status variables (lower case, as Redis's
    // fields are).
    for (stat, count) in cluster.client_stats().iter() {
        let name = stat.status_variable().to_ascii_lowercase();
        info.push_str(&format!("{name}:{count}\r\n"));
    }
    info.push_str("\r\n# Keyspace\r\n");
    info
}
