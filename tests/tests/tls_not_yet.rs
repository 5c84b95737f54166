//! Proves that `ndbd` refuses, with a message that says so, what asks for TLS before TLS is
//! implemented (RequireTls=1, RequireCertificate=1, --ndb-tls-search-path), so no one runs plain
//! TCP believing it encrypted; and that a config file that is not UTF-8 is named by line.

use std::path::Path;
use std::process::Command;

use rndb_tests::ndbd_path;

/// Runs `ndbd --config-file <config> --ndb-nodeid 1 <extra>` and returns its stderr; asserts
/// that it failed (it must not start).
fn ndbd_fails(config: &Path, extra: &[&str]) -> String {
    let output = Command::new(ndbd_path().expect("find ndbd"))
        .arg("--config-file")
        .arg(config)
        .args(["--ndb-nodeid", "1"])
        .args(extra)
        .output()
        .expect("run ndbd");
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(!output.status.success(), "ndbd started: {stderr}");
    stderr
}

fn write(dir: &Path, bytes: &[u8]) -> std::path::PathBuf {
    let path = dir.join("config.ini");
    std::fs::write(&path, bytes).expect("write the config");
    path
}

#[test]
fn require_tls_is_refused_at_its_line() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let config = write(
        dir.path(),
        b"[ndbd default]\nNoOfReplicas=1\n[ndbd]\nNodeId=1\nHostName=127.0.0.1\nRequireTls=1\n[api]\n",
    );
    let stderr = ndbd_fails(&config, &[]);
    assert!(
        stderr.contains(&format!("{}:6: [ndbd] RequireTls:", config.display()))
            && stderr.contains("TLS between nodes is not implemented yet"),
        "{stderr}"
    );
}

#[test]
fn a_tls_search_path_is_refused() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let config = write(
        dir.path(),
        b"[ndbd default]\nNoOfReplicas=1\n[ndbd]\nNodeId=1\nHostName=127.0.0.1\n[api]\n",
    );
    let stderr = ndbd_fails(&config, &["--ndb-tls-search-path", "/etc/ndb-tls"]);
    assert!(
        stderr.contains(
            "--ndb-tls-search-path=/etc/ndb-tls: TLS between nodes is not implemented yet"
        ),
        "{stderr}"
    );
}

#[test]
fn a_config_that_is_not_utf8_is_named_by_line() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let config = write(
        dir.path(),
        b"[ndbd default]\nNoOfReplicas=1\n[ndbd]\nNodeId=1\n# r\xe9serv\xe9\nHostName=127.0.0.1\n",
    );
    let stderr = ndbd_fails(&config, &[]);
    assert!(
        stderr.contains(&format!(
            "{}:5: not UTF-8: byte 4 of the line is 0xe9",
            config.display()
        )),
        "{stderr}"
    );
    assert!(
        !stderr.contains("stream did not contain valid UTF-8"),
        "{stderr}"
    );
}
