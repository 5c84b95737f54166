//! The config cache (`--config-cache`, on by default as in NDB): the config ndb_mgmd serves,
//! kept as `ndb_<NodeId>_config.ini.1` in its config directory, so that a restarted ndb_mgmd
//! serves the same config as before even if config.ini was edited since. NDB keeps a binary
//! `ndb_<NodeId>_config.bin.<seq>`; rndb keeps the text, which parses to the same config.
//!
//! - Without `--initial` or `--reload`, an existing cache is served and config.ini is not read
//!   (a config.ini that differs is reported with a warning).
//! - `--initial` removes the cache first; `--reload` reads config.ini and replaces the cache
//!   when it differs.

use std::path::{Path, PathBuf};

use anyhow::Context;

/// The cache file of management node `me` in `dir`.
pub fn cache_path(dir: &Path, me: u16) -> PathBuf {
    dir.join(format!("ndb_{me}_config.ini.1"))
}

/// The cached config's text, if there is a cache.
pub fn read(path: &Path) -> anyhow::Result<Option<String>> {
    match std::fs::read(path) {
        Ok(bytes) => String::from_utf8(bytes)
            .map(Some)
            .with_context(|| format!("the config cache {} is not UTF-8", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("read the config cache {}", path.display())),
    }
}

/// Writes the cache: a temporary file, synced, renamed over the old one.
pub fn write(path: &Path, text: &str) -> anyhow::Result<()> {
    let temporary = path.with_extension("tmp");
    let write = || -> std::io::Result<()> {
        use std::io::Write;
        let mut file = std::fs::File::create(&temporary)?;
        file.write_all(text.as_bytes())?;
        file.sync_all()?;
        std::fs::rename(&temporary, path)
    };
    write().with_context(|| format!("write the config cache {}", path.display()))
}

/// `--initial`: removes the cache (absent is fine).
pub fn remove(path: &Path) -> anyhow::Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(e).with_context(|| format!("--initial: remove the config cache {}", path.display()))
        }
        _ => Ok(()),
    }
}
