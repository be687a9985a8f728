//! Hosts on one machine for `cairn cluster up --netns`: a network namespace
//! per CRUSH host, on two networks, as the source documents ran Ceph.
//!
//! | object | name | where | address |
//! |---|---|---|---|
//! | public bridge | `cn<tag>pub` | root namespace | `10.a.b.1/24` (monitor, clients) |
//! | cluster bridge | `cn<tag>clu` | root namespace | none: only OSDs are on it |
//! | host `hK` | namespace `cairn-<tag>-hK` | | |
//! | its public link | veth `cn<tag>hKp` ↔ `public` | bridge ↔ namespace | `10.a.b.(10+K)/24` |
//! | its cluster link | veth `cn<tag>hKc` ↔ `cluster` | bridge ↔ namespace | `10.a.(b+1).(10+K)/24` |
//!
//! `<tag>` is six hex digits hashed from the cluster directory, and
//! `10.a.b.0/23` is chosen (also from the hash) to overlap no route of the
//! root namespace, so several clusters coexist. The plan ([`HostNet`]) is
//! recorded in `cluster.json` before anything is made, and kept after
//! `down`: the cluster's `cairn.toml` holds these addresses, and the next
//! `up` makes the same network again.
//!
//! Cutting a host sets its veths' bridge ends down: its packets are dropped
//! without a reset, as when a cable is pulled (no `tc netem` here; delay
//! and loss are the simulation's). Making fails atomically: whatever was
//! made is removed again. Removing tolerates objects already gone and goes
//! on past failures, so `down` cleans up after any partial `up`.

use std::net::Ipv4Addr;
use std::path::Path;
use std::process::Command;

use anyhow::{bail, Context as _, Result};
use serde::{Deserialize, Serialize};

/// Most hosts a namespaced cluster may have (addresses `.11` to `.210`).
pub const MAX_HOSTS: u32 = 200;

/// Candidate subnets tried before giving up on finding a free one.
const SUBNET_TRIES: u32 = 256;

/// One of a host's two networks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Net {
    Public,
    Cluster,
}

impl Net {
    pub const BOTH: [Net; 2] = [Net::Public, Net::Cluster];

    pub fn name(self) -> &'static str {
        match self {
            Net::Public => "public",
            Net::Cluster => "cluster",
        }
    }
}

/// The network of a namespaced cluster: names and addresses of everything
/// it makes.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct HostNet {
    /// Six hex digits naming every object (`cn<tag>…`, `cairn-<tag>-hK`).
    pub tag: String,
    /// The public network is `10.a.b.0/24`, the cluster network
    /// `10.a.(b+1).0/24`; this holds `[a, b]`.
    pub subnet: [u8; 2],
    /// Hosts `h1` to `hN`.
    pub hosts: u32,
}

impl HostNet {
    /// Plan the network of the cluster in `dir` (canonical) with `hosts`
    /// hosts: its tag and a subnet pair that overlaps no route here.
    pub fn plan(dir: &Path, hosts: u32) -> Result<HostNet> {
        if !(1..=MAX_HOSTS).contains(&hosts) {
            bail!("--netns supports 1 to {MAX_HOSTS} hosts, got {hosts}");
        }
        let hash = fnv1a(dir.as_os_str().as_encoded_bytes());
        let tag = format!("{:06x}", hash & 0xff_ffff);
        let routes = root_routes()?;
        for attempt in 0..u64::from(SUBNET_TRIES) {
            let pick = (hash >> 24).wrapping_add(attempt.wrapping_mul(0x9e37_79b9));
            // 10.100.0.0 to 10.227.254.0, even third octet.
            let subnet = [100 + (pick % 128) as u8, 2 * ((pick / 128) % 128) as u8];
            let net = HostNet {
                tag: tag.clone(),
                subnet,
                hosts,
            };
            let first = u32::from(net.ip(Net::Public, 0));
            if !routes
                .iter()
                .any(|&(n, len)| overlaps((first, 23), (n, len)))
            {
                return Ok(net);
            }
        }
        bail!("no free 10.x.y.0/23 subnet for the host networks (tried {SUBNET_TRIES})")
    }

