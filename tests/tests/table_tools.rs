//! Proves that NDB's table tools work on a running cluster of real processes: a CSV of 100 000
//! rows goes in with `ndb_import --create` and comes back unchanged through `ndb_select_count`
//! and `ndb_select_all` (in scan order and through an ordered index), `ndb_delete_all` empties
//! the table and `ndb_drop_table` drops it; and that bad input to each tool (an unknown flag, a
//! config that names no running cluster, a CSV with wrong field counts, wrong types and bytes
//! that are not UTF-8, a statement outside the DDL subset) gets a clear message that names the
//! line, with every row either committed or reported, an interrupted import included; and that
//! `ndb_perror` prints what an error code means, as NDB's; that ENUM and SET values go in
//! and come out by name; and that `ndb_blob_tool` finds and repairs orphan and missing parts.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use rndb_tests::{binary_path, ClusterSpec, TestCluster};

/// Rows of the round trip.
const ROWS: u32 = 100_000;
/// Rows of the file whose import is interrupted: at one row per round trip, many seconds'
/// worth, so the signal comes long before the end.
const INTERRUPTED_ROWS: u32 = 500_000;

/// Runs the tool `name` with `--config-file <config>` and `args`.
fn tool(name: &str, config: &Path, args: &[&str]) -> Output {
    let exe = binary_path(name).unwrap_or_else(|e| panic!("find {name}: {e:#}"));
    Command::new(exe)
        .arg("--config-file")
        .arg(config)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("run {name}: {e}"))
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// Asserts the tool succeeded, printing its output when not.
fn assert_ok(output: &Output, what: &str) {
    assert!(
        output.status.success(),
        "{what}: {}\nstdout:\n{}\nstderr:\n{}",
        output.status,
        stdout(output),
        stderr(output)
    );
}

/// The row `i` of the round trip as its CSV line: a quoted name holding the separator, a
/// nullable BIGINT that is NULL on every seventh row, a DOUBLE.
fn csv_line(i: u32) -> String {
    let n = if i.is_multiple_of(7) {
        "\\N".to_string()
    } else {
        (i64::from(i) * -3).to_string()
    };
    format!(
        "{i},\"name {i}, the \"\"{}\"\"\",{n},{}\n",
        i % 10,
        f64::from(i) / 8.0
    )
}

/// The same row as `ndb_select_all -D '|' --header=0` prints it.
fn printed_row(i: u32) -> String {
    let n = if i.is_multiple_of(7) {
        "[NULL]".to_string()
    } else {
        (i64::from(i) * -3).to_string()
    };
    format!(
        "{i}|name {i}, the \"{}\"|{n}|{}",
        i % 10,
        f64::from(i) / 8.0
    )
}

/// The data lines of ndb_select_all's output: up to the blank line before `N rows returned`.
fn data_lines(text: &str) -> Vec<&str> {
    text.lines().take_while(|line| !line.is_empty()).collect()
}

const CREATE: &str = "CREATE TABLE tools_rt (id INT UNSIGNED NOT NULL PRIMARY KEY, \
                      name VARCHAR(40) NOT NULL, n BIGINT, x DOUBLE, INDEX by_id (id))";

