//! NDB's connectstring: `[nodeid=N,]host[:port][,host[:port]]...`, the management servers a
//! node asks for its config, in the order it tries them (port 1186 when not given).

use std::fmt;

use rndb_config::ClusterConfig;

/// ndb_mgmd's port when neither the connectstring nor the `[ndb_mgmd]` section names one.
pub const DEFAULT_PORT: u16 = 1186;

/// A parsed connectstring.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConnectString {
    /// `nodeid=N`: the node id this process asks for.
    pub node_id: Option<u16>,
    /// Management servers, in the order they are tried.
    pub servers: Vec<MgmAddress>,
}

/// One management server: a host name or address, and a port.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MgmAddress {
    pub host: String,
    pub port: u16,
}

impl fmt::Display for MgmAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

impl fmt::Display for ConnectString {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts: Vec<String> = Vec::new();
        if let Some(id) = self.node_id {
            parts.push(format!("nodeid={id}"));
        }
        parts.extend(self.servers.iter().map(ToString::to_string));
        f.write_str(&parts.join(","))
    }
}

impl ConnectString {
    /// Parses `text`; an error says which part is wrong and what was expected.
    pub fn parse(text: &str) -> Result<ConnectString, String> {
        let mut node_id = None;
        let mut servers = Vec::new();
        for part in text.split([',', ';']).map(str::trim) {
            if part.is_empty() {
                continue;
            }
            match part.split_once('=') {
                Some((key, value)) if key.trim().eq_ignore_ascii_case("nodeid") => {
                    let id = value
                        .trim()
                        .parse::<u16>()
                        .ok()
                        .filter(|id| (1..=255).contains(id))
                        .ok_or_else(|| {
                            format!("connectstring {text:?}: nodeid={value} is not a node id (1..255)")
                        })?;
                    node_id = Some(id);
                }
                Some((key, value)) if key.trim().eq_ignore_ascii_case("host") => {
                    servers.push(parse_host(text, value.trim())?);
                }
                Some((key, _)) => {
                    return Err(format!(
                        "connectstring {text:?}: unknown setting {key:?} (known: nodeid=N, host=H[:P], or H[:P])"
                    ))
                }
                None => servers.push(parse_host(text, part)?),
            }
        }
        if servers.is_empty() {
            return Err(format!(
                "connectstring {text:?} names no management server (expected host[:port], e.g. localhost:1186)"
            ));
        }
        Ok(ConnectString { node_id, servers })
    }
}

/// One management server of a cluster: its `[ndb_mgmd]` NodeId (`None` when the config names
/// no management server and the connectstring's entry is used as is) and where it listens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MgmServer {
    pub node_id: Option<u16>,
    pub address: MgmAddress,
}

impl fmt::Display for MgmServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.node_id {
            Some(id) => write!(f, "ndb_mgmd {id} at {}", self.address),
            None => write!(f, "ndb_mgmd at {}", self.address),
        }
    }
}

impl ConnectString {
    /// Every management server of `config`, in its order: where a data node reports and an API
    /// node says it connected (each server tracks the nodes on its own): a section's HostName
    /// (localhost when not given) and PortNumber; a HostName set empty is reached at the host
    /// of this connectstring's entry with its port, else at the host of its first entry. A
    /// config without `[ndb_mgmd]` sections gives this connectstring's servers.
    pub fn servers_of(&self, config: &ClusterConfig) -> Vec<MgmServer> {
        if config.mgm_nodes.is_empty() {
            return self
                .servers
                .iter()
                .map(|address| MgmServer {
                    node_id: None,
                    address: address.clone(),
                })
                .collect();
        }
        let fallback_host = self
            .servers
            .first()
            .map_or_else(|| "localhost".to_string(), |a| a.host.clone());
        config
            .mgm_nodes
            .iter()
            .map(|node| {
                let host = if node.host_name.is_empty() {
                    self.servers
                        .iter()
                        .find(|a| a.port == node.port_number)
                        .map_or_else(|| fallback_host.clone(), |a| a.host.clone())
                } else {
                    node.host_name.clone()
                };
                MgmServer {
                    node_id: Some(node.node_id.0),
                    address: MgmAddress {
                        host,
                        port: node.port_number,
                    },
                }
            })
            .collect()
    }
}

