//! Which config a process runs, as the management protocol carries it: the cluster id
//! (`ClusterConfig::cluster_id`, an xxh3 of nodes and links) and a checksum (xxh3) of the
//! config text as served.
//!
//! Several management servers each serve their own copy of config.ini (or its cache); rndb
//! requires them to serve the same text. A data node or API node that fetched its config from
//! one server sends this identity with every report to every server, and the servers send theirs
//! to each other: a server whose config differs refuses the report, saying which differs, rather
//! than mixing two configs in one cluster.

use std::fmt;

use rndb_config::ClusterConfig;

use crate::wire::Message;

/// The identity of a served config.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConfigIdentity {
    /// `ClusterConfig::cluster_id`: differs when the nodes or links differ.
    pub cluster_id: u64,
    /// xxh3 of the config text: differs when anything in the text differs.
    pub checksum: u64,
}

impl fmt::Display for ConfigIdentity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "cluster id {:016x}, config checksum {:016x}",
            self.cluster_id, self.checksum
        )
    }
}

impl ConfigIdentity {
    /// The identity of `text`, which parses to `config`.
    pub fn of(config: &ClusterConfig, text: &str) -> ConfigIdentity {
        ConfigIdentity {
            cluster_id: config.cluster_id(),
            checksum: xxhash_rust::xxh3::xxh3_64(text.as_bytes()),
        }
    }

    /// Adds `clusterid` and `configchecksum` (hex) to `message`.
    pub fn add_to(&self, message: &mut Message) {
        message.push("clusterid", format!("{:016x}", self.cluster_id));
        message.push("configchecksum", format!("{:016x}", self.checksum));
    }

    /// The identity a message carries; `None` when it carries none.
    pub fn from_message(message: &Message) -> Result<Option<ConfigIdentity>, String> {
        let hex = |name: &str| -> Result<Option<u64>, String> {
            message
                .get(name)
                .map(|v| u64::from_str_radix(v, 16).map_err(|_| format!("{name} {v:?} is not hex")))
                .transpose()
        };
        match (hex("clusterid")?, hex("configchecksum")?) {
            (Some(cluster_id), Some(checksum)) => Ok(Some(ConfigIdentity {
                cluster_id,
                checksum,
            })),
            (None, None) => Ok(None),
            _ => Err("clusterid and configchecksum go together".into()),
        }
    }

    /// What differs between `self` (the sender's) and `served` (this server's), for an error.
    pub fn difference(&self, served: &ConfigIdentity) -> &'static str {
        if self.cluster_id != served.cluster_id {
            "its nodes or links differ (another cluster, or a changed config.ini)"
        } else {
            "the same nodes and links, but other settings"
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identity_round_trips_and_absent_is_none() {
        let id = ConfigIdentity {
            cluster_id: 0x0123_4567_89ab_cdef,
            checksum: 7,
        };
        let mut message = Message::new("report");
        id.add_to(&mut message);
        assert_eq!(ConfigIdentity::from_message(&message), Ok(Some(id)));
        assert_eq!(
            ConfigIdentity::from_message(&Message::new("report")),
            Ok(None)
        );
        let half = Message::new("report").field("clusterid", "1");
        assert!(ConfigIdentity::from_message(&half).is_err());
        let bad = Message::new("report")
            .field("clusterid", "xyz")
            .field("configchecksum", "1");
        assert!(ConfigIdentity::from_message(&bad).is_err());
    }
}
