//! `cairn osd tree` and `cairn osd crush ...`: show and change the CRUSH
//! hierarchy and rules, in Ceph's words. The monitor checks and applies
//! every change; this module only parses arguments and prints replies.

use anyhow::{bail, Result};
use cairn_wire::{CrushCommand, MonCommand};
use clap::Subcommand;
use serde_json::Value;

use crate::{admin, output, Context};

#[derive(Subcommand)]
pub enum CrushCmd {
    /// Add an empty bucket: `add-bucket rack1 rack root=default`.
    AddBucket {
        name: String,
        /// A bucket type (host, rack, row, datacenter, root, ...).
        #[arg(value_name = "TYPE")]
        type_name: String,
        /// Where to put it (`type=name` pairs); without one it is a new root.
        #[arg(value_name = "TYPE=NAME")]
        location: Vec<String>,
    },
    /// Move a bucket or an OSD: `move host1 rack=rack1`. Missing buckets in
    /// the location are created, each inside the next one named, so name
    /// the path up to an existing bucket (e.g. `host=h4 root=default`).
    Move {
        /// A bucket name or osd.N.
        name: String,
        #[arg(value_name = "TYPE=NAME")]
        location: Vec<String>,
    },
    /// Remove an empty bucket, or an OSD from the hierarchy (it then gets
    /// no data until it is placed again, e.g. by its next start).
    Rm { name: String },
    /// Set an OSD's CRUSH weight in TiB: `reweight osd.3 1.82`.
    Reweight { name: String, weight: String },
    /// Set the device class of OSDs: `set-device-class ssd osd.0 osd.1`.
    SetDeviceClass {
        class: String,
        #[arg(value_name = "OSD")]
        osds: Vec<String>,
    },
    /// Replicated rules.
    #[command(subcommand)]
    Rule(RuleCmd),
}

#[derive(Subcommand)]
pub enum RuleCmd {
    /// `create-replicated NAME ROOT TYPE [CLASS]`: replicas on distinct
    /// TYPEs under ROOT, only on devices of CLASS if given.
    CreateReplicated {
        name: String,
        root: String,
        #[arg(value_name = "TYPE")]
        failure_domain: String,
        class: Option<String>,
    },
    /// List the rules and the pools using them.
    Ls,
}

/// `cairn osd tree`.
pub fn tree(ctx: &Context) -> Result<()> {
    let value = admin::mon_command(ctx, MonCommand::OsdTree)?;
    if ctx.json {
        println!("{value}");
    } else {
        output::print_tree(&value);
    }
    Ok(())
}

/// `cairn osd crush ...`.
pub fn run(ctx: &Context, cmd: CrushCmd) -> Result<()> {
    let is_rule_ls = matches!(cmd, CrushCmd::Rule(RuleCmd::Ls));
    let command = match cmd {
        CrushCmd::AddBucket {
            name,
            type_name,
            location,
        } => CrushCommand::AddBucket {
            name,
            type_name,
            location: location.join(" "),
        },
        CrushCmd::Move { name, location } => CrushCommand::Move {
            name,
            location: location.join(" "),
        },
        CrushCmd::Rm { name } => CrushCommand::Rm { name },
        CrushCmd::Reweight { name, weight } => CrushCommand::Reweight { name, weight },
        CrushCmd::SetDeviceClass { class, osds } => {
            if osds.is_empty() {
                bail!("name at least one OSD: set-device-class {class} osd.N ...");
            }
            CrushCommand::SetDeviceClass { class, names: osds }
        }
        CrushCmd::Rule(RuleCmd::CreateReplicated {
            name,
            root,
            failure_domain,
            class,
        }) => CrushCommand::RuleCreateReplicated {
            name,
            root,
            failure_domain,
            class,
        },
        CrushCmd::Rule(RuleCmd::Ls) => CrushCommand::RuleLs,
    };
    let value = admin::mon_command(ctx, MonCommand::OsdCrush(command))?;
    if ctx.json {
        println!("{value}");
    } else if is_rule_ls {
        output::print_rules(&value);
    } else {
        println!("{}", describe(&value));
    }
    Ok(())
}

/// One line saying what a CRUSH change did.
fn describe(v: &Value) -> String {
    let s = |v: &Value| v.as_str().map_or_else(|| v.to_string(), str::to_string);
    let unchanged = v["changed"] == false;
    if let Some(name) = v.get("added") {
        format!(
            "added bucket {} ({}, id {})",
            s(name),
            s(&v["type"]),
            v["id"]
        )
    } else if let Some(name) = v.get("moved") {
        let verb = if unchanged {
            "is already at"
        } else {
            "moved to"
        };
        format!("{} {verb} {}", s(name), s(&v["location"]))
    } else if let Some(name) = v.get("removed") {
        format!("removed {}", s(name))
    } else if let Some(name) = v.get("reweighted") {
        format!("{}: crush weight {}", s(name), v["crush_weight"])
    } else if let Some(class) = v.get("class").filter(|_| v.get("osds").is_some()) {
        let osds: Vec<String> = v["osds"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|o| format!("osd.{o}"))
            .collect();
        format!("{}: class {}", osds.join(", "), s(class))
    } else if v.get("steps").is_some() {
        let steps: Vec<String> = v["steps"].as_array().into_iter().flatten().map(s).collect();
        format!(
            "created rule {} (id {}): {}",
            s(&v["name"]),
            v["id"],
            steps.join("; ")
        )
    } else {
        v.to_string()
    }
}
