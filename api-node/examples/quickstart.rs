//! Connects to a running cluster, creates a table, writes and reads a few rows.
//!
//! ```text
//! cargo run --release --bin ndbd -- --config-file config/examples/single.ini --ndb-nodeid 1 &
//! cargo run --release --example quickstart -- config/examples/single.ini
//! ```

use rndb_api::{
    Cluster, ColumnDef, ColumnType, ConnectOptions, ExecType, LockMode, TableDef, Value,
};

fn main() -> Result<(), rndb_api::Error> {
    let config = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "config/examples/single.ini".into());
    let cluster = Cluster::connect(&config, ConnectOptions::default())?;
    println!(
        "connected as API node {} over {}",
        cluster.node_id(),
        cluster.transporter_kind()
    );

    let _ = cluster.drop_table("quickstart");
    let table = cluster.create_table(&TableDef::new(
        "quickstart",
        vec![
            ColumnDef::key("id", ColumnType::UInt32),
            ColumnDef::new("name", ColumnType::Varchar(32)),
            ColumnDef::nullable("score", ColumnType::Float64),
        ],
    ))?;

    let mut tx = cluster.start_transaction()?;
    for id in 0..10u32 {
        tx.insert(
            &table,
            &[
                Value::UInt32(id),
                Value::Varchar(format!("row {id}")),
                Value::Null,
            ],
        )?;
    }
    tx.execute(ExecType::Commit)?;

    let mut tx = cluster.start_transaction()?;
    let ops: Vec<_> = (0..10u32)
        .map(|id| tx.read(&table, &[Value::UInt32(id)], LockMode::CommittedRead))
        .collect::<Result<_, _>>()?;
    tx.execute(ExecType::Commit)?;
    for op in ops {
        println!("{:?}", tx.row(op));
    }
    Ok(())
}
