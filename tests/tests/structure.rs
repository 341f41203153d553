//! The structure drawn from the code: every workspace crate's files and the files each
//! imports (`crate::...`, `super::...`, outside test modules), checked to form no circle.
//! `cargo test -p elfjit-tests --test structure -- --nocapture` prints it (the README's
//! "How it is built" shows it).
//!
//! A file is a module: `src/a.rs` and `src/a/mod.rs` are `a`, `src/a/b.rs` is `a::b`; a
//! reference is resolved to the longest module path it starts with. The crate root
//! (`lib.rs`, `main.rs`) only declares modules and re-exports, so references to it are
//! not edges.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ is in the workspace")
        .to_path_buf()
}

/// The workspace members, from the root Cargo.toml's `members = [...]`.
fn members(root: &Path) -> Vec<String> {
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).expect("Cargo.toml");
    let line = manifest
        .lines()
        .find(|l| l.trim_start().starts_with("members"))
        .expect("a members line");
    line.split('"')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect()
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// `src/a/b.rs` -> ["a", "b"]; `src/a/mod.rs` -> ["a"]; `src/lib.rs` -> [].
fn module_path(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).expect("under src");
    let mut parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    let last = parts.pop().unwrap_or_default();
    let stem = last.trim_end_matches(".rs");
    if parts.is_empty() && (stem == "lib" || stem == "main") {
        return parts;
    }
    if stem != "mod" {
        parts.push(stem.to_string());
    }
    parts
}

