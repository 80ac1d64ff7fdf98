//! The import check: reads every file under `src/` and fails when a top-level module imports
//! one it must not, so the layering in the crate docs cannot quietly erode.
//!
//! Each file is split into Rust tokens (comments and strings are not code, so a doc link or a
//! message that names `crate::ui` does not count), and every path that leaves the file's
//! top-level module is collected: `crate::m::...`, `crate::{m, n}` and `super::` chains that
//! climb to the crate root. Test code counts too: a test that reaches upward is a hidden
//! dependency all the same.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::str::FromStr;

use proc_macro2::{Delimiter, TokenStream, TokenTree};

/// The base: plain data, text formatting, the agent protocol, /proc and system calls, the
/// config file's values, the terminal. Each may use the base modules listed with it, nothing
/// above.
const BASE: &[(&str, &[&str])] = &[
    ("model", &[]),
    ("format", &[]),
    // Its sentences (a directory refused for a write) name paths through format's escaping.
    ("sys", &["model", "format"]),
    ("protocol", &["sys", "format"]),
    // The `[ui]` save writes only into a directory sys finds safe.
    ("config", &["format", "sys"]),
    // The input thread hands the UI thread's core back (sys::sched) before each key.
    ("terminal", &["model", "config", "sys"]),
    // The tests' waiting and skipping rules (tests/common/ci.rs), for unit tests at any layer.
    ("test_ci", &[]),
];

/// Everything above the base, with what each may import besides the base. The order is the
/// layering, lowest first: nothing here names a module further down the list.
const ABOVE: &[(&str, &[&str])] = &[
    ("collect", &[]),
    ("rules", &[]),
    ("actions", &[]),
    ("launch", &[]),
    ("tch_agent", &[]),
    ("sampler", &["collect", "rules"]),
    ("settings", &["rules"]),
    ("app", &["sampler", "actions", "rules", "settings"]),
    ("ui", &["app", "actions", "rules"]),
    ("report", &["sampler", "rules"]),
    ("serve", &["sampler", "collect", "rules", "settings"]),
    ("cluster", &["serve", "settings"]),
    ("memsnap", &[]),
    // Recordings are written from the sampler's snapshots (`torchtop record`) or from the
    // monitor's (`R`, which sets the app's header badge).
    ("record", &["sampler", "app"]),
    // The replay feeds the monitor's app from a recording; the event loop drives it.
    ("replay", &["record", "app"]),
    (
        "event",
        &[
            "ui", "app", "sampler", "actions", "memsnap", "record", "replay",
        ],
    ),
    (
        "cli",
        &[
            "serve", "cluster", "memsnap", "settings", "record", "replay",
        ],
    ),
];

/// Modules that are not part of the picture: the crate root and this check.
const OUTSIDE: &[&str] = &["lib", "main", "layering"];

fn allowed() -> BTreeMap<&'static str, BTreeSet<&'static str>> {
    let base: BTreeSet<&str> = BASE.iter().map(|(m, _)| *m).collect();
    let mut allowed = BTreeMap::new();
    for (module, deps) in BASE {
        let mut set: BTreeSet<&str> = deps.iter().copied().collect();
        // The tests' rules serve unit tests at any layer, the base's included.
        if *module != "test_ci" {
            set.insert("test_ci");
        }
        allowed.insert(*module, set);
    }
    for (module, deps) in ABOVE {
        let mut set: BTreeSet<&str> = base.clone();
        set.extend(deps.iter().copied());
        allowed.insert(*module, set);
    }
    allowed
}

/// Every `.rs` file under `dir`, sorted.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("read src") {
            let path = entry.expect("read src").path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

/// The module path of a file: `src/a/b.rs` and `src/a/b/mod.rs` are `[a, b]`.
fn module_path(src: &Path, file: &Path) -> Vec<String> {
    let relative = file.strip_prefix(src).expect("under src");
    let mut parts: Vec<String> = relative
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    let last = parts.pop().expect("a file name");
    let stem = last.trim_end_matches(".rs");
    if stem != "mod" {
        parts.push(stem.to_string());
    }
    parts
}

/// The top-level modules the tokens of a file at `module` name outside their own.
fn imports(tokens: TokenStream, module: &[String], found: &mut BTreeSet<String>) {
    let tokens: Vec<TokenTree> = tokens.into_iter().collect();
    let mut i = 0;
    while i < tokens.len() {
        match &tokens[i] {
            TokenTree::Ident(ident) if ident == "crate" && path_sep_at(&tokens, i + 1) => {
                crate_paths(tokens.get(i + 3), found);
                i += 3;
                continue;
            }
            TokenTree::Ident(ident) if ident == "super" && !preceded_by_path_sep(&tokens, i) => {
                i = supers(&tokens, i, module, found);
                continue;
            }
            TokenTree::Ident(ident) if ident == "mod" => {
                if let (Some(TokenTree::Ident(name)), Some(TokenTree::Group(body))) =
                    (tokens.get(i + 1), tokens.get(i + 2))
                {
                    if body.delimiter() == Delimiter::Brace {
                        let mut inner = module.to_vec();
                        inner.push(name.to_string());
                        imports(body.stream(), &inner, found);
                        i += 3;
                        continue;
                    }
                }
            }
            TokenTree::Group(group) => imports(group.stream(), module, found),
            _ => {}
        }
        i += 1;
    }
}

