//! `cargo xtask api [--bless]`: the library's public API as a sorted text
//! list (`api/public-api.txt`), so that a change to it shows in review.
//!
//! The list comes from nightly rustdoc's JSON output (`cargo +nightly
//! rustdoc --lib -p ksync --all-features -- -Z unstable-options
//! --output-format json`, the features docs.rs documents), walked from the
//! crate root through public modules and re-exports: one line per public
//! item (`kind path`), per public method, associated constant and type of
//! an inherent impl, and per trait a local type implements (`impl Trait for
//! path`, auto traits included: a type that stops being `Send` is an API
//! change; nightly's internal auto traits are left out). Names only, no signatures: a changed signature of an existing
//! item is left to review and the semver checks of the compiler.
//!
//! `cargo xtask api` compares and prints a diff; `--bless` writes the new
//! list (what to run after an intended change to the API).

use std::collections::BTreeSet;
use std::fs;
use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

use crate::tools::root;

/// The committed list.
pub fn list_path() -> PathBuf {
    root().join("api/public-api.txt")
}

/// Runs rustdoc and returns the current list, one item a line, sorted.
pub fn current() -> Result<String, String> {
    let target_dir = root().join("target/api");
    // `rustup run nightly` picks nightly whatever cargo this driver runs
    // under (as the Miri check does).
    let mut cmd = Command::new("rustup");
    cmd.args([
        "run",
        "nightly",
        "cargo",
        "rustdoc",
        "--quiet",
        "--lib",
        "-p",
        "ksync",
        "--all-features",
        "--",
        "-Z",
        "unstable-options",
        "--output-format",
        "json",
    ])
    .current_dir(root())
    .env_remove("RUSTUP_TOOLCHAIN")
    .env_remove("RUSTC")
    .env_remove("CARGO")
    .env_remove("RUSTFLAGS")
    .env_remove("RUSTDOCFLAGS")
    .env("CARGO_TARGET_DIR", &target_dir);
    let out = cmd
        .output()
        .map_err(|e| format!("cannot run cargo +nightly rustdoc: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "cargo +nightly rustdoc failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let json = target_dir.join("doc/ksync.json");
    let text = fs::read_to_string(&json).map_err(|e| format!("{}: {e}", json.display()))?;
    let doc: Value = serde_json::from_str(&text).map_err(|e| format!("{}: {e}", json.display()))?;
    let lines = walk(&doc)?;
    let mut out = String::new();
    for line in lines {
        out += &line;
        out.push('\n');
    }
    Ok(out)
}

/// Collects the lines, starting at the crate root.
fn walk(doc: &Value) -> Result<BTreeSet<String>, String> {
    let index = doc["index"].as_object().ok_or("rustdoc JSON: no index")?;
    let root_id = id_key(&doc["root"]);
    let mut lines = BTreeSet::new();
    let mut seen = BTreeSet::new();
    module(index, &root_id, "ksync", &mut lines, &mut seen);
    Ok(lines)
}

/// An id as the index's key (ids are numbers in recent formats, strings in
/// older ones).
fn id_key(id: &Value) -> String {
    match id {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// The item's kind (the one key of `inner`) and its body.
fn inner(item: &Value) -> Option<(&str, &Value)> {
    let obj = item["inner"].as_object()?;
    let (kind, body) = obj.iter().next()?;
    Some((kind.as_str(), body))
}

fn is_public(item: &Value) -> bool {
    item["visibility"].as_str() == Some("public")
}

fn module(
    index: &serde_json::Map<String, Value>,
    id: &str,
    path: &str,
    lines: &mut BTreeSet<String>,
    seen: &mut BTreeSet<(String, String)>,
) {
    if !seen.insert((id.to_string(), path.to_string())) {
        return;
    }
    let Some((_, body)) = index.get(id).and_then(inner) else {
        return;
    };
    for child in body["items"].as_array().into_iter().flatten() {
        let key = id_key(child);
        if let Some(item) = index.get(&key) {
            entry(index, &key, item, path, None, lines, seen);
        }
    }
}

fn entry(
    index: &serde_json::Map<String, Value>,
    id: &str,
    item: &Value,
    parent: &str,
    rename: Option<&str>,
    lines: &mut BTreeSet<String>,
    seen: &mut BTreeSet<(String, String)>,
) {
    if !is_public(item) {
        return;
    }
    let Some((kind, body)) = inner(item) else {
        return;
    };
    if kind == "use" {
        let name = body["name"].as_str().unwrap_or("*");
        let source = body["source"].as_str().unwrap_or("?");
        let glob = body["is_glob"].as_bool() == Some(true);
        let path = format!("{parent}::{name}");
        lines.insert(if glob {
            format!("use {parent}::* = {source}::*")
        } else {
            format!("use {path} = {source}")
        });
        // A re-export of a local item (often from a private module) is
        // listed, with its members, under the path it is exported as.
        let target = id_key(&body["id"]);
        if let Some(target_item) = index.get(&target)
            && !glob
        {
            if inner(target_item).is_some_and(|(k, _)| k == "module") {
                module(index, &target, &path, lines, seen);
            } else if seen.insert((target.clone(), path.clone())) {
                entry(index, &target, target_item, parent, Some(name), lines, seen);
            }
        }
        return;
    }
    let Some(name) = rename.or(item["name"].as_str()) else {
        return;
    };
    let path = format!("{parent}::{name}");
    lines.insert(format!("{kind} {path}"));
    match kind {
        "module" => module(index, id, &path, lines, seen),
        "struct" | "enum" | "union" => {
            for variant in body["variants"].as_array().into_iter().flatten() {
                if let Some(v) = index.get(&id_key(variant))
                    && let Some(vname) = v["name"].as_str()
                {
                    lines.insert(format!("variant {path}::{vname}"));
                }
            }
            impls(index, body, &path, lines);
        }
        "trait" => {
            for member in body["items"].as_array().into_iter().flatten() {
                if let Some(m) = index.get(&id_key(member))
                    && let (Some(mname), Some((mkind, _))) = (m["name"].as_str(), inner(m))
                {
                    lines.insert(format!("{mkind} {path}::{mname}"));
                }
            }
        }
        _ => {}
    }
}

/// A type's impls: public members of inherent impls, and the traits it
/// implements (not blanket impls such as `From<T> for T`).
fn impls(
    index: &serde_json::Map<String, Value>,
    body: &Value,
    path: &str,
    lines: &mut BTreeSet<String>,
) {
    for imp in body["impls"].as_array().into_iter().flatten() {
        let Some((_, imp)) = index.get(&id_key(imp)).and_then(inner) else {
            continue;
        };
        if !imp["blanket_impl"].is_null() {
            continue;
        }
        match imp["trait"]["path"].as_str() {
            Some(trait_path) => {
                // The auto traits stable Rust has; nightly's internal ones
                // (`Freeze`, `UnsafeUnpin`) and derive markers change with
                // the nightly, not with ksync.
                let synthetic = imp["is_synthetic"].as_bool() == Some(true);
                let stable_auto = matches!(
                    trait_path,
                    "Send" | "Sync" | "Unpin" | "UnwindSafe" | "RefUnwindSafe"
                );
                if (synthetic && !stable_auto) || trait_path == "StructuralPartialEq" {
                    continue;
                }
                let negative = imp["is_negative"].as_bool() == Some(true);
                let bang = if negative { "!" } else { "" };
                lines.insert(format!("impl {bang}{trait_path} for {path}"));
            }
            None => {
                for member in imp["items"].as_array().into_iter().flatten() {
                    if let Some(m) = index.get(&id_key(member))
                        && is_public(m)
                        && let (Some(mname), Some((mkind, _))) = (m["name"].as_str(), inner(m))
                    {
                        lines.insert(format!("{mkind} {path}::{mname}"));
                    }
                }
            }
        }
    }
}

/// `cargo xtask api [--bless]`: compares the list with the committed one
/// (or writes it). Ok(true) when they match (or it was written).
pub fn check(bless: bool) -> Result<bool, String> {
    let now = current()?;
    let path = list_path();
    if bless {
        fs::create_dir_all(path.parent().expect("api/")).map_err(|e| e.to_string())?;
        fs::write(&path, &now).map_err(|e| format!("{}: {e}", path.display()))?;
        println!("wrote {} ({} items)", path.display(), now.lines().count());
        return Ok(true);
    }
    let committed = fs::read_to_string(&path).unwrap_or_default();
    if committed == now {
        println!("public API unchanged ({} items)", now.lines().count());
        return Ok(true);
    }
    let old: BTreeSet<&str> = committed.lines().collect();
    let new: BTreeSet<&str> = now.lines().collect();
    println!("the public API differs from {}:", path.display());
    for gone in old.difference(&new) {
        println!("-{gone}");
    }
    for added in new.difference(&old) {
        println!("+{added}");
    }
    println!("if the change is intended: cargo xtask api --bless, and commit the list");
    Ok(false)
}
