//! The crate's three floors (docs/layout.md): `programs/` over `node/` over `platform/`. An import
//! may run down a floor, never up: the platform knows no program, and the wires between programs
//! know none of them either.

use std::path::{Path, PathBuf};

/// Every `.rs` file under `dir`.
fn sources(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            found.extend(sources(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            found.push(path);
        }
    }
    found
}

/// The lines of the files under `floor` that name a module of one of `above` (`crate::<floor>`),
/// comments aside.
fn imports_up(floor: &str, above: &[&str]) -> Vec<String> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut found = Vec::new();
    for file in sources(&src.join(floor)) {
        for (n, line) in std::fs::read_to_string(&file).unwrap().lines().enumerate() {
            let code = line.split("//").next().unwrap_or_default();
            if above.iter().any(|up| code.contains(&format!("crate::{up}"))) {
                found.push(format!("{}:{}: {}", file.strip_prefix(&src).unwrap().display(), n + 1, line.trim()));
            }
        }
    }
    found
}

#[test]
fn the_platform_imports_nothing_above_it() {
    let up = imports_up("platform", &["programs", "node"]);
    assert!(up.is_empty(), "the platform reaches up:\n{}", up.join("\n"));
}

#[test]
fn the_node_local_wires_import_no_program() {
    let up = imports_up("node", &["programs"]);
    assert!(up.is_empty(), "node/ reaches up into the programs:\n{}", up.join("\n"));
}
