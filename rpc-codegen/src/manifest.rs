//! Which name the crate being built gives rpc-core, read from its `Cargo.toml`.
//!
//! Generated code must name rpc-core, and a crate may depend on it under another
//! name (`tonic = { package = "rpc-core", .. }`, the whole point of porting a tonic
//! program by its manifest alone), in which case `::rpc_core` does not exist there.
//! Cargo tells a build script its crate's directory (`CARGO_MANIFEST_DIR`) but not
//! the names of its dependencies, so the manifest is read, as the proc-macro-crate
//! crate does for proc macros.

use std::fmt;
use std::path::{Path, PathBuf};

use toml::{Table, Value};

/// The package generated code needs.
const PACKAGE: &str = "rpc-core";

/// The dependency tables searched, in order of preference: code generated for the
/// crate itself needs a normal dependency; tests and benches may only have a dev one.
const SECTIONS: &[&str] = &[
    "dependencies",
    "dev-dependencies",
    "dev_dependencies",
    "build-dependencies",
    "build_dependencies",
];

/// Why no name was found, for the build's warning.
#[derive(Debug)]
pub(crate) enum NotFound {
    /// Not run by cargo: `CARGO_MANIFEST_DIR` is unset.
    NoManifestDir,
    /// The manifest (or the workspace's) could not be read or parsed.
    Unreadable(PathBuf, String),
    /// The manifest has no dependency on rpc-core.
    NoDependency(PathBuf),
}

impl fmt::Display for NotFound {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NotFound::NoManifestDir => write!(f, "CARGO_MANIFEST_DIR is not set"),
            NotFound::Unreadable(path, e) => write!(f, "{} cannot be read: {e}", path.display()),
            NotFound::NoDependency(path) => write!(
                f,
                "{} has no dependency on {PACKAGE} (a key `{PACKAGE}`, or one with \
                 `package = \"{PACKAGE}\"`, in [dependencies], [dev-dependencies], \
                 [build-dependencies] or [target.*.dependencies])",
                path.display()
            ),
        }
    }
}

/// The path of rpc-core in the crate whose manifest is in `$CARGO_MANIFEST_DIR`:
/// `::rpc_core`, or `::tonic` for `tonic = { package = "rpc-core", .. }`.
pub(crate) fn crate_path_from_env() -> Result<String, NotFound> {
    let dir = std::env::var_os("CARGO_MANIFEST_DIR").ok_or(NotFound::NoManifestDir)?;
    crate_path(Path::new(&dir))
}

/// As [`crate_path_from_env`], for the manifest in `dir`.
pub(crate) fn crate_path(dir: &Path) -> Result<String, NotFound> {
    let path = dir.join("Cargo.toml");
    let manifest = read(&path)?;
    // The workspace names the package of an inherited dependency (`x.workspace = true`).
    let workspace = if dependencies(&manifest).any(|(_, dep)| inherited(dep)) {
        workspace_dependencies(dir, &manifest)?
    } else {
        Table::new()
    };
    match dependency_key(&manifest, &workspace) {
        Some(key) => Ok(format!("::{}", key.replace('-', "_"))),
        None => Err(NotFound::NoDependency(path)),
    }
}

/// The key under which `manifest` depends on rpc-core, if any, with `workspace`
/// the root manifest's `[workspace.dependencies]`.
fn dependency_key(manifest: &Table, workspace: &Table) -> Option<String> {
    dependencies(manifest)
        .find(|(key, dep)| {
            if inherited(dep) {
                workspace.get(*key).is_some_and(|d| is_rpc_core(key, d))
            } else {
                is_rpc_core(key, dep)
            }
        })
        .map(|(key, _)| key.clone())
}

/// Every dependency of `manifest`, in [`SECTIONS`] order, each section's
/// `[target.'cfg(..)'.<section>]` tables right after it.
fn dependencies(manifest: &Table) -> impl Iterator<Item = (&String, &Value)> {
    let targets = manifest.get("target").and_then(Value::as_table);
    SECTIONS.iter().flat_map(move |section| {
        std::iter::once(manifest.get(*section))
            .chain(
                targets
                    .into_iter()
                    .flat_map(|t| t.values())
                    .map(|t| t.get(*section)),
            )
            .flatten()
            .filter_map(Value::as_table)
            .flat_map(|table| table.iter())
    })
}

/// `x = { workspace = true }` (or `x.workspace = true`).
fn inherited(dep: &Value) -> bool {
    dep.get("workspace").and_then(Value::as_bool) == Some(true)
}

/// Whether the dependency `key = dep` is on rpc-core: its `package`, or else its key,
/// names it (`x = "1"` is the package `x`).
fn is_rpc_core(key: &str, dep: &Value) -> bool {
    let package = dep.get("package").and_then(Value::as_str).unwrap_or(key);
    package == PACKAGE
}

