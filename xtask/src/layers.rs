//! The layer rule, checked: each module of the library imports only the
//! modules below it.
//!
//! [`LAYERS`] is the rule, bottom first. A module (a file under `src/` or
//! `arch/`, named by its first path component) may name `crate::X` only
//! for an `X` in its own layer's module or a layer below it, or by one of
//! the [`LEAVES`] (deliberate shared leaves). Names the check cannot place
//! (the crate's root macros) map to the module that defines them
//! ([`MACROS`]). Comment lines are skipped: doc links may point anywhere.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

/// The library's modules, bottom first. One module per layer keeps the
/// order total; a module may use every module listed before it.
pub const LAYERS: &[&str] = &[
    "sync",
    "arch",
    "kernel",
    "once",
    "refcount",
    "percpu",
    "lockdep",
    "spinlock",
    "lockref",
    "seqlock",
    "brlock",
    "percpu_counter",
    "rcu",
    "wait",
    "semaphore",
    "completion",
    "mutex",
    "percpu_rwlock",
    "rwsem",
    "percpu_rwsem",
    "sleeping",
    "zeroable",
    "host",
];

/// Imports allowed against the order, each with its reason.
pub const LEAVES: &[(&str, &str, &str)] = &[
    (
        "arch",
        "lockref::word",
        "the lockref word's layout is a leaf that imports nothing: the aarch64 LL/SC step checks a word inside its exclusive pair",
    ),
    (
        "lockdep",
        "host",
        "a unit test of lockdep's engine reads the host kernel's interrupt flag (cfg(test) only)",
    ),
    (
        "kernel",
        "host::without_points",
        "the host kernel (feature `test-hooks`, host tests only) must not move a task between an `ArchIrq` mask and ksync's count of it, which is all it sees of that mask",
    ),
    (
        "sync",
        "host::hostile",
        "the hostile host kernel (feature `hostile`, host tests only) wraps the shim's atomics so every operation is a point of its schedule",
    ),
];

/// The crate's exported macros and the module that defines each.
const MACROS: &[(&str, &str)] = &[
    ("set_kernel", "kernel"),
    ("__set_kernel_hooks", "kernel"),
    ("__set_kernel_in_this_build", "kernel"),
    ("lock_class", "lockdep"),
    ("impl_linked", "rcu"),
];

/// One upward import: (file, line number, importing module, imported
/// module, the line).
pub type Violation = (PathBuf, usize, String, String, String);

/// Every upward import in the library under `root`.
pub fn check(root: &Path) -> Result<Vec<Violation>, String> {
    let mut files = Vec::new();
    collect(&root.join("src"), &mut files)?;
    collect(&root.join("arch"), &mut files)?;
    let mut out = Vec::new();
    for file in files {
        let Some(module) = module_of(root, &file) else {
            continue;
        };
        let Some(own) = rank(&module) else {
            return Err(format!(
                "{}: module `{module}` is not in the layer table (xtask/src/layers.rs)",
                file.display()
            ));
        };
        let text = fs::read_to_string(&file).map_err(|e| format!("{}: {e}", file.display()))?;
        for (n, line) in text.lines().enumerate() {
            if line.trim_start().starts_with("//") {
                continue;
            }
            for (target, path) in crate_paths(line) {
                if target == module || allowed_leaf(&module, &path) {
                    continue;
                }
                match rank(&target) {
                    Some(r) if r <= own => {}
                    // Crate-root items (`crate::X` where X is no module)
                    // are the crate's re-exports: also upward.
                    _ => out.push((
                        file.clone(),
                        n + 1,
                        module.clone(),
                        target,
                        line.trim().into(),
                    )),
                }
            }
        }
    }
    Ok(out)
}

fn rank(module: &str) -> Option<usize> {
    LAYERS.iter().position(|m| *m == module)
}

fn allowed_leaf(module: &str, path: &str) -> bool {
    LEAVES
        .iter()
        .any(|(from, leaf, _)| *from == module && path.starts_with(leaf))
}

/// The QEMU kernel's rule inside each architecture (qemu/src/arch/mod.rs):
/// `boot.rs` and `boot.s` never name the hotplug code, which may use them.
/// Returns each offending (file, line number, line).
pub fn check_qemu_boot(root: &Path) -> Result<Vec<(PathBuf, usize, String)>, String> {
    let arch = root.join("qemu/src/arch");
    let mut out = Vec::new();
    let dirs = fs::read_dir(&arch).map_err(|e| format!("{}: {e}", arch.display()))?;
    let mut dirs: Vec<_> = dirs.filter_map(Result::ok).map(|e| e.path()).collect();
    dirs.sort();
    for dir in dirs.into_iter().filter(|d| d.is_dir()) {
        for name in ["boot.rs", "boot.s"] {
            let file = dir.join(name);
            let Ok(text) = fs::read_to_string(&file) else {
                continue;
            };
            for (n, line) in text.lines().enumerate() {
                let code = line.trim_start();
                let comment =
                    code.starts_with("//") || code.starts_with("/*") || code.starts_with('*');
                if !comment && (line.contains("hotplug::") || line.contains("hotplug_")) {
                    out.push((file.clone(), n + 1, line.trim().to_string()));
                }
            }
        }
    }
    Ok(out)
}