    pub fn bridge(&self, net: Net) -> String {
        match net {
            Net::Public => format!("cn{}pub", self.tag),
            Net::Cluster => format!("cn{}clu", self.tag),
        }
    }

    /// The namespace of host `hK` (K from 1).
    pub fn namespace(&self, host: u32) -> String {
        format!("cairn-{}-h{host}", self.tag)
    }

    /// The bridge end of host `hK`'s link to `net` (its other end, in the
    /// namespace, is named `public` or `cluster`).
    pub fn veth(&self, host: u32, net: Net) -> String {
        let side = match net {
            Net::Public => 'p',
            Net::Cluster => 'c',
        };
        format!("cn{}h{host}{side}", self.tag)
    }

    /// Host `hK`'s address on `net`; host 0 is the root namespace's.
    pub fn ip(&self, net: Net, host: u32) -> Ipv4Addr {
        assert!(host <= MAX_HOSTS, "host h{host} beyond the plan");
        let [a, b] = self.subnet;
        let third = match net {
            Net::Public => b,
            Net::Cluster => b + 1,
        };
        let last = if host == 0 { 1 } else { 10 + host as u8 };
        Ipv4Addr::new(10, a, third, last)
    }

    /// `net` as `10.a.b.0/24`.
    pub fn network(&self, net: Net) -> String {
        let host = self.ip(net, 0).octets();
        format!("{}.{}.{}.0/24", host[0], host[1], host[2])
    }

    /// Where the monitor listens: the public bridge's address.
    pub fn mon_ip(&self) -> Ipv4Addr {
        self.ip(Net::Public, 0)
    }

    /// Refuse if a route of the root namespace other than this network's
    /// own now overlaps its subnets.
    pub fn check_free(&self) -> Result<()> {
        let first = u32::from(self.ip(Net::Public, 0)) & !0xff;
        let out = ip_output(&["-4", "route", "show"])?;
        let mine = self.bridge(Net::Public);
        let clash = out
            .lines()
            .filter(|l| !l.split_whitespace().any(|w| w == mine))
            .filter_map(parse_route)
            .any(|route| overlaps((first, 23), route));
        if clash {
            bail!(
                "this cluster's networks {}/23 now overlap a route of this machine; \
                 remove that network or make the cluster in another directory",
                Ipv4Addr::from(first)
            );
        }
        Ok(())
    }

    /// Does everything of this network exist?
    pub fn is_complete(&self) -> Result<bool> {
        let names = link_names()?;
        let namespaces = namespace_names()?;
        let bridges = Net::BOTH.iter().all(|&n| names.contains(&self.bridge(n)));
        let hosts = (1..=self.hosts).all(|h| {
            namespaces.contains(&self.namespace(h))
                && Net::BOTH.iter().all(|&n| names.contains(&self.veth(h, n)))
        });
        Ok(bridges && hosts)
    }

    /// Does anything named like this network's objects exist?
    pub fn any_exists(&self) -> Result<bool> {
        let prefix = format!("cn{}", self.tag);
        let ns_prefix = format!("cairn-{}-", self.tag);
        Ok(link_names()?.iter().any(|n| n.starts_with(&prefix))
            || namespace_names()?.iter().any(|n| n.starts_with(&ns_prefix)))
    }

    /// Make the bridges, namespaces and links; on failure remove whatever
    /// was made.
    pub fn create(&self) -> Result<()> {
        let result = self.try_create();
        if let Err(e) = result {
            let _ = self.remove();
            return Err(e);
        }
        Ok(())
    }

