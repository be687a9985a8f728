//! `cairn config set|get|rm|dump|show` and `cairn tell osd.N config ...`:
//! options changed while the cluster runs (see
//! [`cairn_config::central`]). `set` and `rm` go to the monitor's
//! database, which every daemon applies with the next map; `tell` changes
//! one running OSD until it stops; `show` asks a daemon what it runs with.

use anyhow::{bail, Context as _, Result};
use cairn_config::central::Who;
use cairn_wire::{MonCommand, OsdAdminCommand};
use clap::Subcommand;
use serde_json::Value;

use crate::admin::{mon_command, osd_request, with_cluster};
use crate::Context;

#[derive(Subcommand)]
pub enum TellCmd {
    /// Change or show the running options of this one daemon.
    #[command(subcommand)]
    Config(TellConfigCmd),
}

#[derive(Subcommand)]
pub enum TellConfigCmd {
    /// Change a runtime option until the daemon stops (not stored).
    Set { key: String, value: String },
    /// The daemon's running options (one, with KEY).
    Show { key: Option<String> },
}

/// `cairn config set WHO KEY VALUE`.
pub fn set(ctx: &Context, who: String, key: String, value: String) -> Result<()> {
    let reply = mon_command(ctx, MonCommand::ConfigSet { who, key, value })?;
    if ctx.json {
        println!("{reply}");
    } else {
        println!(
            "{} {} = {} (map epoch {}; running daemons apply it with that map)",
            text(&reply["who"]),
            text(&reply["key"]),
            text(&reply["value"]),
            reply["epoch"]
        );
    }
    Ok(())
}

/// `cairn config rm WHO KEY`.
pub fn rm(ctx: &Context, who: String, key: String) -> Result<()> {
    who.parse::<Who>()?;
    let reply = mon_command(ctx, MonCommand::ConfigRm { who, key })?;
    if ctx.json {
        println!("{reply}");
    } else {
        println!(
            "removed {} {} (map epoch {})",
            text(&reply["who"]),
            text(&reply["key"]),
            reply["epoch"]
        );
    }
    Ok(())
}

/// `cairn config dump`: every entry of the database.
pub fn dump(ctx: &Context) -> Result<()> {
    let entries = mon_command(ctx, MonCommand::ConfigDump)?;
    if ctx.json {
        println!("{entries}");
        return Ok(());
    }
    let rows = entries.as_array().cloned().unwrap_or_default();
    if rows.is_empty() {
        println!("(no options set at runtime; daemons use their cairn.toml)");
    }
    println!("{:<10} {:<44} VALUE", "WHO", "OPTION");
    for e in rows {
        println!(
            "{:<10} {:<44} {}",
            text(&e["who"]),
            text(&e["key"]),
            text(&e["value"])
        );
    }
    Ok(())
}

/// `cairn config get WHO [KEY]`: the database's entries that apply to WHO
/// (the most specific one for each option), or the one for KEY.
pub fn get(ctx: &Context, who: String, key: Option<String>) -> Result<()> {
    let target: Who = who.parse()?;
    let chain: Vec<String> = match target {
        Who::OsdId(_) => vec!["global".into(), "osd".into(), who.clone()],
        Who::Global => vec!["global".into()],
        other => vec!["global".into(), other.to_string()],
    };
    let entries = mon_command(ctx, MonCommand::ConfigDump)?;
    let mut applying: std::collections::BTreeMap<String, (String, String)> = Default::default();
    for w in &chain {
        for e in entries.as_array().into_iter().flatten() {
            if text(&e["who"]) == *w {
                applying.insert(text(&e["key"]), (w.clone(), text(&e["value"])));
            }
        }
    }
    let section = |k: &str| k.split_once('.').map_or("", |(s, _)| s).to_string();
    applying.retain(|k, _| {
        let s = section(k);
        s == "global" || matches!(target, Who::Global) || target.to_string().starts_with(&s)
    });
    if let Some(key) = key {
        let found = applying
            .iter()
            .find(|(k, _)| **k == key || k.split_once('.').map(|(_, n)| n) == Some(&key));
        let Some((full, (from, value))) = found else {
            let known = cairn_config::options()
                .iter()
                .any(|o| o.key() == key || o.name == key);
            if !known {
                bail!("unknown option '{key}' (see cairn config defaults)");
            }
            bail!("{key} is not set for {who} in the configuration database: its daemons use cairn.toml or the default");
        };
        if ctx.json {
            println!(
                "{}",
                serde_json::json!({ "who": who, "key": full, "value": value, "from": from })
            );
        } else {
            println!("{value}");
        }
        return Ok(());
    }
    if ctx.json {
        let rows: Vec<Value> = applying
            .iter()
            .map(|(k, (from, v))| serde_json::json!({ "key": k, "value": v, "from": from }))
            .collect();
        println!("{}", Value::Array(rows));
    } else {
        for (k, (from, v)) in &applying {
            println!("{k:<44} {v:<16} (set for {from})");
        }
    }
    Ok(())
}

