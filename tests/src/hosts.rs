//! [`Hosts`]: separate hosts on this machine, each a network namespace with an address of its
//! own, for tests of a cluster whose nodes' HostNames differ.
//!
//! The hosts hang off one bridge in the test's own namespace, which has an address on their
//! subnet too, so the test process reaches every host, and the hosts reach each other, by
//! address. A host has its own loopback and port space: only its own address and 127.0.0.1
//! exist in it. Everything is made with `ip` (iproute2) and needs root; dropping [`Hosts`]
//! deletes the namespaces and the bridge (their veth pairs go with them), also when a test
//! panics. Kill the processes inside first: a namespace with a process in it lives on until
//! that process exits. What a killed test process left behind is deleted by the next
//! [`Hosts::new`]: every name carries the pid of the process that made it.

use std::net::Ipv4Addr;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;

use anyhow::{bail, Context, Result};

/// The most hosts one [`Hosts`] makes (their addresses are `.1` to `.HOSTS_MAX`).
pub const HOSTS_MAX: u8 = 32;
/// The last octet of the test process's address on the bridge.
const BRIDGE_HOST_OCTET: u8 = 254;
/// Sets of hosts made by this process, for names and subnets that do not collide.
static MADE: AtomicU32 = AtomicU32::new(0);
/// Held while a set chooses its subnet and claims it, so two sets of this process never pick
/// the same one.
static CHOOSING: Mutex<()> = Mutex::new(());
/// The /24 subnets in 198.18.0.0/15.
const SUBNETS: u32 = 512;

/// Hosts made by [`Hosts::new`], removed when dropped.
#[derive(Debug)]
pub struct Hosts {
    /// Names everything this set makes: the bridge, the namespaces and the veth ends.
    tag: String,
    /// The subnet's first three octets.
    subnet: [u8; 3],
    /// Namespaces made so far (all of them once `new` returns).
    count: u8,
    /// The bridge exists.
    bridge: bool,
}

impl Hosts {
    /// Makes `count` hosts (1 ..= [`HOSTS_MAX`]) on a fresh /24 in 198.18.0.0/15, the range set
    /// aside for benchmarking networks. Fails with the `ip` command's message, for instance when
    /// the process is not root.
    pub fn new(count: u8) -> Result<Hosts> {
        if count == 0 || count > HOSTS_MAX {
            bail!("{count} hosts asked for; 1 to {HOSTS_MAX} can be made");
        }
        let made = MADE.fetch_add(1, Ordering::Relaxed);
        let pid = std::process::id();
        reap_leftovers();
        // Names carry the pid (the tag's upper bits), so they differ between live processes,
        // and `reap_leftovers` can tell a dead process's; the low byte counts this process's
        // sets (a 257th set at once would clash with the first, and `ip` would refuse it).
        // Interface names have at most 15 bytes: "rn" + 8 hex digits + "v" + 2 digits.
        let tag = format!("rn{:08x}", pid.wrapping_shl(8) | (made & 0xff));
        let mut hosts = Hosts {
            tag,
            subnet: [0; 3],
            count: 0,
            bridge: false,
        };
        let bridge = hosts.bridge_name();
        // Netfilter stays out of the bridge: a FORWARD policy of DROP (Docker's) would
        // otherwise drop the traffic between hosts.
        ip(&[
            "link",
            "add",
            &bridge,
            "type",
            "bridge",
            "nf_call_iptables",
            "0",
        ])?;
        hosts.bridge = true;
        {
            // A subnet no interface has: the same /24 on two bridges would route to the first.
            // Sets of this process choose one at a time; another process's choice may still
            // race with this one, which is unlikely with subnets salted by the pid.
            let _choosing = CHOOSING.lock().unwrap_or_else(|e| e.into_inner());
            hosts.subnet = free_subnet(pid.wrapping_mul(7).wrapping_add(made))?;
            let bridge_addr = format!("{}/24", hosts.bridge_address());
            ip(&["addr", "add", &bridge_addr, "dev", &bridge])?;
        }
        ip(&["link", "set", &bridge, "up"])?;
        for host in 1..=count {
            let namespace = hosts.namespace(host);
            ip(&["netns", "add", &namespace])?;
            hosts.count = host;
            let outside = format!("{}v{host:02}", hosts.tag);
            ip(&[
                "link", "add", &outside, "type", "veth", "peer", "name", "eth0", "netns",
                &namespace,
            ])?;
            ip(&["link", "set", &outside, "master", &bridge, "up"])?;
            let addr = format!("{}/24", hosts.address(host));
            ip(&["-n", &namespace, "addr", "add", &addr, "dev", "eth0"])?;
            ip(&["-n", &namespace, "link", "set", "eth0", "up"])?;
            ip(&["-n", &namespace, "link", "set", "lo", "up"])?;
        }
        Ok(hosts)
    }

    /// How many hosts there are: they are numbered 1 ..= count.
    pub fn count(&self) -> u8 {
        self.count
    }