/// Family folders whose files are each a module of its own layer: the
/// folder, its file, and the module (the crate-root name it is re-exported
/// as, which the crate's own code uses).
const FAMILIES: &[(&str, &str, &str)] = &[
    ("sleeping", "completion", "completion"),
    ("sleeping", "mutex", "mutex"),
    ("sleeping", "percpu_rwsem", "percpu_rwsem"),
    ("sleeping", "rwsem", "rwsem"),
    ("sleeping", "semaphore", "semaphore"),
    ("sleeping", "wait", "wait"),
    ("percpu", "brlock", "brlock"),
    ("percpu", "counter", "percpu_counter"),
    ("percpu", "rwlock", "percpu_rwlock"),
];

fn family_member(folder: &str, file: &str) -> Option<&'static str> {
    FAMILIES
        .iter()
        .find(|(f, m, _)| *f == folder && *m == file)
        .map(|(_, _, module)| *module)
}

/// `src/foo.rs`, `src/foo/...` -> `foo` (but a family member
/// `src/sleeping/mutex.rs` -> `mutex`); `arch/...` -> `arch`; `src/lib.rs`
/// (the root, which declares every module) -> none.
fn module_of(root: &Path, file: &Path) -> Option<String> {
    let rel = file.strip_prefix(root).ok()?;
    let mut parts = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned());
    match parts.next()?.as_str() {
        "arch" => Some("arch".into()),
        "src" => {
            let first = parts.next()?;
            if first == "lib.rs" {
                return None;
            }
            let first = first.trim_end_matches(".rs").to_string();
            let file = parts.next();
            if let Some(module) =
                file.and_then(|f| family_member(&first, f.trim_end_matches(".rs")))
            {
                return Some(module.into());
            }
            Some(first)
        }
        _ => None,
    }
}

/// The `crate::a::b` paths on a line: (module `a`, or the module defining
/// macro `a`; the path after `crate::`).
fn crate_paths(line: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut rest = line;
    while let Some(at) = rest.find("crate::") {
        // `$crate::` inside macros names this crate too.
        let after = &rest[at + "crate::".len()..];
        let path: String = after
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == ':')
            .collect();
        let mut segments = path.split("::");
        let mut head = segments.next().unwrap_or("").to_string();
        if let Some(module) = segments.next().and_then(|file| family_member(&head, file)) {
            head = module.to_string();
        }
        if !head.is_empty() {
            let module = MACROS
                .iter()
                .find(|(name, _)| *name == head)
                .map_or(head.clone(), |(_, m)| (*m).to_string());
            out.push((module, path));
        }
        rest = after;
    }
    // `use crate::{a, b::c}`: each name in the braces.
    if let Some(start) = line.find("crate::{") {
        let inner = &line[start + "crate::{".len()..];
        let inner = inner.split('}').next().unwrap_or("");
        for item in inner.split(',') {
            let path = item.trim().to_string();
            let head = path.split("::").next().unwrap_or("").to_string();
            if !head.is_empty() {
                out.push((head, path));
            }
        }
    }
    let mut seen = BTreeSet::new();
    out.retain(|p| seen.insert(p.clone()));
    out
}

fn collect(dir: &Path, out: &mut Vec<PathBuf>) -> Result<(), String> {
    let entries = fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut entries: Vec<_> = entries.filter_map(Result::ok).map(|e| e.path()).collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            collect(&path, out)?;
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::crate_paths;

    #[test]
    fn paths_and_braces_are_found() {
        let found =
            crate_paths("use crate::{kernel, percpu::PerCpu}; let x = crate::lock_class!(\"a\");");
        let modules: Vec<_> = found.iter().map(|(m, _)| m.as_str()).collect();
        assert_eq!(modules, ["lockdep", "kernel", "percpu"]);
        let found = crate_paths("$crate::sync::const_fn! {");
        assert_eq!(found[0].0, "sync");
        let found = crate_paths("use crate::sleeping::wait::WaitQueue; crate::percpu::counter::X");
        let modules: Vec<_> = found.iter().map(|(m, _)| m.as_str()).collect();
        assert_eq!(modules, ["wait", "percpu_counter"]);
    }

    #[test]
    fn the_qemu_boot_code_names_no_hotplug() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        assert_eq!(super::check_qemu_boot(&root).unwrap(), Vec::new());
    }

    #[test]
    fn the_library_keeps_the_rule() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let violations = super::check(&root).unwrap();
        assert!(
            violations.is_empty(),
            "upward imports:\n{}",
            violations
                .iter()
                .map(|(f, n, from, to, line)| format!(
                    "{}:{n}: {from} -> {to}: {line}",
                    f.display()
                ))
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
}