    fn try_create(&self) -> Result<()> {
        for net in Net::BOTH {
            let bridge = self.bridge(net);
            ip(&["link", "add", &bridge, "type", "bridge"])?;
            if net == Net::Public {
                let addr = format!("{}/24", self.mon_ip());
                ip(&["addr", "add", &addr, "dev", &bridge])?;
            }
            ip(&["link", "set", &bridge, "up"])?;
        }
        for host in 1..=self.hosts {
            let ns = self.namespace(host);
            ip(&["netns", "add", &ns])?;
            ip(&["-n", &ns, "link", "set", "lo", "up"])?;
            for net in Net::BOTH {
                let (outer, inner) = (self.veth(host, net), net.name());
                ip(&[
                    "link", "add", &outer, "type", "veth", "peer", "name", inner, "netns", &ns,
                ])?;
                ip(&["link", "set", &outer, "master", &self.bridge(net), "up"])?;
                let addr = format!("{}/24", self.ip(net, host));
                ip(&["-n", &ns, "addr", "add", &addr, "dev", inner])?;
                ip(&["-n", &ns, "link", "set", inner, "up"])?;
            }
        }
        Ok(())
    }

    /// Remove every link, namespace and bridge of this network that
    /// exists (the OSDs inside must be stopped first). Goes on past
    /// failures; returns how many objects it removed, or the failures.
    pub fn remove(&self) -> Result<usize> {
        let links = link_names()?;
        let namespaces = namespace_names()?;
        let mut removed = 0;
        let mut failures = Vec::new();
        let mut del = |args: &[&str]| match ip(args) {
            Ok(()) => removed += 1,
            // Gone meanwhile (a namespace's links go with it, later).
            Err(e) if format!("{e:#}").contains("Cannot find device") => {}
            Err(e) => failures.push(format!("{e:#}")),
        };
        // Veths first: deleting one end deletes both at once, while a
        // deleted namespace lets go of its links only some time later.
        for host in 1..=self.hosts {
            for net in Net::BOTH {
                let veth = self.veth(host, net);
                if links.contains(&veth) {
                    del(&["link", "del", &veth]);
                }
            }
        }
        for host in 1..=self.hosts {
            let ns = self.namespace(host);
            if namespaces.contains(&ns) {
                del(&["netns", "del", &ns]);
            }
        }
        for net in Net::BOTH {
            let bridge = self.bridge(net);
            if links.contains(&bridge) {
                del(&["link", "del", &bridge]);
            }
        }
        if !failures.is_empty() {
            bail!(
                "could not remove all of the host network: {}",
                failures.join("; ")
            );
        }
        Ok(removed)
    }

    /// Set host `hK`'s link to `net` down (cut) or up (heal), at its
    /// bridge end.
    pub fn set_link(&self, host: u32, net: Net, up: bool) -> Result<()> {
        let state = if up { "up" } else { "down" };
        ip(&["link", "set", &self.veth(host, net), state])
    }

    /// Is host `hK`'s link to `net` up (administratively, at the bridge)?
    pub fn link_is_up(&self, host: u32, net: Net) -> Result<bool> {
        let out = ip_output(&["-o", "link", "show", "dev", &self.veth(host, net)])?;
        let flags = out.split(['<', '>']).nth(1).unwrap_or("");
        Ok(flags.split(',').any(|f| f == "UP"))
    }
}

/// Refuse `--netns` here unless this process can make namespaces.
pub fn check_usable() -> Result<()> {
    if unsafe { libc::geteuid() } != 0 {
        bail!("--netns needs root: it makes network namespaces, bridges and veth pairs");
    }
    match Command::new("ip").args(["netns", "list"]).output() {
        Ok(out) if out.status.success() => Ok(()),
        Ok(out) => bail!(
            "--netns needs `ip netns`, which fails here: {}",
            first_line(&out.stderr)
        ),
        Err(e) => bail!("--netns needs the `ip` command (iproute2): {e}"),
    }
}

/// Run `ip ARGS`; an error names the command and `ip`'s message.
fn ip(args: &[&str]) -> Result<()> {
    ip_output(args).map(|_| ())
}

