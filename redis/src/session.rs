//! One client connection: read requests, run them (pipelined GETs or plain SETs batched into
//! one execute), write the replies, until the client leaves or breaks the protocol.

use bytes::{Bytes, BytesMut};
use rndb_api::ExecType;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::commands::{self, check_args, is_data_command, ndb_error, wrong_args, Context, Mode};
use crate::resp::{parse_request, Reply, REQUEST_BYTES_MAX};

/// Requests taken from the input in one round: their replies are written together.
const PIPELINE_REQUESTS_MAX: usize = 1024;
/// Bytes read from the socket at a time.
const READ_CHUNK_BYTES: usize = 16 * 1024;
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
            let batch = self.batchable_run(&requests[index..]);
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

    /// How many requests from the front of `requests` run as one execute: a run of GETs, or
    /// a run of SETs without options on distinct keys (outside MULTI). 0 or 1: none.
    fn batchable_run(&self, requests: &[Vec<Bytes>]) -> usize {
        if self.multi.is_some() {
            return 0;
        }
        let kind = |args: &Vec<Bytes>| -> Option<bool> {
            let name = args[0].to_ascii_uppercase();
            match (&name[..], args.len()) {
                (b"GET", 2) => Some(false),
                (b"SET", 3) => Some(true),
                _ => None,
            }
        };
        let Some(first) = requests.first().and_then(kind) else {
            return 0;
        };
        let mut keys = std::collections::HashSet::new();
        requests
            .iter()
            .take_while(|args| {
                kind(args) == Some(first)
                    && check_args(if first { "SET" } else { "GET" }, &args[1..]).is_none()
                    && (!first || keys.insert(args[1].clone()))
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
                let refused = check_args(name, args);
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
                if let Some(reply) = check_args(name, args) {
                    return reply;
                }
                let mut tx = ctx.db.start_transaction();
                commands::run(ctx, &mut tx, Mode::AUTOCOMMIT, name, args)
                    .await
                    .unwrap_or_else(|e| ndb_error(&e))
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

/// Runs a batch from `Session::batchable_run` in one transaction and one execute.
async fn run_batch(ctx: Context<'_>, requests: &[Vec<Bytes>]) -> Vec<Reply> {
    let mut tx = ctx.db.start_transaction();
    let is_set = requests[0][0].eq_ignore_ascii_case(b"SET");
    if is_set {
        let pairs: Vec<(Bytes, Bytes)> = requests
            .iter()
            .map(|r| (r[1].clone(), r[2].clone()))
            .collect();
        return match commands::set_many(ctx, &mut tx, &pairs).await {
            Ok(()) => vec![Reply::Simple("OK"); requests.len()],
            Err(e) => vec![ndb_error(&e); requests.len()],
        };
    }
    let keys: Vec<Bytes> = requests.iter().map(|r| r[1].clone()).collect();
    match commands::get_many(ctx, &mut tx, &keys).await {
        Ok(replies) => replies,
        Err(e) => vec![ndb_error(&e); requests.len()],
    }
}

/// EXEC: every queued command in one rndb transaction, committed at the end. An NDB error
/// aborts the transaction and discards every command's effect.
async fn exec(ctx: Context<'_>, queued: Queued) -> Reply {
    let mut tx = ctx.db.start_transaction();
    let mut replies = Vec::with_capacity(queued.len());
    for (name, args) in &queued {
        match commands::run(ctx, &mut tx, Mode::IN_MULTI, name, args).await {
            Ok(reply) => replies.push(reply),
            Err(e) => return exec_abort(&e),
        }
    }
    match tx.execute(ExecType::Commit).await {
        Ok(()) => Reply::Array(replies),
        Err(e) => exec_abort(&e),
    }
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
    format!(
        "# Server\r\nredis_version:7.0.0\r\nredis_mode:standalone\r\nrndb_gateway:rndb-redis \
         {}\r\nrndb_api_node_id:{}\r\nrndb_data_nodes:{}\r\nrndb_no_of_replicas:{}\r\n\
         \r\n# Keyspace\r\n",
        env!("CARGO_PKG_VERSION"),
        cluster.node_id().0,
        cluster.config().data_nodes.len(),
        cluster.config().no_of_replicas,
    )
}