#[test]
fn round_trip_of_100_000_rows() {
    let cluster = TestCluster::start(ClusterSpec::new().data_memory("64M")).expect("start");
    let config = cluster.config_path();
    let dir = tempfile::tempdir().expect("a directory");
    let csv = dir.path().join("tools_rt.csv");
    let mut text = String::from("id,name,n,x\n");
    for i in 0..ROWS {
        text.push_str(&csv_line(i));
    }
    std::fs::write(&csv, &text).expect("write the CSV");

    let csv_arg = csv.to_str().expect("a UTF-8 path");
    let state_dir = dir.path().to_str().expect("a UTF-8 path");
    let output = tool(
        "ndb_import",
        config,
        &[
            "--create",
            CREATE,
            "--csvopt=cq",
            "--ignore-lines=1",
            "--state-dir",
            state_dir,
            "--stats",
            "TEST_DB",
            csv_arg,
        ],
    );
    assert_ok(&output, "ndb_import");
    let report = stdout(&output);
    assert!(
        report.contains(&format!("job-1 imported {ROWS} rows in ")),
        "{report}"
    );
    assert!(
        report.contains("with success: 1 with failure: 0"),
        "{report}"
    );
    assert!(!dir.path().join("tools_rt.rej").exists(), "no row rejected");

    let output = tool("ndb_select_count", config, &["tools_rt"]);
    assert_ok(&output, "ndb_select_count");
    assert_eq!(
        stdout(&output),
        format!("{ROWS} records in table tools_rt\n")
    );

    // Every row comes back as it went in (scan order is the partitions', so compare as sets).
    let output = tool("ndb_select_all", config, &["-D", "|", "tools_rt"]);
    assert_ok(&output, "ndb_select_all");
    let text = stdout(&output);
    assert!(
        text.starts_with("id|name|n|x\n"),
        "header: {:?}",
        &text[..40]
    );
    assert!(
        text.ends_with(&format!("\n\n{ROWS} rows returned\n")),
        "footer"
    );
    let got: BTreeSet<&str> = data_lines(&text).into_iter().skip(1).collect();
    let expected: Vec<String> = (0..ROWS).map(printed_row).collect();
    assert_eq!(got.len(), ROWS as usize, "distinct rows");
    for row in &expected {
        assert!(got.contains(row.as_str()), "missing row {row:?}");
    }

    // Through the ordered index, descending, without a header: exactly the rows in order.
    let output = tool(
        "ndb_select_all",
        config,
        &["--order=by_id", "-z", "--header=0", "-D", "|", "tools_rt"],
    );
    assert_ok(&output, "ndb_select_all --order");
    let text = stdout(&output);
    let lines = data_lines(&text);
    let descending: Vec<&str> = expected.iter().rev().map(String::as_str).collect();
    assert!(lines == descending, "rows out of order: {:?}", &lines[..3]);

    let output = tool("ndb_delete_all", config, &["tools_rt"]);
    assert_ok(&output, "ndb_delete_all");
    assert_eq!(
        stdout(&output),
        format!("Deleting all from tools_rt...OK ({ROWS} rows deleted)\n")
    );
    let output = tool("ndb_select_count", config, &["tools_rt"]);
    assert_eq!(stdout(&output), "0 records in table tools_rt\n");

    let output = tool("ndb_drop_table", config, &["tools_rt"]);
    assert_ok(&output, "ndb_drop_table");
    assert_eq!(stdout(&output), "Dropping table tools_rt...OK\n");
    let output = tool("ndb_select_count", config, &["tools_rt"]);
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    assert!(stderr(&output).contains("709"), "{}", stderr(&output));
}

/// ENUM and SET columns from a CREATE TABLE: ndb_import reads their names (a SET's members
/// in any order, quoted for the commas) or numbers (an element's, a SET's bits), refuses a name
/// the column lacks naming the line, and ndb_select_all prints the names as MySQL writes them
/// (a SET's members in definition order).
#[test]
fn enum_and_set_values_go_in_and_come_out_by_name() {
    let cluster = TestCluster::start(ClusterSpec::new()).expect("start");
    let config = cluster.config_path();
    let dir = tempfile::tempdir().expect("a directory");
    let csv = dir.path().join("shirts.csv");
    // Line 5 gives numbers: the third element, the first member's bit.
    std::fs::write(&csv, "1,m,\"sale,red\"\n2,l,\n3,xl,red\n4,s,\\N\n5,3,1\n").expect("write");
    let csv_arg = csv.to_str().expect("a UTF-8 path");
    let state_dir = dir.path().to_str().expect("a UTF-8 path");
    let create = "CREATE TABLE shirts (id INT PRIMARY KEY, size ENUM('s','m','l') NOT NULL, \
                  tags SET('red','sale'))";
    let output = tool(
        "ndb_import",
        config,
        &[
            "--create",
            create,
            "--csvopt=cq",
            "--rejects=1",
            "--state-dir",
            state_dir,
            "db",
            csv_arg,
        ],
    );
    assert_ok(&output, "ndb_import");
    let message = stderr(&output);
    let needle = format!("{csv_arg}:3: column size: \"xl\" is not an element of ENUM column size");
    assert!(message.contains(&needle), "no {needle:?} in:\n{message}");
    let output = tool(
        "ndb_select_all",
        config,
        &["--header=0", "-D", "|", "shirts"],
    );
    assert_ok(&output, "ndb_select_all");
    let text = stdout(&output);
    let mut lines = data_lines(&text);
    lines.sort();
    assert_eq!(
        lines,
        ["1|m|red,sale", "2|l|", "4|s|[NULL]", "5|l|red"],
        "{text}"
    );
}

