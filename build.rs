//! Two switches. ksync's loom build (`cfg(ksync_loom)`, see `src/sync.rs`)
//! for a dependent's loom models.
//!
//! ksync's own models set `--cfg ksync_loom` directly. A dependent builds
//! its models as loom's docs say, with `RUSTFLAGS="--cfg loom"`; with the
//! `loom` feature on as well, ksync turns on `ksync_loom` here, so its locks,
//! per-CPU types and RCU run on loom's atomics inside the dependent's model.
//! Both conditions, not the feature alone: a feature enabled in
//! `[dev-dependencies]` reaches the dependent's ordinary test builds too,
//! where ksync must stay the normal crate (`const` constructors, `lock_api`).
//!
//! And `ksync_docs` in the repository, where `docs/` exists (the package
//! ships without it): its examples are compiled as doc tests like the
//! README's (`src/lib.rs`).

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let feature = std::env::var_os("CARGO_FEATURE_LOOM").is_some();
    // Cargo sets CARGO_CFG_<NAME> for every `--cfg` in RUSTFLAGS.
    let cfg_loom = std::env::var_os("CARGO_CFG_LOOM").is_some();
    if feature && cfg_loom {
        println!("cargo:rustc-cfg=ksync_loom");
    }
    let docs = std::path::Path::new(&std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_default())
        .join("docs/design.md");
    if docs.exists() {
        println!("cargo:rustc-cfg=ksync_docs");
    }
}