/// `host`, `host:port`, `[v6]` or `[v6]:port`.
fn parse_host(text: &str, part: &str) -> Result<MgmAddress, String> {
    let (host, port) = if let Some(rest) = part.strip_prefix('[') {
        let (host, after) = rest
            .split_once(']')
            .ok_or_else(|| format!("connectstring {text:?}: {part:?} lacks its closing ']'"))?;
        (host, after.strip_prefix(':'))
    } else {
        match part.split_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (part, None),
        }
    };
    if host.is_empty() || host.contains(char::is_whitespace) {
        return Err(format!(
            "connectstring {text:?}: {part:?} does not name a host"
        ));
    }
    let port = match port {
        None => DEFAULT_PORT,
        Some(p) => p.parse::<u16>().ok().filter(|&p| p != 0).ok_or_else(|| {
            format!(
                "connectstring {text:?}: port {p:?} of {part:?} is not a port number (1..65535)"
            )
        })?,
    };
    Ok(MgmAddress {
        host: host.to_string(),
        port,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(text: &str, expected: &str) {
        let got = match ConnectString::parse(text) {
            Ok(cs) => cs.to_string(),
            Err(e) => format!("error: {e}"),
        };
        assert!(
            got == expected || (expected.starts_with("error: ") && got.contains(&expected[7..])),
            "{text:?}: got {got:?}, expected {expected:?}"
        );
    }

    #[test]
    fn connectstrings_parse_as_ndb_reads_them() {
        check("localhost", "localhost:1186");
        check("127.0.0.1:4000", "127.0.0.1:4000");
        check("nodeid=3,mgm1:1186,mgm2", "nodeid=3,mgm1:1186,mgm2:1186");
        check("host=db1:2000;host=db2", "db1:2000,db2:1186");
        check("[::1]:1200", "[::1]:1200");
        check(" a , b:7 ", "a:1186,b:7");
        check("", "error: names no management server");
        check("nodeid=4", "error: names no management server");
        check("localhost:x", "error: port \"x\"");
        check("localhost:0", "error: is not a port number");
        check("localhost:70000", "error: is not a port number");
        check("nodeid=0,h", "error: is not a node id");
        check("bind=1,h", "error: unknown setting");
        check(":1186", "error: does not name a host");
        check("[::1", "error: lacks its closing");
    }

    fn servers(connectstring: &str, config: &str) -> Vec<String> {
        let config = rndb_config::parse_str(config, std::path::Path::new("config.ini"))
            .expect("a valid config");
        ConnectString::parse(connectstring)
            .expect("a valid connectstring")
            .servers_of(&config)
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    #[test]
    fn every_config_server_is_reported_to() {
        let nodes = "[ndbd default]\nNoOfReplicas=1\n[ndbd]\nNodeId=1\nHostName=127.0.0.1\n";
        let two = format!(
            "{nodes}[ndb_mgmd]\nNodeId=49\nHostName=10.0.0.1\nPortNumber=2000\n\
             [ndb_mgmd]\nNodeId=48\nPortNumber=3000\n"
        );
        // The config's servers, whatever the connectstring names (HostName is localhost
        // when not given, as in NDB).
        assert_eq!(
            servers("mgmhost:3000", &two),
            [
                "ndb_mgmd 49 at 10.0.0.1:2000",
                "ndb_mgmd 48 at localhost:3000"
            ]
        );
        assert_eq!(
            servers("a:1,b", nodes),
            ["ndb_mgmd at a:1", "ndb_mgmd at b:1186"]
        );
    }
}