/// A CSV whose lines 3, 5, 7 and 9 are bad: too few fields, a word for a number, bytes that
/// are not UTF-8, and the duplicate of line 1's key. Lines 1, 2, 4, 6, 8 and 10 are good.
fn bad_csv() -> Vec<u8> {
    let mut bytes = Vec::new();
    for line in 1..=10u32 {
        let row: Vec<u8> = match line {
            3 => b"3,only two".to_vec(),
            5 => b"5,five,lots".to_vec(),
            7 => b"7,caf\xe9,7".to_vec(),
            9 => b"1,again,9".to_vec(),
            _ => format!("{line},row {line},{line}").into_bytes(),
        };
        bytes.extend_from_slice(&row);
        bytes.push(b'\n');
    }
    bytes
}

#[test]
fn bad_rows_are_named_by_line_and_nothing_is_loaded_unreported() {
    let cluster = TestCluster::start(ClusterSpec::new()).expect("start");
    let config = cluster.config_path();
    let dir = tempfile::tempdir().expect("a directory");
    let csv = dir.path().join("tools_bad.csv");
    std::fs::write(&csv, bad_csv()).expect("write the CSV");
    let csv_arg = csv.to_str().expect("a UTF-8 path");
    let state_dir = dir.path().to_str().expect("a UTF-8 path");
    let create = "CREATE TABLE tools_bad (id INT NOT NULL PRIMARY KEY, s VARCHAR(16), v INT)";
    let common = ["--fields-terminated-by=,", "--state-dir", state_dir];

    // With room for every reject: the good rows load, each bad one is named with its line.
    let mut args = common.to_vec();
    args.extend(["--create", create, "--rejects=10", "db", csv_arg]);
    let output = tool("ndb_import", config, &args);
    assert_ok(&output, "ndb_import --rejects=10");
    let message = stderr(&output);
    for needle in [
        format!("{csv_arg}:3: 2 fields, table tools_bad has 3 columns"),
        format!("{csv_arg}:5: column v: \"lots\" is not an INT"),
        format!("{csv_arg}:7: column s: not UTF-8 (byte 4 of the field)"),
        format!("{csv_arg}:9: "),
    ] {
        assert!(message.contains(&needle), "no {needle:?} in:\n{message}");
    }
    assert!(
        message.contains("630"),
        "the duplicate's NDB error: {message}"
    );
    let report = stdout(&output);
    assert!(report.contains("job-1 imported 6 rows"), "{report}");
    assert!(report.contains("job-1 rejected 4 rows"), "{report}");
    let rejects = std::fs::read_to_string(dir.path().join("tools_bad.rej")).expect("the .rej");
    let lines: Vec<&str> = rejects.lines().skip(1).collect();
    assert_eq!(lines.len(), 4, "{rejects}");
    for (reject, line) in lines.iter().zip([3, 5, 7, 9]) {
        assert!(
            reject.starts_with(&format!("{csv_arg}\t{line}\t")),
            "{rejects}"
        );
    }
    let output = tool("ndb_select_count", config, &["tools_bad"]);
    assert_eq!(stdout(&output), "6 records in table tools_bad\n");

    // Locking reads, hex integers, and a transactional delete of what loaded.
    let output = tool(
        "ndb_select_all",
        config,
        &["--lock=1", "--nodata", "tools_bad"],
    );
    assert_ok(&output, "ndb_select_all --lock=1 --nodata");
    assert_eq!(stdout(&output), "\n6 rows returned\n");
    let output = tool(
        "ndb_select_all",
        config,
        &["-x", "-h", "0", "-D", ",", "tools_bad"],
    );
    assert_ok(&output, "ndb_select_all -x");
    let text = stdout(&output);
    assert!(
        data_lines(&text).contains(&"H'00000001,row 1,H'00000001"),
        "{text}"
    );
    let output = tool("ndb_delete_all", config, &["-t", "tools_bad"]);
    assert_ok(&output, "ndb_delete_all -t");
    assert_eq!(
        stdout(&output),
        "Deleting all from tools_bad...OK (6 rows deleted)\n"
    );

    // NDB's default --rejects=0: the first bad row stops the import, and the report says how
    // many rows are in the table; the count agrees.
    let mut args = common.to_vec();
    args.extend(["--opbatch=1", "--in-flight=1", "db", csv_arg]);
    let output = tool("ndb_import", config, &args);
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    let message = stderr(&output);
    assert!(
        message.contains(&format!("{csv_arg}:3: 2 fields")),
        "{message}"
    );
    let stop = format!("stopped at {csv_arg}:3: 1 rejected rows, more than --rejects=0 allows");
    assert!(message.contains(&stop), "{message}");
    let committed = message
        .split("the ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse::<u32>().ok())
        .unwrap_or_else(|| panic!("no committed count in {message}"));
    assert_eq!(committed, 2, "{message}");
    let output = tool("ndb_select_count", config, &["tools_bad"]);
    assert_eq!(stdout(&output), "2 records in table tools_bad\n");
}

#[test]
fn bad_command_lines_and_statements_get_clear_messages() {
    let cluster = TestCluster::start(ClusterSpec::new()).expect("start");
    let config = cluster.config_path();
    let tools = [
        "ndb_show_tables",
        "ndb_select_all",
        "ndb_select_count",
        "ndb_delete_all",
        "ndb_drop_table",
        "ndb_create_table",
        "ndb_import",
    ];
    for name in tools {
        let output = tool(name, config, &["--no-such-flag", "x"]);
        assert_eq!(output.status.code(), Some(2), "{name}: {output:?}");
        let message = stderr(&output);
        assert!(message.contains("'--no-such-flag'"), "{name}: {message}");
    }

    // A config file that is not there, and one whose data node does not run.
    let dir = tempfile::tempdir().expect("a directory");
    let missing = dir.path().join("missing.ini");
    let written = ClusterSpec::new()
        .write(dir.path())
        .expect("write a config");
    let create = "CREATE TABLE t (id INT PRIMARY KEY)";
    let csv = dir.path().join("t.csv");
    std::fs::write(&csv, "1\n").expect("write a CSV");
    let csv = csv.to_str().expect("a UTF-8 path");
    let cases: [(&str, Vec<&str>); 7] = [
        ("ndb_show_tables", vec![]),
        ("ndb_select_all", vec!["t"]),
        ("ndb_select_count", vec!["t"]),
        ("ndb_delete_all", vec!["t"]),
        ("ndb_drop_table", vec!["t"]),
        ("ndb_create_table", vec![create]),
        ("ndb_import", vec!["db", csv]),
    ];
    for (name, args) in &cases {
        let output = tool(name, &missing, args);
        assert_eq!(output.status.code(), Some(1), "{name}: {output:?}");
        let message = stderr(&output);
        assert!(message.contains("read config"), "{name}: {message}");
        assert!(message.contains("missing.ini"), "{name}: {message}");
        let output = tool(name, &written.path, args);
        assert_eq!(output.status.code(), Some(1), "{name}: {output:?}");
        let message = stderr(&output);
        assert!(
            message.contains("is data node 1 running?"),
            "{name}: {message}"
        );
    }

    // A config that does not parse: the error names its file and line.
    let broken = dir.path().join("broken.ini");
    std::fs::write(&broken, "[ndbd]\nNodeId=1\nNoSuchParameter=3\n").expect("write");
    let output = tool("ndb_select_count", &broken, &["t"]);
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    let message = stderr(&output);
    assert!(message.contains("broken.ini:3"), "{message}");
    assert!(message.contains("NoSuchParameter"), "{message}");

    // Statements outside the subset are refused before anything is created.
    let output = tool(
        "ndb_create_table",
        config,
        &["CREATE TABLE tools_ddl (id INT PRIMARY KEY, body GEOMETRY)"],
    );
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    let message = stderr(&output);
    assert!(
        message.contains("not supported: type GEOMETRY (column body"),
        "{message}"
    );
    let output = tool(
        "ndb_create_table",
        config,
        &["CREATE TABLE tools_ddl (id INT PRIMARY KEY, v VARCHAR(8) UNIQUE, INDEX (v))"],
    );
    assert_ok(&output, "ndb_create_table");
    assert_eq!(
        stdout(&output),
        "Created table tools_ddl (id 1, 2 columns)\n\
         Created unique hash index v (v)\nCreated ordered index v_2 (v)\n"
            .replace("id 1", &format!("id {}", table_id(&stdout(&output)))),
    );

    // ndb_show_tables lists the table and both indexes, in NDB's layout, and the system table
    // of named events an API node made; -t keeps one type.
    let api = cluster.connect().expect("connect");
    api.create_event(&rndb_api::EventDef::new("tools_ev", "tools_ddl"))
        .expect("create an event");
    let output = tool("ndb_show_tables", config, &[]);
    assert_ok(&output, "ndb_show_tables");
    let text = stdout(&output);
    let header = "id    type                 state    logging database     schema   name";
    assert_eq!(text.lines().next(), Some(header), "{text}");
    for (kind, database, name) in [
        ("UserTable", "TEST_DB", "tools_ddl"),
        ("SystemTable", "sys", "NDB$EVENTS_0"),
        ("UniqueHashIndex", "sys", "v"),
        ("OrderedIndex", "sys", "v_2"),
    ] {
        let found = text.lines().any(|line| {
            let cells: Vec<&str> = line.split_whitespace().collect();
            cells.len() == 7
                && cells[1] == kind
                && cells[2] == "Online"
                && cells[4] == database
                && cells[6] == name
        });
        assert!(found, "no {kind} {name} in:\n{text}");
    }
    let output = tool("ndb_show_tables", config, &["-t", "6", "--parsable"]);
    assert_ok(&output, "ndb_show_tables -t 6 -p");
    let text = stdout(&output);
    assert_eq!(text.lines().count(), 1, "{text}");
    assert!(
        text.ends_with("\t'OrderedIndex'\t'Online'\t'No'\t'sys'\t'def'\t'v_2'\n"),
        "{text}"
    );
    let output = tool("ndb_show_tables", config, &["-t", "1", "--parsable"]);
    assert_ok(&output, "ndb_show_tables -t 1 -p");
    assert!(
        stdout(&output)
            .ends_with("\t'SystemTable'\t'Online'\t'Yes'\t'sys'\t'def'\t'NDB$EVENTS_0'\n"),
        "{output:?}"
    );
    let output = tool("ndb_show_tables", config, &["-t", "2", "--parsable"]);
    assert_ok(&output, "ndb_show_tables -t 2 -p");
    let text = stdout(&output);
    assert_eq!(text.lines().count(), 1, "user tables only: {text}");
    assert!(
        text.ends_with("\t'UserTable'\t'Online'\t'Yes'\t'TEST_DB'\t'def'\t'tools_ddl'\n"),
        "{text}"
    );
    let output = tool("ndb_show_tables", config, &["-t", "4"]);
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    assert!(stderr(&output).contains("--type=4"), "{}", stderr(&output));

    // Two files into one table that --create makes: the first job creates it, both load.
    let (one, two) = (dir.path().join("one.csv"), dir.path().join("two.csv"));
    std::fs::write(&one, "1\n2\n").expect("write");
    std::fs::write(&two, "3\n").expect("write");
    let (one, two) = (one.to_str().expect("UTF-8"), two.to_str().expect("UTF-8"));
    let create = "CREATE TABLE tools_two (id INT PRIMARY KEY)";
    let args = ["--create", create, "--table", "tools_two", "db", one, two];
    let output = tool("ndb_import", config, &args);
    assert_ok(&output, "ndb_import of two files");
    let report = stdout(&output);
    assert!(report.contains("job-2 imported 1 rows"), "{report}");
    assert!(
        report.contains("with success: 2 with failure: 0"),
        "{report}"
    );
    let output = tool("ndb_select_count", config, &["tools_two"]);
    assert_eq!(stdout(&output), "3 records in table tools_two\n");

    // An unknown table is NDB's 709 for every tool that reads one; an unknown index for
    // --order names it.
    for name in [
        "ndb_select_all",
        "ndb_select_count",
        "ndb_delete_all",
        "ndb_drop_table",
    ] {
        let output = tool(name, config, &["tools_no_such_table"]);
        assert_eq!(output.status.code(), Some(1), "{name}: {output:?}");
        assert!(
            stderr(&output).contains("709"),
            "{name}: {}",
            stderr(&output)
        );
    }
    let output = tool("ndb_select_all", config, &["--order=nope", "tools_ddl"]);
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    assert!(
        stderr(&output).contains("--order=nope"),
        "{}",
        stderr(&output)
    );
    let output = tool("ndb_select_all", config, &["--order=v", "tools_ddl"]);
    assert!(stderr(&output).contains("no order"), "{}", stderr(&output));
    let output = tool("ndb_select_all", config, &["--lock=7", "tools_ddl"]);
    assert!(stderr(&output).contains("--lock=7"), "{}", stderr(&output));
}

/// The table id in `Created table T (id N, ...)`.
fn table_id(text: &str) -> String {
    text.split("(id ")
        .nth(1)
        .and_then(|rest| rest.split(',').next())
        .unwrap_or("?")
        .to_string()
}

#[test]
fn an_interrupted_import_says_what_it_committed() {
    let cluster = TestCluster::start(ClusterSpec::new()).expect("start");
    let config = cluster.config_path();
    let dir = tempfile::tempdir().expect("a directory");
    let csv = dir.path().join("tools_int.csv");
    let mut text = String::new();
    for i in 0..INTERRUPTED_ROWS {
        let _ = writeln!(text, "{i}\t{i}");
    }
    std::fs::write(&csv, text).expect("write the CSV");
    let create = "CREATE TABLE tools_int (id INT PRIMARY KEY, v INT NOT NULL)";
    // One row per round trip: slow enough to be interrupted half-way.
    let exe = binary_path("ndb_import").expect("find ndb_import");
    let mut child = Command::new(exe)
        .arg("--config-file")
        .arg(config)
        .args(["--create", create, "--opbatch=1", "--in-flight=1", "db"])
        .arg(&csv)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start ndb_import");
    let child_guard = KillOnDrop(Some(child.id()));

    // Wait (bounded) until rows are arriving, then interrupt.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let output = tool("ndb_select_count", config, &["tools_int"]);
        let text = stdout(&output);
        if output.status.success() && !text.starts_with("0 ") {
            break;
        }
        assert!(Instant::now() < deadline, "no row arrived: {output:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
    signal(child.id(), "INT");
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for ndb_import") {
            break status;
        }
        assert!(Instant::now() < deadline, "ndb_import did not stop");
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut child_guard = child_guard;
    child_guard.0 = None;
    let output = child.wait_with_output().expect("read its output");
    assert_eq!(status.code(), Some(1), "{output:?}");
    let message = stderr(&output);
    let csv_arg = csv.to_str().expect("a UTF-8 path");
    assert!(
        message.contains(&format!("job-1 interrupted after {csv_arg}:")),
        "{message}"
    );
    let committed: u64 = message
        .split("; the ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no committed count in {message}"));
    assert!(
        committed > 0 && committed < u64::from(INTERRUPTED_ROWS),
        "{message}"
    );
    let output = tool("ndb_select_count", config, &["tools_int"]);
    assert_eq!(
        stdout(&output),
        format!("{committed} records in table tools_int\n")
    );
}

