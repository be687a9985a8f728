//! How many OSDs a local cluster has, on which CRUSH hosts, in which
//! network namespaces: from `up`'s options, checked against the layout the
//! cluster was made with.

use anyhow::{bail, Context as _, Result};
use serde::{Deserialize, Serialize};

use super::netns;

/// The layout options given to `up`.
pub(super) struct LayoutArgs {
    pub(super) osds: Option<u32>,
    pub(super) hosts: Option<u32>,
    pub(super) per_host: Option<u32>,
    pub(super) netns: bool,
    /// `--hdd-osds-per-host`: OSDs per host served as emulated spinning disks.
    pub(super) hdd: Option<u32>,
    /// `--nvme-osds-per-host`: OSDs per host of class nvme.
    pub(super) nvme: Option<u32>,
}

/// How many OSDs, on which CRUSH hosts, in which network namespaces.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub(super) struct Layout {
    pub(super) osds: u32,
    /// `Some(M)`: M OSDs per host `h1`, `h2`, ...; `None`: all on this machine.
    pub(super) per_host: Option<u32>,
    /// Each host in its own network namespace.
    #[serde(default)]
    pub(super) netns: bool,
    /// With hosts: the first this many OSDs of each host are emulated
    /// spinning disks of class hdd, the rest of class nvme (`None`: OSDs
    /// keep the class their device has).
    #[serde(default)]
    pub(super) hdd_per_host: Option<u32>,
}

impl std::fmt::Display for Layout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.per_host {
            None => write!(f, "--osds {}", self.osds),
            Some(m) => {
                match self.hdd_per_host {
                    Some(hdd) => write!(
                        f,
                        "--hosts {} --hdd-osds-per-host {hdd} --nvme-osds-per-host {}",
                        self.osds / m,
                        m - hdd
                    )?,
                    None => write!(f, "--hosts {} --osds-per-host {m}", self.osds / m)?,
                }
                if self.netns {
                    f.write_str(" --netns")?;
                }
                Ok(())
            }
        }
    }
}

impl Layout {
    pub(super) fn new(asked: &LayoutArgs) -> Result<Layout> {
        let Some(hosts) = asked.hosts else {
            if asked.netns {
                bail!("--netns needs --hosts: each host gets its own network namespace");
            }
            let osds = asked.osds.unwrap_or(3);
            if osds == 0 {
                bail!("--osds must be at least 1");
            }
            if asked.hdd.is_some() || asked.nvme.is_some() {
                bail!("--hdd-osds-per-host and --nvme-osds-per-host need --hosts");
            }
            return Ok(Layout {
                osds,
                per_host: None,
                netns: false,
                hdd_per_host: None,
            });
        };
        let classes = asked.hdd.is_some() || asked.nvme.is_some();
        if classes && asked.per_host.is_some() {
            bail!("give either --osds-per-host or --hdd-osds-per-host with --nvme-osds-per-host");
        }
        let hdd_per_host = classes.then(|| asked.hdd.unwrap_or(0));
        let per_host = match classes {
            true => asked.hdd.unwrap_or(0) + asked.nvme.unwrap_or(0),
            false => asked.per_host.unwrap_or(1),
        };
        if hosts == 0 || per_host == 0 {
            bail!("--hosts and --osds-per-host must be at least 1");
        }
        if asked.netns && hosts > netns::MAX_HOSTS {
            bail!("--netns supports at most {} hosts", netns::MAX_HOSTS);
        }
        let total = hosts
            .checked_mul(per_host)
            .filter(|t| *t <= 4096)
            .context("too many OSDs (at most 4096)")?;
        if asked.osds.is_some_and(|n| n != total) {
            bail!(
                "--osds {} does not match --hosts {hosts} x --osds-per-host {per_host}",
                asked.osds.unwrap_or(0)
            );
        }
        Ok(Layout {
            osds: total,
            per_host: Some(per_host),
            netns: asked.netns,
            hdd_per_host,
        })
    }

    /// The layout `up` runs: the one asked for, checked against the one
    /// the cluster was made with. Options left out keep the recorded
    /// layout; a host layout never changes (a flat cluster may grow).
    pub(super) fn resolve(asked: &LayoutArgs, recorded: Option<&Layout>) -> Result<Layout> {
        let Some(was) = recorded else {
            return Layout::new(asked);
        };
        if asked.hosts.is_some() || asked.netns || asked.hdd.is_some() || asked.nvme.is_some() {
            let now = Layout::new(asked)?;
            if now != *was {
                bail!("this cluster was made with {was}; its layout cannot change to {now}");
            }
            return Ok(now);
        }
        match asked.osds {
            None => Ok(was.clone()),
            Some(_) if was.per_host.is_none() => Layout::new(asked),
            Some(n) if n == was.osds => Ok(was.clone()),
            Some(n) => bail!("this cluster was made with {was}; --osds {n} does not match it"),
        }
    }

    /// The CRUSH host of OSD `id` (`hK`), if the layout names hosts.
    pub(super) fn host_of(&self, id: u32) -> Option<String> {
        self.host_number(id).map(|k| format!("h{k}"))
    }

