//! The floors of the crates' modules, as docs/architecture.md states them,
//! and the check that the code keeps them.
//!
//! A ` ```floors <src> ` block of the document lists a crate's top-level
//! modules floor by floor, the top floor first. A module may import from
//! its own floor and the floors below, never from above; no two top-level
//! modules may import each other, directly or around a ring, unless the
//! block lists that ring as a known `cycle` (a debt the document names, all
//! on one floor). Imports are read from the code's `crate::` and `super::`
//! paths, `use` groups included, comment lines skipped: close enough to the
//! compiler's view to hold the picture, and with no dependency of its own.
//!
//! `cargo xtask layers` prints the check; the unit test
//! `the_workspace_keeps_its_floors` runs it with `cargo test --workspace`.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};

/// The document that states the floors.
pub const DOCUMENT: &str = "docs/architecture.md";

/// One crate's floors, as its block states them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Floors {
    /// The crate's source directory, relative to the workspace (`host/src`).
    pub src: String,
    /// The floors' modules, the ground floor first.
    pub floors: Vec<Vec<String>>,
    /// The rings of modules the document accepts for now.
    pub known_cycles: Vec<BTreeSet<String>>,
}

impl Floors {
    fn floor_of(&self, module: &str) -> Option<usize> {
        self.floors
            .iter()
            .position(|floor| floor.iter().any(|m| m == module))
    }
}

/// Every ` ```floors SRC ` block of `document`.
///
/// # Errors
///
/// A block that is not closed, names no source directory, or lists a
/// module twice.
pub fn parse(document: &str) -> Result<Vec<Floors>, String> {
    let mut blocks = Vec::new();
    let mut lines = document.lines().enumerate();
    while let Some((at, line)) = lines.next() {
        let Some(src) = line.trim().strip_prefix("```floors") else {
            continue;
        };
        let src = src.trim();
        if src.is_empty() {
            return Err(format!(
                "line {}: a floors block names no source directory",
                at + 1
            ));
        }
        let mut floors = Vec::new();
        let mut known_cycles = Vec::new();
        let mut closed = false;
        for (_, line) in lines.by_ref() {
            let line = line.split('#').next().unwrap_or_default().trim();
            if line == "```" {
                closed = true;
                break;
            }
            let words: Vec<String> = line.split_whitespace().map(str::to_owned).collect();
            match words.split_first() {
                None => {}
                Some((first, ring)) if first == "cycle" => {
                    known_cycles.push(ring.iter().cloned().collect());
                }
                Some(_) => floors.push(words),
            }
        }
        if !closed {
            return Err(format!("the floors block of {src} is not closed"));
        }
        floors.reverse();
        let mut seen = BTreeSet::new();
        for module in floors.iter().flatten() {
            if !seen.insert(module) {
                return Err(format!("{src}: `{module}` is on two floors"));
            }
        }
        blocks.push(Floors {
            src: src.to_owned(),
            floors,
            known_cycles,
        });
    }
    Ok(blocks)
}

/// A source file: its module path inside the crate (`["cache", "store"]`;
/// a `mod.rs` is its folder's module, `lib.rs` and `main.rs` the root) and
/// its text.
#[derive(Debug, Clone)]
pub struct Source {
    pub module: Vec<String>,
    pub path: String,
    pub text: String,
}

/// Where the code departs from the floors.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Finding {
    /// A module imports from a floor above its own.
    Upward {
        at: String,
        from: String,
        from_floor: usize,
        to: String,
        to_floor: usize,
    },
    /// A ring of top-level modules the document does not accept.
    Cycle(Vec<String>),
    /// A ring the document accepts that the code no longer has.
    StaleCycle(Vec<String>),
    /// An accepted ring whose modules are not on one floor.
    CycleAcrossFloors(Vec<String>),
    /// A top-level module on no floor.
    Unplaced(String),
    /// A floor names a module the crate does not have.
    Missing(String),
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Upward {
                at,
                from,
                from_floor,
                to,
                to_floor,
            } => write!(
                f,
                "{at}: `{from}` (floor {from_floor}) imports `{to}` (floor {to_floor}), above it"
            ),
            Self::Cycle(ring) => write!(f, "a cycle between folders: {}", ring.join(" <-> ")),
            Self::StaleCycle(ring) => write!(
                f,
                "the cycle {} is no longer as listed: update {DOCUMENT}",
                ring.join(" <-> ")
            ),
            Self::CycleAcrossFloors(ring) => {
                write!(f, "the accepted cycle {} spans floors", ring.join(" <-> "))
            }
            Self::Unplaced(module) => write!(f, "`{module}` is on no floor of {DOCUMENT}"),
            Self::Missing(module) => {
                write!(f, "{DOCUMENT} places `{module}`, which does not exist")
            }
        }
    }
}