/// Kills the process (SIGKILL) when dropped, so that a failing test leaves nothing running.
struct KillOnDrop(Option<u32>);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if let Some(pid) = self.0.take() {
            signal(pid, "KILL");
        }
    }
}

/// Sends signal `name` to process `pid` through kill(1) (the tests have no unsafe code).
fn signal(pid: u32, name: &str) {
    let status = Command::new("kill")
        .arg(format!("-{name}"))
        .arg(pid.to_string())
        .status();
    assert!(
        std::thread::panicking() || status.as_ref().is_ok_and(|s| s.success()),
        "kill -{name} {pid}: {status:?}"
    );
}

#[test]
fn ndb_perror_prints_what_codes_mean_and_refuses_an_unknown_one() {
    let exe = binary_path("ndb_perror").expect("find ndb_perror");
    let run = |args: &[&str]| {
        Command::new(&exe)
            .args(args)
            .output()
            .expect("run ndb_perror")
    };
    let known = run(&["626", "1217", "4012"]);
    assert!(known.status.success(), "{}", stderr(&known));
    assert_eq!(
        stdout(&known),
        "NDB error code 626: Tuple did not exist: Permanent error: No data found\n\
         NDB error code 1217: Out of operation records in local data manager (increase \
         MaxNoOfLocalOperations): Temporary error: Temporary Resource error\n\
         NDB error code 4012: Request ndbd time-out, maybe due to high load or communication \
         problems: Unknown result: Unknown result error\n"
    );
    let silent = run(&["--silent", "299"]);
    assert_eq!(
        stdout(&silent),
        "Operation not allowed or aborted due to single user mode\n"
    );
    // An unknown code is reported, the others still printed, and the status is 1.
    let unknown = run(&["99999", "626"]);
    assert!(!unknown.status.success());
    assert!(
        stderr(&unknown).contains("illegal NDB error code 99999"),
        "{}",
        stderr(&unknown)
    );
    assert!(stdout(&unknown).starts_with("NDB error code 626: "));
    let not_a_code = run(&["x"]);
    assert!(!not_a_code.status.success());
    assert!(
        stderr(&not_a_code).contains("invalid value 'x'"),
        "{}",
        stderr(&not_a_code)
    );
}

