//! Proves that `ndbd` started with a config file that does not exist says so, naming the file,
//! rather than reporting that the file "has errors".

use std::process::Command;

use rndb_tests::ndbd_path;

#[test]
fn a_missing_config_file_is_named_as_missing() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let missing = dir.path().join("no-such-config.ini");
    let output = Command::new(ndbd_path().expect("find ndbd"))
        .arg("--config-file")
        .arg(&missing)
        .args(["--ndb-nodeid", "1"])
        .output()
        .expect("run ndbd");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "ndbd started: {stderr}");
    assert!(
        stderr.contains(&format!(
            "{}: the config file does not exist",
            missing.display()
        )),
        "{stderr}"
    );
    assert!(!stderr.contains("has errors"), "{stderr}");
}