/// What `sources` (one crate's files) depart from `floors` in.
#[must_use]
pub fn check(floors: &Floors, sources: &[Source]) -> Vec<Finding> {
    let mut findings = Vec::new();
    let tops: BTreeSet<&str> = sources
        .iter()
        .filter_map(|s| s.module.first().map(String::as_str))
        .collect();
    for top in &tops {
        if floors.floor_of(top).is_none() {
            findings.push(Finding::Unplaced((*top).to_owned()));
        }
    }
    for module in floors.floors.iter().flatten() {
        if !tops.contains(module.as_str()) {
            findings.push(Finding::Missing(module.clone()));
        }
    }
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for source in sources {
        let Some(from) = source.module.first() else {
            continue;
        };
        for (line, to) in imports(&source.module, &source.text) {
            if &to == from || !tops.contains(to.as_str()) {
                continue;
            }
            edges.entry(from.clone()).or_default().insert(to.clone());
            if let (Some(from_floor), Some(to_floor)) =
                (floors.floor_of(from), floors.floor_of(&to))
                && to_floor > from_floor
            {
                findings.push(Finding::Upward {
                    at: format!("{}:{line}", source.path),
                    from: from.clone(),
                    from_floor,
                    to,
                    to_floor,
                });
            }
        }
    }
    let rings = cycles(&edges);
    for ring in &rings {
        let set: BTreeSet<String> = ring.iter().cloned().collect();
        if !floors.known_cycles.contains(&set) {
            findings.push(Finding::Cycle(ring.clone()));
        }
    }
    for known in &floors.known_cycles {
        let ring: Vec<String> = known.iter().cloned().collect();
        if !rings
            .iter()
            .any(|r| r.iter().cloned().collect::<BTreeSet<_>>() == *known)
        {
            findings.push(Finding::StaleCycle(ring.clone()));
        }
        let on: BTreeSet<Option<usize>> = known.iter().map(|m| floors.floor_of(m)).collect();
        if on.len() > 1 {
            findings.push(Finding::CycleAcrossFloors(ring));
        }
    }
    findings
}