/// Whether `::` starts at `at`.
fn path_sep_at(tokens: &[TokenTree], at: usize) -> bool {
    matches!(
        (tokens.get(at), tokens.get(at + 1)),
        (Some(TokenTree::Punct(a)), Some(TokenTree::Punct(b))) if a.as_char() == ':' && b.as_char() == ':'
    )
}

fn preceded_by_path_sep(tokens: &[TokenTree], at: usize) -> bool {
    at >= 2 && path_sep_at(tokens, at - 2)
}

/// After `crate::`: one name, or a `{a, b::c}` group of them.
fn crate_paths(next: Option<&TokenTree>, found: &mut BTreeSet<String>) {
    match next {
        Some(TokenTree::Ident(name)) => {
            found.insert(name.to_string());
        }
        Some(TokenTree::Group(group)) if group.delimiter() == Delimiter::Brace => {
            let mut at_start = true;
            for token in group.stream() {
                match &token {
                    TokenTree::Ident(name) if at_start => {
                        if name != "self" {
                            found.insert(name.to_string());
                        }
                        at_start = false;
                    }
                    TokenTree::Punct(p) if p.as_char() == ',' => at_start = true,
                    _ => at_start = false,
                }
            }
        }
        _ => {}
    }
}

/// A `super::super::x` chain from `start`: when it climbs to the crate root, `x` is another
/// top-level module. Returns the index after the chain.
fn supers(
    tokens: &[TokenTree],
    start: usize,
    module: &[String],
    found: &mut BTreeSet<String>,
) -> usize {
    let mut i = start;
    let mut climbs = 0;
    while matches!(&tokens.get(i), Some(TokenTree::Ident(id)) if id == "super")
        && path_sep_at(tokens, i + 1)
    {
        climbs += 1;
        i += 3;
    }
    if climbs >= module.len() {
        crate_paths(tokens.get(i), found);
    }
    i.max(start + 1)
}

/// `module -> the top-level modules it imports`, over every file under `src`.
fn import_graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in rust_files(src) {
        let module = module_path(src, &file);
        let text = std::fs::read_to_string(&file).expect("read a source file");
        let tokens = TokenStream::from_str(&text)
            .unwrap_or_else(|e| panic!("{} does not tokenize: {e:?}", file.display()));
        let mut found = BTreeSet::new();
        imports(tokens, &module, &mut found);
        let top = module[0].clone();
        found.remove(&top);
        graph.entry(top).or_default().extend(found);
    }
    graph
}

/// Each forbidden import, as "a imports b".
fn violations(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<String> {
    let allowed = allowed();
    let mut wrong = Vec::new();
    for (module, deps) in graph {
        if OUTSIDE.contains(&module.as_str()) {
            continue;
        }
        let Some(may) = allowed.get(module.as_str()) else {
            wrong.push(format!(
                "{module} is not in the layering table of src/layering.rs"
            ));
            continue;
        };
        for dep in deps {
            if !may.contains(dep.as_str()) {
                wrong.push(format!("{module} imports {dep}"));
            }
        }
    }
    wrong
}

fn src_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

#[test]
fn no_module_imports_a_layer_above_it() {
    let wrong = violations(&import_graph(&src_dir()));
    assert!(
        wrong.is_empty(),
        "imports against the layering (see the crate docs in src/lib.rs):\n{}",
        wrong.join("\n")
    );
}

#[test]
fn the_table_itself_has_no_cycle() {
    // Every module may only name modules listed before it (the base counts as first).
    let mut seen: BTreeSet<&str> = BASE.iter().map(|(m, _)| *m).collect();
    for (module, deps) in BASE {
        for dep in *deps {
            assert!(
                BASE.iter().position(|(m, _)| m == dep)
                    < BASE.iter().position(|(m, _)| m == module),
                "base module {module} names {dep}, listed after it"
            );
        }
    }
    for (module, deps) in ABOVE {
        for dep in *deps {
            assert!(seen.contains(dep), "{module} names {dep}, listed after it");
        }
        seen.insert(module);
    }
}

#[test]
fn the_check_sees_imports_in_every_form() {
    let code = r#"
        use crate::ui::draw;
        use crate::{app::App, model};
        fn f() { let _ = crate::rules::evaluate(); format!("{}", crate::sys::x()); }
        // crate::comment does not count
        const S: &str = "crate::string does not count";
        mod inner { use super::super::cluster::Thing; }
    "#;
    let mut found = BTreeSet::new();
    imports(
        TokenStream::from_str(code).unwrap(),
        &["here".to_string()],
        &mut found,
    );
    let found: Vec<&str> = found.iter().map(String::as_str).collect();
    assert_eq!(found, ["app", "cluster", "model", "rules", "sys", "ui"]);
}
