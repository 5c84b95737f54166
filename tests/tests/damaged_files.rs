//! Proves that a data node whose files were damaged while it was down never restores wrong data
//! and never panics or hangs: over many random files and offsets (a fixed seed, printed), one
//! flipped bit or a file cut short either leaves a restore of exactly the last saved state, or
//! stops the node with an error that names the damaged file.

use std::path::{Path, PathBuf};
use std::time::Duration;

use rndb_api::{ColumnDef, ColumnType, ExecType, TableDef, Value};
use rndb_config::NodeId;
use rndb_tests::ops::{read_committed, recreate_table};
use rndb_tests::{wait_until, ClusterSpec, TestCluster};

const KEYS: u32 = 20;
const ROUNDS: u32 = 40;
/// Damaged copies tried.
const TRIES: u32 = 32;
/// The random choices' seed (xorshift64*).
const SEED: u64 = 0x5eed_da3a_6ed0_f11e;

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// Every file under `dir`, relative to it, sorted.
fn files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).expect("read a directory").flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if std::fs::metadata(&path).is_ok_and(|m| m.len() > 0) {
                out.push(path.strip_prefix(dir).expect("under dir").to_path_buf());
            }
        }
    }
    out.sort();
    out
}

fn copy_dir(from: &Path, to: &Path) {
    if to.exists() {
        std::fs::remove_dir_all(to).expect("remove the damaged copy");
    }
    for file in files(from) {
        let target = to.join(&file);
        std::fs::create_dir_all(target.parent().expect("a parent")).expect("mkdir");
        std::fs::copy(from.join(&file), &target).expect("copy a file");
    }
}

#[test]
fn a_flipped_bit_or_a_cut_file_restores_the_saved_state_or_names_the_file() {
    let spec = ClusterSpec::new()
        .data_nodes(1)
        .replicas(1)
        .data_node_param("TimeBetweenGlobalCheckpoints", "100")
        .data_node_param("TimeBetweenEpochs", "20")
        .data_node_param("TimeBetweenLocalCheckpoints", "11");
    let mut cluster = TestCluster::start(spec).expect("start the cluster");
    let api = cluster.connect().expect("connect");
    let def = TableDef::new(
        "rounds",
        vec![
            ColumnDef::key("id", ColumnType::UInt32),
            ColumnDef::new("round", ColumnType::UInt32),
        ],
    );
    let table = recreate_table(&api, &def).expect("create the table");
    // Each round rewrites every row in one transaction: a consistent state has one round.
    for round in 0..ROUNDS {
        let mut t = api.start_transaction().expect("start");
        for id in 0..KEYS {
            t.write(&table, &[Value::UInt32(id), Value::UInt32(round)])
                .expect("define a write");
        }
        t.execute(ExecType::Commit).expect("commit a round");
    }
    cluster
        .wait_for_saved_checkpoints(NodeId(1), 2)
        .expect("two global checkpoints are saved");
    let fs = cluster.file_system(NodeId(1));
    drop(api);
    cluster.kill_node(NodeId(1)).expect("SIGKILL");
    let pristine = cluster.dir().join("pristine");
    copy_dir(&fs, &pristine);
    let names = files(&pristine);
    assert!(
        names.iter().any(|n| n.starts_with("LCP")),
        "a local checkpoint was written: {names:?}"
    );
    let mut rng = Rng(SEED);
    let (mut restored, mut refused) = (0, 0);
    for attempt in 0..TRIES {
        copy_dir(&pristine, &fs);
        let file = &names[rng.below(names.len() as u64) as usize];
        let path = fs.join(file);
        let mut bytes = std::fs::read(&path).expect("read the file");
        let offset = rng.below(bytes.len() as u64) as usize;
        let damage = if rng.below(2) == 0 {
            let bit = rng.below(8);
            bytes[offset] ^= 1 << bit;
            format!("bit {bit} of byte {offset} flipped")
        } else {
            bytes.truncate(offset);
            format!("cut to {offset} bytes")
        };
        std::fs::write(&path, &bytes).expect("write the damaged file");
        let what = format!(
            "attempt {attempt} (seed {SEED:#x}): {} {damage}",
            file.display()
        );
        // The node listens before it restores: one that stops on its files may still have
        // accepted the harness's probe.
        let api = cluster
            .restart_stopped_nodes()
            .and_then(|()| cluster.connect());
        match api {
            Ok(api) => {
                let table = api
                    .get_table("rounds")
                    .unwrap_or_else(|e| panic!("{what}: the table is gone: {e}"));
                for id in 0..KEYS {
                    let row = read_committed(&api, &table, &[Value::UInt32(id)])
                        .unwrap_or_else(|e| panic!("{what}: row {id}: {e}"));
                    assert_eq!(
                        row[1],
                        Value::UInt32(ROUNDS - 1),
                        "{what}: row {id} is not the last saved round"
                    );
                }
                drop(api);
                cluster.kill_node(NodeId(1)).expect("SIGKILL");
                restored += 1;
            }
            Err(e) => {
                wait_until("the data node to stop", Duration::from_secs(30), || {
                    Ok((!cluster.is_running(NodeId(1))).then_some(()))
                })
                .unwrap_or_else(|_| panic!("{what}: no connection ({e:#}), yet the node runs"));
                let log = cluster.log(NodeId(1));
                let name = file.to_string_lossy();
                assert!(
                    log.contains(&*name),
                    "{what}: the node stopped without naming {name}:\n{log}"
                );
                assert!(
                    !log.contains("panicked"),
                    "{what}: the node panicked:\n{log}"
                );
                let _ = cluster.kill_node(NodeId(1));
                refused += 1;
            }
        }
    }
    eprintln!("{TRIES} damaged copies: {restored} restored the saved state, {refused} refused");
}
