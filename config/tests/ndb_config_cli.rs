//! Proves that the `ndb_config` binary answers queries like NDB's tool: one line per node,
//! `--connections` with the link kinds, every error of a broken file with exit status 1, and a
//! missing file named as missing, and a reader that closed the pipe early ending it quietly.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn example(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("examples")
        .join(name)
}

fn ndb_config(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ndb_config"))
        .args(args)
        .output()
        .expect("run ndb_config")
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[test]
fn four_nodes_query_prints_one_line_per_data_node() {
    let file = example("four-nodes.ini");
    let file = file.to_str().expect("utf-8 path");
    let output = ndb_config(&[
        "--config-file",
        file,
        "--query=NodeId,HostName,Nodegroup",
        "--type=ndbd",
    ]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let text = stdout(&output);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines,
        [
            "1,127.0.0.1,0",
            "2,127.0.0.1,0",
            "3,127.0.0.1,1",
            "4,127.0.0.1,1"
        ],
        "two node groups of two"
    );
}

#[test]
fn separators_type_aliases_and_node_filter() {
    let file = example("four-nodes.ini");
    let file = file.to_str().expect("utf-8 path");
    let output = ndb_config(&[
        "--config-file",
        file,
        "-q",
        "id,type",
        "--type",
        "db",
        "--fields=:",
        "--rows= ",
    ]);
    assert_eq!(stdout(&output), "1:ndbd 2:ndbd 3:ndbd 4:ndbd ");
    let output = ndb_config(&["--config-file", file, "--query=type,host", "--nodeid", "50"]);
    assert_eq!(stdout(&output), "api,127.0.0.1\n");
}

#[test]
fn connections_on_local_show_shm_between_api_and_data() {
    let file = example("local.ini");
    let file = file.to_str().expect("utf-8 path");
    let output = ndb_config(&["--config-file", file, "--connections"]);
    assert!(output.status.success());
    let text = stdout(&output);
    assert!(text.lines().any(|l| l == "1 2 TCP"), "{text}");
    assert!(text.lines().any(|l| l == "1 50 SHM"), "{text}");
    assert!(text.lines().any(|l| l == "2 51 SHM"), "{text}");
    let output = ndb_config(&[
        "--config-file",
        file,
        "--connections",
        "--query=ShmSize,Checksum",
    ]);
    assert!(
        stdout(&output).lines().any(|l| l == "1 50 SHM 4194304,1"),
        "{}",
        stdout(&output)
    );
}

#[test]
fn a_broken_file_reports_all_three_mistakes_and_fails() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("broken.ini");
    let text = "[ndbd]\nNodeId=1\nNoOfReplicas=1\nDataMemroy=1G\n[ndbd]\nNodeId=1\n\
                [api]\nBatchSize=5000\n";
    std::fs::write(&path, text).expect("write");
    let output = ndb_config(&["--config-file", path.to_str().expect("utf-8 path")]);
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    let shown = path.display().to_string();
    assert!(
        stderr.contains(&format!("{shown}:4: [ndbd] DataMemroy: unknown parameter")),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!(
            "{shown}:6: [ndbd] NodeId: NodeId 1 is already used"
        )),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!(
            "{shown}:8: [api] BatchSize: value 5000 out of range"
        )),
        "{stderr}"
    );
    assert!(stdout(&output).is_empty());
}

#[test]
fn warnings_go_to_stderr_with_a_prefix() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("warn.ini");
    std::fs::write(&path, "[ndbd]\nNoOfReplicas=1\nODirect=1\n").expect("write");
    let output = ndb_config(&[
        "--config-file",
        path.to_str().expect("utf-8 path"),
        "-q",
        "id",
    ]);
    assert!(output.status.success());
    assert_eq!(stdout(&output), "1\n");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.starts_with("warning: ") && stderr.contains("ODirect"),
        "{stderr}"
    );
}

#[test]
fn configinfo_prints_the_table() {
    let output = ndb_config(&["--configinfo"]);
    assert!(output.status.success());
    let text = stdout(&output);
    let line = text
        .lines()
        .find(|l| l.contains("DataMemory"))
        .expect("DataMemory row");
    for word in ["ndbd", "size", "98M", "1M..16T", "yes"] {
        assert!(line.contains(word), "{line}");
    }
    assert!(text
        .lines()
        .any(|l| l.contains("SharedGlobalMemory") && l.contains("no")));
}

#[test]
fn unknown_query_name_fails() {
    let file = example("single.ini");
    let output = ndb_config(&[
        "--config-file",
        file.to_str().expect("utf-8"),
        "--query=Nope",
    ]);
    assert_eq!(output.status.code(), Some(1));
}

#[test]
fn a_missing_file_is_named_as_missing() {
    let dir = tempfile::tempdir().expect("create a temporary directory");
    let missing = dir.path().join("no-such-config.ini");
    let missing = missing.to_str().expect("utf-8 path");
    let output = ndb_config(&["--config-file", missing, "--query=NodeId"]);
    assert!(!output.status.success(), "a missing file must fail");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(&format!("{missing}: the config file does not exist")),
        "stderr: {stderr}"
    );
}

#[test]
fn a_reader_that_closed_the_pipe_ends_it_quietly() {
    // The pipe's read end is closed before ndb_config starts, so its first write fails with
    // EPIPE (Rust programs ignore SIGPIPE), as under `ndb_config ... | head -1` once head left.
    let (reader, writer) = std::io::pipe().expect("make a pipe");
    drop(reader);
    let file = example("local.ini");
    let output = Command::new(env!("CARGO_BIN_EXE_ndb_config"))
        .args([
            "--config-file",
            file.to_str().expect("utf-8 path"),
            "--connections",
        ])
        .stdout(writer)
        .output()
        .expect("run ndb_config");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "exit {:?}: {stderr}",
        output.status
    );
    assert!(stderr.is_empty(), "stderr: {stderr}");
}