/// The top-level modules `text` (the file of `module`) imports, with the
/// line of each: `crate::x`, `crate::{x, y::z}`, and `super::` paths that
/// climb to the crate's root.
#[must_use]
pub fn imports(module: &[String], text: &str) -> Vec<(usize, String)> {
    let code: String = text
        .lines()
        .map(|line| {
            if line.trim_start().starts_with("//") {
                ""
            } else {
                line
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    let mut found = Vec::new();
    let mut from = 0;
    while let Some(start) = next_path(&code, from) {
        let (climbed, after) = climb(&code[start..], module);
        if climbed {
            let line = code[..start].matches('\n').count() + 1;
            for top in first_segments(after) {
                found.push((line, top));
            }
        }
        from = start + 1;
    }
    found
}

/// Where the next `crate::` or `super::` path at or after `from` starts
/// (at a word boundary), skipping those that continue a `super::` chain.
fn next_path(code: &str, mut from: usize) -> Option<usize> {
    let bytes = code.as_bytes();
    loop {
        let found = [code[from..].find("crate::"), code[from..].find("super::")];
        let at = from + found.into_iter().flatten().min()?;
        if at == 0 || !is_word(bytes[at - 1]) && bytes[at - 1] != b':' {
            return Some(at);
        }
        from = at + 1;
    }
}

fn is_word(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || byte == b'_'
}

/// Follows `crate::` or a chain of `super::` from `module`'s file: whether
/// the path reaches the crate's root, and the text after it.
fn climb<'a>(path: &'a str, module: &[String]) -> (bool, &'a str) {
    if let Some(after) = path.strip_prefix("crate::") {
        return (true, after);
    }
    let mut after = path;
    let mut ups = 0;
    while let Some(rest) = after.strip_prefix("super::") {
        after = rest;
        ups += 1;
    }
    (ups >= module.len(), after)
}

/// The first segment of each path at the start of `text`: `x` of `x::y`,
/// `x` and `y` of `{x::a, y}`; `self` and `*` are not modules.
fn first_segments(text: &str) -> Vec<String> {
    let text = text.trim_start();
    let items: Vec<&str> = match text.strip_prefix('{') {
        Some(group) => split_group(group),
        None => vec![text],
    };
    items
        .into_iter()
        .filter_map(|item| {
            let name: String = item
                .trim_start()
                .bytes()
                .take_while(|b| is_word(*b))
                .map(char::from)
                .collect();
            (!name.is_empty() && name != "self").then_some(name)
        })
        .collect()
}

/// The items of a `use` group whose `{` has been read, up to its `}`.
fn split_group(group: &str) -> Vec<&str> {
    let mut items = Vec::new();
    let mut depth = 0;
    let mut start = 0;
    for (i, c) in group.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => {
                items.push(&group[start..i]);
                return items;
            }
            '}' => depth -= 1,
            ',' if depth == 0 => {
                items.push(&group[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    items.push(&group[start..]);
    items
}

/// The rings of `edges` (strongly connected components of more than one
/// module), each sorted.
fn cycles(edges: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    let nodes: BTreeSet<&String> = edges.keys().chain(edges.values().flatten()).collect();
    let reach = |from: &String| -> BTreeSet<String> {
        let mut seen = BTreeSet::new();
        let mut stack = vec![from.clone()];
        while let Some(next) = stack.pop() {
            for to in edges.get(&next).into_iter().flatten() {
                if seen.insert(to.clone()) {
                    stack.push(to.clone());
                }
            }
        }
        seen
    };
    let reachable: BTreeMap<&String, BTreeSet<String>> =
        nodes.iter().map(|n| (*n, reach(n))).collect();
    let mut rings: BTreeSet<Vec<String>> = BTreeSet::new();
    for node in &nodes {
        let ring: Vec<String> = reachable[node]
            .iter()
            .filter(|other| {
                reachable
                    .get(other)
                    .is_some_and(|back| back.contains(*node))
            })
            .cloned()
            .collect();
        if ring.len() > 1 {
            rings.insert(ring);
        }
    }
    rings.into_iter().collect()
}

/// The `.rs` files of the crate at `src`, with their module paths; a
/// `bin/` folder holds other crates and is left out.
///
/// # Errors
///
/// A directory or file that cannot be read.
pub fn sources(root: &Path, src: &str) -> Result<Vec<Source>, String> {
    let base = root.join(src);
    let mut files = Vec::new();
    walk(&base, &mut files)?;
    let mut sources = Vec::new();
    for file in files {
        let relative = file.strip_prefix(&base).map_err(|e| e.to_string())?;
        let mut module: Vec<String> = relative
            .with_extension("")
            .iter()
            .map(|part| part.to_string_lossy().into_owned())
            .collect();
        if module.first().is_some_and(|m| m == "bin") {
            continue;
        }
        if module.last().is_some_and(|m| m == "mod") {
            module.pop();
        }
        if module == ["lib"] || module == ["main"] {
            module.clear();
        }
        let text = fs::read_to_string(&file)
            .map_err(|e| format!("cannot read {}: {e}", file.display()))?;
        sources.push(Source {
            module,
            path: format!("{src}/{}", relative.display()),
            text,
        });
    }
    Ok(sources)
}

fn walk(dir: &Path, files: &mut Vec<PathBuf>) -> Result<(), String> {
    let entries = fs::read_dir(dir).map_err(|e| format!("cannot read {}: {e}", dir.display()))?;
    for entry in entries {
        let path = entry.map_err(|e| e.to_string())?.path();
        if path.is_dir() {
            walk(&path, files)?;
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
    Ok(())
}

/// Checks every crate `root`'s document has floors for: each finding, named.
///
/// # Errors
///
/// The document or a source that cannot be read, or a bad floors block.
pub fn check_workspace(root: &Path) -> Result<Vec<String>, String> {
    let document = fs::read_to_string(root.join(DOCUMENT))
        .map_err(|e| format!("cannot read {DOCUMENT}: {e}"))?;
    let blocks = parse(&document)?;
    if blocks.is_empty() {
        return Err(format!("{DOCUMENT} has no floors block"));
    }
    let mut findings = Vec::new();
    for floors in &blocks {
        let sources = sources(root, &floors.src)?;
        findings.extend(
            check(floors, &sources)
                .into_iter()
                .map(|f| format!("{}: {f}", floors.src)),
        );
    }
    Ok(findings)
}

#[cfg(test)]
mod tests {
    use super::*;

    const DOC: &str = "text\n\n```floors demo/src\ntop          # the assembly\nmiddle other\nground\ncycle middle other\n```\n";

    fn source(module: &[&str], text: &str) -> Source {
        Source {
            module: module.iter().map(|m| (*m).to_owned()).collect(),
            path: format!("{}.rs", module.join("/")),
            text: text.to_owned(),
        }
    }

    fn floors() -> Floors {
        parse(DOC).expect("the block parses").remove(0)
    }

    #[test]
    fn a_block_lists_the_floors_top_first_and_the_accepted_rings() {
        let floors = floors();
        assert_eq!(floors.src, "demo/src");
        assert_eq!(
            floors.floors,
            [vec!["ground"], vec!["middle", "other"], vec!["top"]]
        );
        assert_eq!(
            floors.known_cycles,
            [["middle", "other"].map(String::from).into()]
        );
        assert!(parse("```floors x/src\na\n").is_err(), "an unclosed block");
        assert!(
            parse("```floors x/src\na\nb a\n```").is_err(),
            "a module twice"
        );
    }

    #[test]
    fn imports_are_read_from_paths_groups_and_climbing_supers() {
        let text = "use crate::alpha::X;\n// use crate::commented::Y;\nuse crate::{beta::{a, b}, gamma, self};\nuse super::sibling;\nfn f() { crate::delta::g(); }\n";
        let found = imports(&["top".into()], text);
        let names: Vec<&str> = found.iter().map(|(_, n)| n.as_str()).collect();
        assert_eq!(names, ["alpha", "beta", "gamma", "sibling", "delta"]);
        assert_eq!(found[1].0, 3, "the line of the group");
        let nested = imports(
            &["cache".into(), "store".into()],
            "use super::key::Key;\nuse super::super::apply::x;\n",
        );
        assert_eq!(
            nested,
            [(2, "apply".to_owned())],
            "one super stays in the folder"
        );
    }

    #[test]
    fn an_upward_import_is_named_with_its_place() {
        let sources = [
            source(&["top"], ""),
            source(&["middle"], "use crate::ground::G;\n"),
            source(&["other"], "use crate::middle::M;\n"),
            source(&["ground"], "\n\nuse crate::top::T;\n"),
        ];
        let mut floors = floors();
        floors.known_cycles.clear();
        let findings = check(&floors, &sources);
        assert_eq!(
            findings,
            [Finding::Upward {
                at: "ground.rs:3".into(),
                from: "ground".into(),
                from_floor: 0,
                to: "top".into(),
                to_floor: 2,
            }]
        );
        assert!(
            findings[0]
                .to_string()
                .contains("imports `top` (floor 2), above it")
        );
    }

    #[test]
    fn a_ring_is_refused_unless_the_document_accepts_it() {
        let ring = [
            source(&["top"], ""),
            source(&["middle"], "use crate::other::O;\n"),
            source(&["other"], "use crate::middle::M;\n"),
            source(&["ground"], ""),
        ];
        assert_eq!(check(&floors(), &ring), []);
        let mut strict = floors();
        strict.known_cycles.clear();
        assert_eq!(
            check(&strict, &ring),
            [Finding::Cycle(vec!["middle".into(), "other".into()])]
        );
        let broken = [
            source(&["top"], ""),
            source(&["middle"], "use crate::other::O;\n"),
            source(&["other"], ""),
            source(&["ground"], ""),
        ];
        assert_eq!(
            check(&floors(), &broken),
            [Finding::StaleCycle(vec!["middle".into(), "other".into()])]
        );
    }

    #[test]
    fn every_module_has_a_floor_and_every_floor_names_modules() {
        let sources = [
            source(&["top"], ""),
            source(&["middle"], ""),
            source(&["other"], ""),
            source(&["stray"], ""),
        ];
        let mut floors = floors();
        floors.known_cycles.clear();
        assert_eq!(
            check(&floors, &sources),
            [
                Finding::Unplaced("stray".into()),
                Finding::Missing("ground".into())
            ]
        );
    }

    #[test]
    fn the_workspace_keeps_its_floors() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .expect("the workspace above xtask");
        let findings = check_workspace(root).expect("the floors and sources read");
        assert!(findings.is_empty(), "{}", findings.join("\n"));
    }
}