/// `cairn config show WHO [KEY]`: a running daemon's options.
pub fn show(ctx: &Context, who: String, key: Option<String>) -> Result<()> {
    let shown: Value = match who.parse::<Who>()? {
        Who::OsdId(id) => osd_show(ctx, id)?,
        Who::Mon => mon_command(ctx, MonCommand::ConfigShow)?,
        other => bail!(
            "{other} is not one running daemon: name one (osd.N or mon); \
             `cairn config get {other}` lists what the database sets for it"
        ),
    };
    print_shown(ctx, shown, key)
}

fn osd_show(ctx: &Context, id: u32) -> Result<Value> {
    let text = with_cluster(ctx, async |cluster| {
        osd_request(&cluster, id, OsdAdminCommand::ConfigShow).await
    })?;
    serde_json::from_str(&text).context("osd config show reply is not JSON")
}

fn print_shown(ctx: &Context, shown: Value, key: Option<String>) -> Result<()> {
    let mut rows = shown.as_array().cloned().unwrap_or_default();
    if let Some(key) = &key {
        rows.retain(|r| {
            let k = text(&r["key"]);
            k == *key || k.split_once('.').map(|(_, n)| n) == Some(key)
        });
        if rows.is_empty() {
            bail!("unknown option '{key}' for this daemon (see cairn config defaults)");
        }
    }
    if ctx.json {
        match (&key, rows.as_slice()) {
            (Some(_), [one]) => println!("{one}"),
            _ => println!("{}", Value::Array(rows)),
        }
        return Ok(());
    }
    if let (Some(_), [one]) = (&key, rows.as_slice()) {
        println!("{}", text(&one["value"]));
        return Ok(());
    }
    println!("{:<44} {:<24} {:<9} CHANGE", "OPTION", "VALUE", "FROM");
    for r in rows {
        let change = if r["runtime"].as_bool() == Some(true) {
            "runtime"
        } else {
            "restart"
        };
        println!(
            "{:<44} {:<24} {:<9} {change}",
            text(&r["key"]),
            text(&r["value"]),
            text(&r["source"])
        );
    }
    Ok(())
}

/// `cairn tell WHO config set|show`.
pub fn tell(ctx: &Context, who: String, cmd: TellCmd) -> Result<()> {
    let id = match who.parse::<Who>()? {
        Who::OsdId(id) => id,
        other => bail!("tell needs one OSD (osd.N), not {other}; use `cairn config set {other} ...` for every one"),
    };
    let TellCmd::Config(cmd) = cmd;
    match cmd {
        TellConfigCmd::Set { key, value } => {
            let text_reply = with_cluster(ctx, async |cluster| {
                osd_request(&cluster, id, OsdAdminCommand::ConfigSet { key, value }).await
            })?;
            let reply: Value =
                serde_json::from_str(&text_reply).context("osd config set reply is not JSON")?;
            if ctx.json {
                println!("{reply}");
            } else {
                println!(
                    "osd.{id}: {} = {} (until it stops)",
                    text(&reply["key"]),
                    text(&reply["value"])
                );
            }
            Ok(())
        }
        TellConfigCmd::Show { key } => print_shown(ctx, osd_show(ctx, id)?, key),
    }
}

/// A JSON value as plain text (strings without quotes).
fn text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}