    /// K of the host `hK` of OSD `id`, if the layout names hosts.
    pub(super) fn host_number(&self, id: u32) -> Option<u32> {
        self.per_host.map(|m| id / m + 1)
    }

    /// The device class `up` gives OSD `id` (`hdd`: an emulated spinning
    /// disk), if the layout has classes.
    pub(super) fn class_of(&self, id: u32) -> Option<&'static str> {
        let (hdd, per_host) = (self.hdd_per_host?, self.per_host?);
        Some(if id % per_host < hdd { "hdd" } else { "nvme" })
    }

    /// Failure domains the default rule has: hosts, or OSDs.
    pub(super) fn domains(&self) -> u32 {
        self.per_host.map_or(self.osds, |m| self.osds / m)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn asked(
        osds: Option<u32>,
        hosts: Option<u32>,
        per_host: Option<u32>,
        netns: bool,
    ) -> LayoutArgs {
        LayoutArgs {
            osds,
            hosts,
            per_host,
            netns,
            hdd: None,
            nvme: None,
        }
    }

    #[test]
    fn hdd_and_nvme_osds_per_host() {
        let mut a = asked(None, Some(3), None, false);
        a.hdd = Some(2);
        a.nvme = Some(1);
        let l = Layout::resolve(&a, None).unwrap();
        assert_eq!((l.osds, l.per_host, l.domains()), (9, Some(3), 3));
        let classes: Vec<_> = (0..6).map(|id| l.class_of(id)).collect();
        assert_eq!(
            classes,
            [
                Some("hdd"),
                Some("hdd"),
                Some("nvme"),
                Some("hdd"),
                Some("hdd"),
                Some("nvme")
            ]
        );
        assert_eq!(
            l.to_string(),
            "--hosts 3 --hdd-osds-per-host 2 --nvme-osds-per-host 1"
        );
        // Left out later: the recorded one.
        assert_eq!(
            Layout::resolve(&asked(None, None, None, false), Some(&l)).unwrap(),
            l
        );
        let mut mixed = asked(None, Some(3), Some(2), false);
        mixed.hdd = Some(1);
        assert!(err(&mixed, None).contains("either --osds-per-host"));
        let mut flat = asked(None, None, None, false);
        flat.nvme = Some(1);
        assert!(err(&flat, None).contains("need --hosts"));
        let mut none = asked(None, Some(3), None, false);
        none.hdd = Some(0);
        none.nvme = Some(0);
        assert!(err(&none, None).contains("at least 1"));
        let plain = Layout::resolve(&asked(None, Some(3), Some(2), false), None).unwrap();
        assert_eq!(plain.class_of(0), None);
    }

    fn err(asked: &LayoutArgs, recorded: Option<&Layout>) -> String {
        format!("{:#}", Layout::resolve(asked, recorded).unwrap_err())
    }

    #[test]
    fn a_new_layout_is_checked() {
        let hosts = Layout::resolve(&asked(None, Some(3), Some(2), true), None).unwrap();
        assert_eq!(
            (hosts.osds, hosts.per_host, hosts.netns),
            (6, Some(2), true)
        );
        assert_eq!(hosts.to_string(), "--hosts 3 --osds-per-host 2 --netns");
        assert_eq!(
            (hosts.host_of(5), hosts.host_number(2)),
            (Some("h3".into()), Some(2))
        );
        let flat = Layout::resolve(&asked(None, None, None, false), None).unwrap();
        assert_eq!((flat.osds, flat.domains(), flat.host_of(0)), (3, 3, None));
        assert!(err(&asked(None, None, None, true), None).contains("--netns needs --hosts"));
        assert!(err(&asked(Some(3), Some(2), Some(2), false), None).contains("does not match"));
        assert!(err(&asked(None, Some(201), None, true), None).contains("at most 200 hosts"));
        assert!(err(&asked(Some(0), None, None, false), None).contains("at least 1"));
    }

    #[test]
    fn a_recorded_host_layout_never_changes() {
        let was = Layout::resolve(&asked(None, Some(3), Some(2), true), None).unwrap();
        // Left out or restated: the recorded one.
        for same in [
            asked(None, None, None, false),
            asked(Some(6), None, None, false),
            asked(None, Some(3), Some(2), true),
            asked(Some(6), Some(3), Some(2), true),
        ] {
            assert_eq!(Layout::resolve(&same, Some(&was)).unwrap(), was);
        }
        let changed = err(&asked(None, Some(3), Some(2), false), Some(&was));
        assert_eq!(
            changed,
            "this cluster was made with --hosts 3 --osds-per-host 2 --netns; its layout \
             cannot change to --hosts 3 --osds-per-host 2"
        );
        assert!(err(&asked(None, Some(4), Some(2), true), Some(&was)).contains("cannot change"));
        assert!(err(&asked(Some(8), None, None, false), Some(&was)).contains("--osds 8"));
        // A flat cluster may grow, but not become one of hosts.
        let flat = Layout::resolve(&asked(Some(3), None, None, false), None).unwrap();
        let grown = Layout::resolve(&asked(Some(4), None, None, false), Some(&flat)).unwrap();
        assert_eq!(grown.osds, 4);
        assert!(err(&asked(None, Some(3), None, false), Some(&flat)).contains("cannot change"));
    }
}
