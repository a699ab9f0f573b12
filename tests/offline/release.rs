//! The release's version, said the same everywhere users read it: the crate's version (what
//! `yh-genie --version` prints), the image tag the manifests and the docs name, and the newest
//! section of CHANGELOG.md; the changelog's sections are releases, newest first.

use regex::Regex;
use std::path::Path;

const VERSION: &str = env!("CARGO_PKG_VERSION");

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(repo().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// Every file under `rel` (or `rel` itself), relative to the checkout.
fn files_under(rel: &str) -> Vec<String> {
    let path = repo().join(rel);
    if path.is_file() {
        return vec![rel.to_string()];
    }
    let mut files = Vec::new();
    for entry in std::fs::read_dir(&path).unwrap_or_else(|e| panic!("{rel}: {e}")) {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        files.extend(files_under(&format!("{rel}/{name}")));
    }
    files.sort();
    files
}

/// The versions of CHANGELOG.md's `## X.Y.Z` sections, in their order.
fn changelog_versions() -> Vec<(u64, u64, u64)> {
    let heading = Regex::new(r"(?m)^## (\S+)\s*$").unwrap();
    heading
        .captures_iter(&read("CHANGELOG.md"))
        .map(|c| semver(&c[1]).unwrap_or_else(|| panic!("CHANGELOG.md: ## {} is not a version", &c[1])))
        .collect()
}

fn semver(text: &str) -> Option<(u64, u64, u64)> {
    let mut parts = text.split('.').map(|p| p.parse::<u64>().ok());
    let version = (parts.next()??, parts.next()??, parts.next()??);
    parts.next().is_none().then_some(version)
}

#[test]
fn the_changelogs_newest_section_is_the_crates_version() {
    let versions = changelog_versions();
    assert_eq!(versions.first(), Some(&semver(VERSION).unwrap()), "CHANGELOG.md's first section is not {VERSION}");
    assert!(versions.windows(2).all(|w| w[0] > w[1]), "CHANGELOG.md's sections are not newest first: {versions:?}");
    assert_eq!(versions.last(), Some(&(0, 1, 0)), "CHANGELOG.md ends with the first release");
}

/// `yh-genie:<tag>` in the manifests, the overlays, the e2e files, the Dockerfile, the README and
/// the docs: every image of yh-genie they name is this version's.
#[test]
fn every_image_tag_users_read_is_the_crates_version() {
    let image = Regex::new(r"\byh-genie:([0-9][\w.-]*[0-9])\b").unwrap();
    let mut named = 0;
    let mut other = Vec::new();
    for root in ["manifests", "overlays", "e2e", "examples", "Dockerfile", "README.md", "docs"] {
        for file in files_under(root) {
            let Ok(text) = std::fs::read_to_string(repo().join(&file)) else { continue };
            for (i, line) in text.lines().enumerate() {
                for c in image.captures_iter(line) {
                    named += 1;
                    if &c[1] != VERSION {
                        other.push(format!("{file}:{}: {}", i + 1, &c[0]));
                    }
                }
            }
        }
    }
    assert!(other.is_empty(), "images of another version than {VERSION}:\n{}", other.join("\n"));
    let manifest = read("manifests/yh-genie.yaml");
    assert!(manifest.contains(&format!("image: yh-genie:{VERSION}\n")), "manifests/yh-genie.yaml's image");
    assert!(named >= 5, "only {named} image names found: the pattern no longer matches the files");
}