    /// The address of host `host` (1 ..= count).
    pub fn address(&self, host: u8) -> Ipv4Addr {
        let [a, b, c] = self.subnet;
        Ipv4Addr::new(a, b, c, host)
    }

    /// The test process's own address on the hosts' subnet: where its connections come from.
    pub fn bridge_address(&self) -> Ipv4Addr {
        let [a, b, c] = self.subnet;
        Ipv4Addr::new(a, b, c, BRIDGE_HOST_OCTET)
    }

    /// Gives the test process a further address on the hosts' subnet, `.octet` (not one of
    /// the hosts' own, nor 254). The route to the hosts still starts from
    /// [`Hosts::bridge_address`]; a connection comes from this one only if its socket binds it.
    pub fn add_bridge_address(&self, octet: u8) -> Result<Ipv4Addr> {
        if octet == 0 || octet <= HOSTS_MAX || octet >= BRIDGE_HOST_OCTET {
            bail!(
                "{octet}: the further bridge addresses are .{} to .253",
                HOSTS_MAX + 1
            );
        }
        let [a, b, c] = self.subnet;
        let address = Ipv4Addr::new(a, b, c, octet);
        ip(&[
            "addr",
            "add",
            &format!("{address}/24"),
            "dev",
            &self.bridge_name(),
        ])?;
        Ok(address)
    }

    /// The network namespace of host `host`: run a command there with
    /// `ip netns exec <namespace> <command>`.
    pub fn namespace(&self, host: u8) -> String {
        format!("{}h{host:02}", self.tag)
    }

    /// Moves the calling thread onto host `host`: the sockets it opens from now on, and the
    /// threads it spawns, are in that host's network namespace. Meant for a test's own
    /// thread; other threads of the process stay where they are.
    pub fn enter(&self, host: u8) -> Result<()> {
        let path = format!("/run/netns/{}", self.namespace(host));
        let namespace = std::fs::File::open(&path).with_context(|| format!("open {path}"))?;
        nix::sched::setns(namespace, nix::sched::CloneFlags::CLONE_NEWNET)
            .with_context(|| format!("enter the network namespace {path}"))
    }

    fn bridge_name(&self) -> String {
        format!("{}br", self.tag)
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        for host in 1..=self.count {
            if let Err(e) = ip(&["netns", "delete", &self.namespace(host)]) {
                eprintln!("rndb-tests: {e:#}");
            }
        }
        if self.bridge {
            if let Err(e) = ip(&["link", "delete", &self.bridge_name()]) {
                eprintln!("rndb-tests: {e:#}");
            }
        }
    }
}

/// Deletes the namespaces and bridges made by processes that no longer run (a test process
/// killed before its [`Hosts`] dropped). Best effort: what cannot be listed or deleted stays.
fn reap_leftovers() {
    let dead = |name: &str| {
        let Some(hex) = name.strip_prefix("rn").and_then(|rest| rest.get(..8)) else {
            return false;
        };
        u32::from_str_radix(hex, 16)
            .is_ok_and(|tag| !std::path::Path::new(&format!("/proc/{}", tag >> 8)).exists())
    };
    // `ip netns list` prints "name" or "name (id: N)" per line.
    for line in ip(&["netns", "list"]).unwrap_or_default().lines() {
        let name = line.split_whitespace().next().unwrap_or_default();
        if dead(name) {
            let _ = ip(&["netns", "delete", name]);
        }
    }
    // `ip -o link` prints "index: name: <flags> ..." per line.
    for line in ip(&["-o", "link", "show", "type", "bridge"])
        .unwrap_or_default()
        .lines()
    {
        let name = line.split(": ").nth(1).unwrap_or_default();
        if dead(name) {
            let _ = ip(&["link", "delete", name]);
        }
    }
}

/// The first /24 of 198.18.0.0/15 from the `salt`th on (wrapping) that no interface of this
/// namespace has an address in.
fn free_subnet(salt: u32) -> Result<[u8; 3]> {
    for attempt in 0..SUBNETS {
        let n = salt.wrapping_add(attempt) % SUBNETS;
        let subnet = [198, 18 + (n >> 8) as u8, n as u8];
        let [a, b, c] = subnet;
        let subnet_text = format!("{a}.{b}.{c}.0/24");
        if ip(&["-4", "-o", "addr", "show", "to", &subnet_text])?.is_empty() {
            return Ok(subnet);
        }
    }
    bail!("every /24 of 198.18.0.0/15 is in use on this machine")
}

/// Runs `ip` with `args` and returns what it printed, failing with its stderr when it fails.
fn ip(args: &[&str]) -> Result<String> {
    let output = Command::new("ip")
        .args(args)
        .output()
        .context("run ip (iproute2); the hosts need it, and root")?;
    if !output.status.success() {
        bail!(
            "ip {} failed ({}): {}",
            args.join(" "),
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}