/// ndb_blob_tool finds the parts no value needs (a row gone, a value shorter than the part's
/// place), lists them in its dump file and deletes them, leaving every value whole; and finds
/// a part a value needs that its parts table lacks, and writes it again of spaces, so that the
/// value reads back at its length. A column that is not a BLOB or TEXT one, and no action,
/// are refused.
#[test]
fn ndb_blob_tool_finds_and_repairs_orphan_and_missing_parts() {
    use rndb_api::{BlobSize, ColumnDef, ColumnType, ExecType, LockMode, TableDef, Value};
    let cluster = TestCluster::start(ClusterSpec::new()).expect("start");
    let config = cluster.config_path();
    let api = cluster.connect().expect("connect");
    let def = TableDef::new(
        "notes",
        vec![
            ColumnDef::key("id", ColumnType::UInt32),
            ColumnDef::nullable("body", ColumnType::Blob(BlobSize::Blob)),
            ColumnDef::nullable("tag", ColumnType::Text(BlobSize::Tiny)),
        ],
    );
    let table = api.create_table(&def).expect("create");
    let body = |len: usize| -> Vec<u8> { (0..len).map(|i| b'a' + (i % 26) as u8).collect() };
    let row = |id: u32, len: usize| {
        vec![
            Value::UInt32(id),
            Value::Varbinary(body(len)),
            Value::Varchar("t".into()),
        ]
    };
    let (_, parts) = table.blob_parts_tables().pop().expect("body's parts table");
    let part_row = |id: u32, part: u32| {
        vec![
            Value::UInt32(id),
            Value::UInt32(part),
            Value::Varbinary(vec![b'x'; 10]),
        ]
    };
    let mut tx = api.start_transaction().expect("start");
    // Row 1: 5 000 bytes, three parts; row 2: 300 bytes, one part.
    tx.insert(&table, &row(1, 5_000)).expect("insert");
    tx.insert(&table, &row(2, 300)).expect("insert");
    // Orphans: parts of a row that does not exist, and a part past row 2's value.
    tx.insert(&parts, &part_row(9, 0)).expect("insert");
    tx.insert(&parts, &part_row(9, 1)).expect("insert");
    tx.insert(&parts, &part_row(2, 5)).expect("insert");
    // Row 1's middle part goes missing.
    tx.delete(&parts, &[Value::UInt32(1), Value::UInt32(1)])
        .expect("delete");
    tx.execute(ExecType::Commit).expect("commit");

    let dir = tempfile::tempdir().expect("a directory");
    let dump = dir.path().join("orphans.txt");
    let dump_arg = dump.to_str().expect("a UTF-8 path");
    let output = tool(
        "ndb_blob_tool",
        config,
        &[
            "--check-orphans",
            "--dump-file",
            dump_arg,
            "--verbose",
            "notes",
        ],
    );
    assert_ok(&output, "ndb_blob_tool --check-orphans");
    let text = stdout(&output);
    for line in [
        "connected",
        "processing 1 blobs",
        "body: total parts: 6",
        "body: orphan parts: 3",
    ] {
        assert!(
            text.lines().any(|l| l.starts_with(line)),
            "no {line:?} in:\n{text}"
        );
    }
    let mut dumped: Vec<String> = std::fs::read_to_string(&dump)
        .expect("the dump file")
        .lines()
        .map(str::to_string)
        .collect();
    dumped.sort();
    assert_eq!(dumped, ["body\t2\t5", "body\t9\t0", "body\t9\t1"]);

    let output = tool(
        "ndb_blob_tool",
        config,
        &["--delete-orphans", "notes", "body"],
    );
    assert_ok(&output, "ndb_blob_tool --delete-orphans");
    assert!(
        stdout(&output).contains("body: deleted orphan parts: 3"),
        "{}",
        stdout(&output)
    );
    let output = tool("ndb_blob_tool", config, &["--check-orphans", "notes"]);
    assert!(
        stdout(&output).contains("body: orphan parts: 0"),
        "{}",
        stdout(&output)
    );
    let read = |id: u32| {
        let mut tx = api.start_transaction().expect("start");
        let op = tx
            .read(&table, &[Value::UInt32(id)], LockMode::Read)
            .expect("read");
        tx.execute(ExecType::Commit)
            .map(|()| tx.row(op).map(<[Value]>::to_vec))
    };
    assert_eq!(read(2).expect("row 2"), Some(row(2, 300)));
    assert!(read(1).is_err(), "row 1 lacks a part");

    let output = tool("ndb_blob_tool", config, &["--check-missing", "notes"]);
    assert_ok(&output, "ndb_blob_tool --check-missing");
    assert!(
        stdout(&output).contains("body: missing parts: 1"),
        "{}",
        stdout(&output)
    );
    let output = tool("ndb_blob_tool", config, &["--add-missing", "notes"]);
    assert_ok(&output, "ndb_blob_tool --add-missing");
    assert!(
        stdout(&output).contains("body: added missing parts: 1"),
        "{}",
        stdout(&output)
    );
    let mut repaired = body(5_000);
    repaired[2_256..4_256].fill(b' ');
    let mut expected = row(1, 5_000);
    expected[1] = Value::Varbinary(repaired);
    assert_eq!(read(1).expect("row 1 whole again"), Some(expected));

    let output = tool(
        "ndb_blob_tool",
        config,
        &["--check-orphans", "notes", "tag2"],
    );
    assert!(!output.status.success(), "an unknown column");
    assert!(
        stderr(&output).contains("tag2 is not a BLOB or TEXT column of table notes"),
        "{}",
        stderr(&output)
    );
    let output = tool("ndb_blob_tool", config, &["notes"]);
    assert!(!output.status.success(), "no action");
    assert!(
        stderr(&output).contains("nothing to do"),
        "{}",
        stderr(&output)
    );
}
