//! The committed header, `include/memplan.h`, is what cbindgen generates from `src/lib.rs`.

use std::path::Path;

#[test]
fn the_committed_header_matches_cbindgen() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let config = cbindgen::Config::from_file(dir.join("cbindgen.toml")).unwrap();
    // The one source file of the ABI: no `cargo metadata`, no network, nothing else parsed.
    let bindings = cbindgen::Builder::new()
        .with_config(config)
        .with_src(dir.join("src/lib.rs"))
        .generate()
        .unwrap();
    let mut generated = Vec::new();
    bindings.write(&mut generated);
    let generated = String::from_utf8(generated).unwrap();
    let path = dir.join("include/memplan.h");
    if std::env::var_os("UPDATE_HEADER").is_some_and(|v| v == "1") {
        std::fs::write(&path, &generated).unwrap();
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == generated,
        "{} is not what cbindgen generates from src/lib.rs; regenerate it with\n  \
         UPDATE_HEADER=1 cargo test --release -p memplan-capi --test header\n\
         --- generated ---\n{generated}",
        path.display()
    );
}