/// The code of a file without comments and without its trailing test module.
fn code(text: &str) -> String {
    let body = match text.find("#[cfg(test)]\nmod tests") {
        Some(i) => &text[..i],
        None => text,
    };
    body.lines()
        .map(|l| match l.find("//") {
            Some(i) => &l[..i],
            None => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The paths after `crate::`/`super::` in `code`, a brace group split into its members
/// (`crate::{a, b::c}` -> `a`, `b::c`).
fn references(code: &str, prefix: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = code;
    while let Some(i) = rest.find(prefix) {
        let before = rest[..i].chars().next_back();
        rest = &rest[i + prefix.len()..];
        if before.is_some_and(|c| is_ident(c) || c == ':') {
            continue; // `foo_crate::` or `super::super::` handled below
        }
        let mut path = String::new();
        let mut chars = rest.chars().peekable();
        while let Some(&c) = chars.peek() {
            if is_ident(c) || c == ':' {
                path.push(c);
                chars.next();
            } else {
                break;
            }
        }
        if path.is_empty() && rest.starts_with('{') {
            let end = rest.find('}').unwrap_or(rest.len());
            for member in rest[1..end].split(',') {
                let m: String = member
                    .trim()
                    .chars()
                    .take_while(|&c| is_ident(c) || c == ':')
                    .collect();
                if !m.is_empty() {
                    out.push(m);
                }
            }
            continue;
        }
        out.push(path.trim_end_matches(':').to_string());
    }
    out
}

struct Crate {
    name: String,
    /// Module path -> file (relative to the workspace).
    files: BTreeMap<Vec<String>, String>,
    /// Module -> the modules it imports.
    edges: BTreeMap<Vec<String>, BTreeSet<Vec<String>>>,
}

fn resolve(modules: &BTreeMap<Vec<String>, String>, path: &[String]) -> Option<Vec<String>> {
    (1..=path.len())
        .rev()
        .map(|n| path[..n].to_vec())
        .find(|p| modules.contains_key(p))
}

fn read_crate(root: &Path, member: &str) -> Option<Crate> {
    let src = root.join(member).join("src");
    let manifest = std::fs::read_to_string(root.join(member).join("Cargo.toml")).ok()?;
    let name = manifest
        .lines()
        .find_map(|l| l.strip_prefix("name = \""))
        .map(|n| n.trim_end_matches('"').to_string())?;
    let mut list = Vec::new();
    rust_files(&src, &mut list);
    let files: BTreeMap<Vec<String>, String> = list
        .iter()
        .map(|f| {
            let rel = f.strip_prefix(root).unwrap().to_string_lossy().into_owned();
            (module_path(&src, f), rel)
        })
        .collect();
    let mut edges: BTreeMap<Vec<String>, BTreeSet<Vec<String>>> = BTreeMap::new();
    for (module, file) in &files {
        let text = code(&std::fs::read_to_string(root.join(file)).unwrap());
        let mut to = BTreeSet::new();
        for r in references(&text, "crate::") {
            let path: Vec<String> = r.split("::").map(str::to_string).collect();
            to.extend(resolve(&files, &path));
        }
        // `super::x` from `a::b` (a file `a/b.rs`) is `a::x`.
        if let Some((_, parent)) = module.split_last() {
            for r in references(&text, "super::") {
                let mut path = parent.to_vec();
                path.extend(r.split("::").map(str::to_string));
                to.extend(resolve(&files, &path));
            }
        }
        to.retain(|t| !t.is_empty() && t != module);
        edges.insert(module.clone(), to);
    }
    Some(Crate { name, files, edges })
}

/// A circle among `edges`, if there is one.
fn circle(edges: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>) -> Option<Vec<Vec<String>>> {
    fn visit(
        n: &Vec<String>,
        edges: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>,
        state: &mut BTreeMap<Vec<String>, u8>,
        stack: &mut Vec<Vec<String>>,
    ) -> Option<Vec<Vec<String>>> {
        state.insert(n.clone(), 1);
        stack.push(n.clone());
        for m in edges.get(n).into_iter().flatten() {
            match state.get(m) {
                Some(1) => {
                    let at = stack.iter().position(|s| s == m).unwrap_or(0);
                    let mut c = stack[at..].to_vec();
                    c.push(m.clone());
                    return Some(c);
                }
                Some(_) => {}
                None => {
                    if let Some(c) = visit(m, edges, state, stack) {
                        return Some(c);
                    }
                }
            }
        }
        stack.pop();
        state.insert(n.clone(), 2);
        None
    }
    let mut state = BTreeMap::new();
    for n in edges.keys() {
        if !state.contains_key(n) {
            if let Some(c) = visit(n, edges, &mut state, &mut Vec::new()) {
                return Some(c);
            }
        }
    }
    None
}

fn name(m: &[String]) -> String {
    if m.is_empty() {
        "(root)".to_string()
    } else {
        m.join("::")
    }
}

#[test]
fn no_file_imports_a_file_that_imports_it() {
    let root = workspace();
    let mut report = String::new();
    let mut circles = Vec::new();
    for member in members(&root) {
        let Some(c) = read_crate(&root, &member) else {
            continue;
        };
        report.push_str(&format!("{} ({member}/)\n", c.name));
        for (module, file) in &c.files {
            let to: Vec<String> = c.edges[module].iter().map(|t| name(t)).collect();
            let short = file.rsplit_once("/src/").map_or(file.as_str(), |(_, f)| f);
            report.push_str(&format!(
                "  {short:<22} {}\n",
                if to.is_empty() {
                    "-".to_string()
                } else {
                    to.join(", ")
                }
            ));
        }
        if let Some(circle) = circle(&c.edges) {
            let names: Vec<String> = circle.iter().map(|m| name(m)).collect();
            circles.push(format!("{}: {}", c.name, names.join(" -> ")));
        }
    }
    println!("{report}");
    assert!(
        circles.is_empty(),
        "import circles:\n{}",
        circles.join("\n")
    );
    assert!(report.contains("elfjit-cli"), "{report}");
    assert!(report.contains("elfjit-compile"), "{report}");
}

#[test]
fn the_reader_finds_what_it_must() {
    assert_eq!(
        references("use crate::{a::b, c};\nlet x = crate::d::E;", "crate::"),
        ["a::b", "c", "d::E"]
    );
    assert_eq!(
        references("elfjit_crate::x super::super::y", "crate::"),
        Vec::<String>::new()
    );
    let mut m = BTreeMap::new();
    m.insert(vec!["arch".to_string()], String::new());
    m.insert(vec!["arch".to_string(), "reloc".to_string()], String::new());
    let p = |s: &str| s.split("::").map(str::to_string).collect::<Vec<_>>();
    assert_eq!(resolve(&m, &p("arch::reloc::Via")), Some(p("arch::reloc")));
    assert_eq!(resolve(&m, &p("arch::Arch")), Some(p("arch")));
    let mut e = BTreeMap::new();
    e.insert(p("a"), [p("b")].into_iter().collect());
    e.insert(p("b"), [p("a")].into_iter().collect());
    assert!(circle(&e).is_some());
    e.insert(p("b"), BTreeSet::new());
    assert!(circle(&e).is_none());
}
