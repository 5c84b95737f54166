//! `ndb_show_tables`: lists the dictionary's objects, like MySQL Cluster's `ndb_show_tables`.
//!
//! One line per table and index, in NDB's layout: `id type state logging database schema
//! name`. rndb's objects are system tables (`SYSTAB_0`, `NDB$EVENTS_0`), user tables, unique
//! hash indexes and ordered indexes, every one Online; user tables are in NDB's default
//! database `TEST_DB`, system tables and indexes in `sys`, all in schema `def` (rndb has one
//! namespace). NDB's options where they map: `-t/--type=N` keeps one object type (1
//! SystemTable, 2 UserTable, 3 UniqueHashIndex, 6 OrderedIndex), `-p/--parsable` prints tab-separated
//! quoted fields without a header, `-l/--loops=N` lists N times, `-u/--unqualified` is
//! accepted (names are never qualified here).

#![forbid(unsafe_code)]

use std::io::Write;
use std::process::ExitCode;

use anyhow::{bail, Context};
use clap::Parser;
use rndb_api::{ListedObject, ObjectKind};
use rndb_tools::{run_main, ConnectArgs};

/// List the tables and indexes of an rndb cluster, like NDB's ndb_show_tables.
#[derive(Debug, Parser)]
#[command(name = "ndb_show_tables", version)]
struct Args {
    #[command(flatten)]
    connect: ConnectArgs,
    /// Only objects of this type: 1 SystemTable, 2 UserTable, 3 UniqueHashIndex, 6
    /// OrderedIndex.
    #[arg(short = 't', long = "type", value_name = "N")]
    object_type: Option<u8>,
    /// Tab-separated fields in single quotes, without a header (for LOAD DATA).
    #[arg(short = 'p', long)]
    parsable: bool,
    /// List this many times.
    #[arg(short = 'l', long, default_value_t = 1, value_name = "N")]
    loops: u32,
    /// Print names unqualified (they always are in rndb).
    #[arg(short = 'u', long)]
    unqualified: bool,
}

fn main() -> ExitCode {
    let args = Args::parse();
    run_main("ndb_show_tables", || run(&args))
}

fn run(args: &Args) -> anyhow::Result<ExitCode> {
    let kind = match args.object_type {
        None => None,
        Some(n) => match ObjectKind::from_u8(n) {
            Some(kind) => Some(kind),
            None => {
                bail!(
                    "--type={n}: rndb has 1 (SystemTable), 2 (UserTable), 3 (UniqueHashIndex), \
                     6 (OrderedIndex)"
                )
            }
        },
    };
    let cluster = args.connect.connect()?;
    for _ in 0..args.loops {
        let objects = cluster.list_tables().context("list tables")?;
        let shown = objects.iter().filter(|o| kind.is_none_or(|k| o.kind == k));
        let mut out = std::io::stdout().lock();
        out.write_all(listing(shown, args.parsable).as_bytes())?;
        out.flush()?;
    }
    Ok(ExitCode::SUCCESS)
}

/// NDB's listing: a header and fixed-width columns, or the parsable form.
fn listing<'a>(objects: impl Iterator<Item = &'a ListedObject>, parsable: bool) -> String {
    let mut out = String::new();
    if !parsable {
        out.push_str(&format!(
            "{:<5} {:<20} {:<8} {:<7} {:<12} {:<8} {}\n",
            "id", "type", "state", "logging", "database", "schema", "name"
        ));
    }
    for object in objects {
        let (logging, database) = match object.kind {
            ObjectKind::SystemTable => ("Yes", "sys"),
            ObjectKind::UserTable => ("Yes", "TEST_DB"),
            ObjectKind::UniqueHashIndex => ("Yes", "sys"),
            ObjectKind::OrderedIndex => ("No", "sys"),
        };
        let fields = [
            object.kind.name(),
            "Online",
            logging,
            database,
            "def",
            &object.name,
        ];
        if parsable {
            let quoted: Vec<String> = fields.iter().map(|f| format!("'{f}'")).collect();
            out.push_str(&format!("{}\t{}\n", object.id, quoted.join("\t")));
        } else {
            out.push_str(&format!(
                "{:<5} {:<20} {:<8} {:<7} {:<12} {:<8} {}\n",
                object.id, fields[0], fields[1], fields[2], fields[3], fields[4], fields[5]
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts() {
        let objects = [
            ListedObject {
                id: 3,
                kind: ObjectKind::UserTable,
                parent_id: 0,
                name: "t1".into(),
            },
            ListedObject {
                id: 5,
                kind: ObjectKind::OrderedIndex,
                parent_id: 3,
                name: "by_x".into(),
            },
        ];
        assert_eq!(
            listing(objects.iter(), false),
            "\
id    type                 state    logging database     schema   name
3     UserTable            Online   Yes     TEST_DB      def      t1
5     OrderedIndex         Online   No      sys          def      by_x
"
        );
        assert_eq!(
            listing(objects.iter(), true),
            "3\t'UserTable'\t'Online'\t'Yes'\t'TEST_DB'\t'def'\t't1'\n\
             5\t'OrderedIndex'\t'Online'\t'No'\t'sys'\t'def'\t'by_x'\n"
        );
    }
}