fn ip_output(args: &[&str]) -> Result<String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .context("cannot run `ip` (iproute2)")?;
    if !out.status.success() {
        bail!(
            "`ip {}` failed: {}",
            args.join(" "),
            first_line(&out.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn first_line(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    text.lines().next().unwrap_or("").trim().to_string()
}

/// Names of the links in the root namespace.
fn link_names() -> Result<Vec<String>> {
    let out = ip_output(&["-o", "link", "show"])?;
    // "7: name@peer: <FLAGS> ..." → name
    Ok(out
        .lines()
        .filter_map(|l| l.split(": ").nth(1))
        .map(|n| n.split('@').next().unwrap_or(n).to_string())
        .collect())
}

fn namespace_names() -> Result<Vec<String>> {
    let out = ip_output(&["netns", "list"])?;
    // "name (id: 3)" or "name"
    Ok(out
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect())
}

/// The IPv4 networks the root namespace routes (without the default
/// route), as (network, prefix length).
fn root_routes() -> Result<Vec<(u32, u8)>> {
    let out = ip_output(&["-4", "route", "show"])?;
    Ok(out.lines().filter_map(parse_route).collect())
}

fn parse_route(line: &str) -> Option<(u32, u8)> {
    let dest = line.split_whitespace().next()?;
    let (addr, len) = match dest.split_once('/') {
        Some((a, l)) => (a, l.parse().ok()?),
        None => (dest, 32),
    };
    let addr: Ipv4Addr = addr.parse().ok()?;
    (len <= 32).then_some((u32::from(addr), len))
}

/// Do two IPv4 networks share an address?
fn overlaps(a: (u32, u8), b: (u32, u8)) -> bool {
    let len = a.1.min(b.1);
    if len == 0 {
        return true;
    }
    let shift = 32 - u32::from(len);
    (a.0 >> shift) == (b.0 >> shift)
}

/// FNV-1a, 64 bits: a stable hash of the cluster directory.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn net() -> HostNet {
        HostNet {
            tag: "abc123".into(),
            subnet: [120, 8],
            hosts: 3,
        }
    }

    #[test]
    fn names_fit_the_kernel_limit_and_addresses_the_plan() {
        let n = HostNet {
            hosts: MAX_HOSTS,
            ..net()
        };
        for host in [1, MAX_HOSTS] {
            for net in Net::BOTH {
                assert!(n.veth(host, net).len() <= 15, "{}", n.veth(host, net));
            }
        }
        assert!(n.bridge(Net::Cluster).len() <= 15);
        assert_eq!(n.mon_ip(), Ipv4Addr::new(10, 120, 8, 1));
        assert_eq!(n.ip(Net::Public, 2), Ipv4Addr::new(10, 120, 8, 12));
        assert_eq!(n.ip(Net::Cluster, 2), Ipv4Addr::new(10, 120, 9, 12));
        assert_eq!(
            n.ip(Net::Cluster, MAX_HOSTS),
            Ipv4Addr::new(10, 120, 9, 210)
        );
        assert_eq!(n.namespace(3), "cairn-abc123-h3");
        assert_eq!(n.veth(3, Net::Public), "cnabc123h3p");
    }

    #[test]
    fn routes_parse_and_overlap() {
        assert_eq!(
            parse_route("10.0.2.0/24 dev eth0 proto kernel scope link src 10.0.2.15"),
            Some((u32::from(Ipv4Addr::new(10, 0, 2, 0)), 24))
        );
        assert_eq!(parse_route("default via 10.0.2.2 dev eth0"), None);
        assert_eq!(
            parse_route("192.0.2.7 dev eth0"),
            Some((u32::from(Ipv4Addr::new(192, 0, 2, 7)), 32))
        );
        let ten_8 = (u32::from(Ipv4Addr::new(10, 0, 0, 0)), 8);
        let ours = (u32::from(Ipv4Addr::new(10, 120, 8, 0)), 23);
        let other = (u32::from(Ipv4Addr::new(10, 120, 10, 0)), 24);
        let inside = (u32::from(Ipv4Addr::new(10, 120, 9, 5)), 32);
        assert!(overlaps(ours, ten_8));
        assert!(overlaps(ours, inside));
        assert!(!overlaps(ours, other));
    }

    #[test]
    fn the_tag_follows_the_directory() {
        let a = fnv1a(b"/tmp/cluster-a") & 0xff_ffff;
        let b = fnv1a(b"/tmp/cluster-b") & 0xff_ffff;
        assert_ne!(a, b);
        assert_eq!(a, fnv1a(b"/tmp/cluster-a") & 0xff_ffff);
    }
}