/// The `[workspace.dependencies]` of the workspace `manifest` (in `dir`) belongs
/// to: the one `package.workspace` names, or else the nearest `Cargo.toml` with a
/// `[workspace]` table from `dir` upwards (the crate's own included).
fn workspace_dependencies(dir: &Path, manifest: &Table) -> Result<Table, NotFound> {
    let explicit = manifest
        .get("package")
        .and_then(|p| p.get("workspace"))
        .and_then(Value::as_str)
        .map(|rel| dir.join(rel));
    let root = match explicit {
        Some(root) => Some(read(&root.join("Cargo.toml"))?),
        None => {
            let mut found = None;
            for ancestor in dir.ancestors() {
                let path = ancestor.join("Cargo.toml");
                if !path.is_file() {
                    continue;
                }
                let candidate = read(&path)?;
                if candidate.contains_key("workspace") {
                    found = Some(candidate);
                    break;
                }
            }
            found
        }
    };
    Ok(root
        .as_ref()
        .and_then(|r| r.get("workspace"))
        .and_then(|w| w.get("dependencies"))
        .and_then(Value::as_table)
        .cloned()
        .unwrap_or_default())
}

fn read(path: &Path) -> Result<Table, NotFound> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| NotFound::Unreadable(path.to_owned(), e.to_string()))?;
    text.parse::<Table>()
        .map_err(|e| NotFound::Unreadable(path.to_owned(), e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The key found in `manifest`, with `workspace` as the root's
    /// `[workspace.dependencies]` body.
    fn key(manifest: &str, workspace: &str) -> Option<String> {
        dependency_key(&manifest.parse().unwrap(), &workspace.parse().unwrap())
    }

    #[test]
    fn a_plain_dependency_is_found_by_its_key() {
        let m = "[dependencies]\nprost = \"0.14\"\nrpc-core = { path = \"../rpc-core\" }";
        assert_eq!(key(m, "").as_deref(), Some("rpc-core"));
        assert_eq!(
            key("[dependencies]\nrpc-core = \"0.1\"", "").as_deref(),
            Some("rpc-core")
        );
    }

    #[test]
    fn a_renamed_dependency_is_found_by_its_package() {
        let m = "[dependencies]\ntonic = { package = \"rpc-core\", path = \"../../rpc-core\" }";
        assert_eq!(key(m, "").as_deref(), Some("tonic"));
        // `rpc-core` renamed to something else is not rpc-core.
        let m = "[dependencies]\nrpc-core = { package = \"other\", version = \"1\" }";
        assert_eq!(key(m, ""), None);
    }

    #[test]
    fn an_inherited_dependency_is_looked_up_in_the_workspace() {
        let m = "[dependencies]\ntonic = { workspace = true }";
        let ws = "tonic = { package = \"rpc-core\", path = \"rpc-core\" }";
        assert_eq!(key(m, ws).as_deref(), Some("tonic"));
        let m = "[dependencies]\nrpc-core.workspace = true";
        assert_eq!(
            key(m, "rpc-core = { path = \"rpc-core\" }").as_deref(),
            Some("rpc-core")
        );
        // The workspace says what an inherited key is.
        let m = "[dependencies]\nrpc-core.workspace = true";
        assert_eq!(key(m, "rpc-core = { package = \"x\", path = \"x\" }"), None);
    }

    #[test]
    fn target_specific_dev_and_build_dependencies_count() {
        let m = "[target.'cfg(unix)'.dependencies]\nrpc = { package = \"rpc-core\", path = \"x\" }";
        assert_eq!(key(m, "").as_deref(), Some("rpc"));
        let m = "[dev-dependencies]\nrpc-core = { path = \"x\" }";
        assert_eq!(key(m, "").as_deref(), Some("rpc-core"));
        let m = "[build-dependencies]\nrpc-core = { path = \"x\" }";
        assert_eq!(key(m, "").as_deref(), Some("rpc-core"));
    }

    #[test]
    fn normal_dependencies_are_preferred() {
        let m = "[dev-dependencies]\nrpc-core = { path = \"x\" }\n\
                 [dependencies]\ntonic = { package = \"rpc-core\", path = \"x\" }";
        assert_eq!(key(m, "").as_deref(), Some("tonic"));
    }

    #[test]
    fn absent_is_none() {
        assert_eq!(key("[package]\nname = \"a\"", ""), None);
        assert_eq!(
            key(
                "[dependencies]\nprost = \"0.14\"\nrpc-codegen = \"0.1\"",
                ""
            ),
            None
        );
    }

    #[test]
    fn the_crate_path_comes_from_the_manifest_and_its_workspace_on_disk() {
        let root =
            std::env::temp_dir().join(format!("rpc-codegen-manifest-{}", std::process::id()));
        let member = root.join("member");
        std::fs::create_dir_all(&member).unwrap();
        std::fs::write(
            root.join("Cargo.toml"),
            "[workspace]\nmembers = [\"member\"]\n\n[workspace.dependencies]\n\
             my-rpc = { package = \"rpc-core\", path = \"rpc-core\" }\n",
        )
        .unwrap();
        std::fs::write(
            member.join("Cargo.toml"),
            "[package]\nname = \"member\"\n\n[dependencies]\nmy-rpc.workspace = true\n",
        )
        .unwrap();
        let found = crate_path(&member);
        std::fs::write(member.join("Cargo.toml"), "[package]\nname = \"member\"\n").unwrap();
        let absent = crate_path(&member);
        let missing = crate_path(&root.join("nowhere"));
        std::fs::remove_dir_all(&root).unwrap();

        assert_eq!(found.unwrap(), "::my_rpc");
        let absent = absent.unwrap_err().to_string();
        assert!(absent.contains("has no dependency on rpc-core"), "{absent}");
        assert!(matches!(missing, Err(NotFound::Unreadable(..))));
    }
}
