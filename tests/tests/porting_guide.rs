//! The porting guide (`docs/porting.md`) is generated from a checked list,
//! `docs/porting/items.txt`: tonic 0.14 item, status (same / different / absent),
//! rdma-rpc item, note, and for a `same` item the text that names it in
//! `porting/tonic-parity/src/same_items.rs` (or its `main.rs`, or
//! `porting/tonic-routeguide/src/main.rs`). This test keeps the three in step:
//! every item is in the guide with its status and note, the guide's counts are the
//! list's, and every `same` item that can be compiled is named in `same_items.rs`,
//! which `porting.rs` compiles with rpc-core as `tonic` (so a `same` that is not
//! fails to build there).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

struct Item {
    line: usize,
    item: String,
    status: String,
    rdma: String,
    note: String,
    compiled_as: String,
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ is in the workspace")
        .to_path_buf()
}

fn read(path: &str) -> String {
    let p = root().join(path);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("cannot read {}: {e}", p.display()))
}

fn items() -> Vec<Item> {
    let mut items = Vec::new();
    for (i, line) in read("docs/porting/items.txt").lines().enumerate() {
        if line.trim().is_empty() || line.starts_with('#') {
            continue;
        }
        let cols: Vec<&str> = line.split('|').map(str::trim).collect();
        assert_eq!(
            cols.len(),
            5,
            "items.txt line {}: five columns: {line}",
            i + 1
        );
        items.push(Item {
            line: i + 1,
            item: cols[0].to_string(),
            status: cols[1].to_string(),
            rdma: cols[2].to_string(),
            note: cols[3].to_string(),
            compiled_as: cols[4].to_string(),
        });
    }
    assert!(items.len() > 100, "the list is the whole API a porter uses");
    items
}

#[test]
fn every_item_has_a_known_status_and_what_its_status_needs() {
    for it in items() {
        let at = format!("items.txt line {} ({})", it.line, it.item);
        match it.status.as_str() {
            "same" => {}
            "different" | "absent" => {
                assert!(
                    !it.note.is_empty(),
                    "{at}: say how it differs or what to do"
                );
                assert_eq!(it.compiled_as, "-", "{at}: only `same` items are compiled");
            }
            s => panic!("{at}: unknown status {s:?}"),
        }
        if it.status == "absent" {
            assert_eq!(it.rdma, "-", "{at}: an absent item has no rdma-rpc item");
        }
    }
}

#[test]
fn the_guide_lists_every_item_with_its_status_note_and_counts() {
    let guide = read("docs/porting.md");
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for it in items() {
        *counts.entry(it.status.clone()).or_default() += 1;
        let rdma = if it.rdma == "-" {
            String::new()
        } else if it.rdma.starts_with("the same") {
            it.rdma.clone()
        } else {
            format!("`{}`", it.rdma)
        };
        let row = format!("| `{}` | {} | {} | {} |", it.item, it.status, rdma, it.note);
        assert!(
            guide.lines().any(|l| l == row),
            "docs/porting.md lacks the row of items.txt line {}:\n{row}\n(regenerate the tables)",
            it.line
        );
    }
    let summary = format!(
        "**{} same, {} different, {} absent** ({} items).",
        counts.get("same").copied().unwrap_or(0),
        counts.get("different").copied().unwrap_or(0),
        counts.get("absent").copied().unwrap_or(0),
        counts.values().sum::<usize>()
    );
    assert!(
        guide.contains(&summary),
        "the guide's counts are not {summary}"
    );
    // The README quotes the counts too.
    let quoted = format!(
        "({} same, {} different, {} absent,",
        counts.get("same").copied().unwrap_or(0),
        counts.get("different").copied().unwrap_or(0),
        counts.get("absent").copied().unwrap_or(0),
    );
    let readme = read("README.md").replace('\n', " ");
    assert!(
        readme.contains(&quoted),
        "README.md does not quote {quoted}"
    );
}

#[test]
fn every_compilable_same_item_is_named_in_the_compiled_module() {
    let main = read("porting/tonic-parity/src/main.rs");
    assert!(
        main.contains("mod same_items;"),
        "tonic-parity compiles same_items.rs"
    );
    // The crate's sources: same_items.rs, and main.rs for what a module cannot
    // hold (`include_proto!`); and the route guide's, which `porting.rs` also
    // compiles with rpc-core as `tonic`, for the generated streaming methods.
    let module = read("porting/tonic-parity/src/same_items.rs")
        + &main
        + &read("porting/tonic-routeguide/src/main.rs");
    let mut missing = Vec::new();
    for it in items().into_iter().filter(|it| it.status == "same") {
        let at = format!("items.txt line {} ({})", it.line, it.item);
        if it.compiled_as == "-" {
            // Build-time crates and their builders cannot be named in a program:
            // porting/*/build.rs use them.
            assert!(
                it.item.ends_with("(crate)")
                    || it.item.starts_with("tonic_build::")
                    || it.item.starts_with("Builder::"),
                "{at}: a `same` item must be compiled in same_items.rs"
            );
            continue;
        }
        if !module.contains(&it.compiled_as) {
            missing.push(format!("{at}: not named as {:?}", it.compiled_as));
        }
    }
    assert!(
        missing.is_empty(),
        "tonic-parity does not compile:\n{}",
        missing.join("\n")
    );
}
