//! The root crate's top-level modules form no dependency cycle (issue "Layers a newcomer can
//! see"). The same check as `scripts/module_cycles.py`, in Rust with std only so CI needs
//! nothing new: every `crate::X` (and, in a top-level file, `super::X`) reference outside
//! comments, string literals and `#[cfg(test)]` items is an edge from the file's top-level
//! module to `X`; a strongly connected component of more than one module is a cycle.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// Module graph: module → (dependency → files that reference it).
type Edges = BTreeMap<String, BTreeMap<String, BTreeSet<String>>>;

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).expect("read src") {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The text with comments, string literals and char literals blanked out.
fn strip_comments_and_strings(text: &str) -> String {
    let c: Vec<char> = text.chars().collect();
    let (mut out, mut i) = (String::with_capacity(text.len()), 0);
    while i < c.len() {
        if c[i] == '/' && c.get(i + 1) == Some(&'/') {
            while i < c.len() && c[i] != '\n' {
                i += 1;
            }
        } else if c[i] == '/' && c.get(i + 1) == Some(&'*') {
            let mut depth = 0;
            while i < c.len() {
                if c[i] == '/' && c.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if c[i] == '*' && c.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if c[i] == 'r'
            && (i == 0 || !is_ident(c[i - 1]))
            && matches!(c.get(i + 1), Some('"') | Some('#'))
        {
            // Raw string r#"…"#: skip to the quote followed by as many hashes.
            let mut j = i + 1;
            let mut hashes = 0;
            while c.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if c.get(j) != Some(&'"') {
                out.push(c[i]);
                i += 1;
                continue;
            }
            j += 1;
            loop {
                if j >= c.len() {
                    break;
                }
                if c[j] == '"' && (1..=hashes).all(|k| c.get(j + k) == Some(&'#')) {
                    j += 1 + hashes;
                    break;
                }
                j += 1;
            }
            out.push_str("\"\"");
            i = j;
        } else if c[i] == '"' {
            i += 1;
            while i < c.len() && c[i] != '"' {
                i += if c[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
            out.push_str("\"\"");
        } else if c[i] == '\'' && (c.get(i + 2) == Some(&'\'') || (c.get(i + 1) == Some(&'\\'))) {
            // A char literal ('x', '\n', '\u{..}'); lifetimes ('a) have no closing quote.
            let mut j = i + 1;
            if c[j] == '\\' {
                j += 1;
                while j < c.len() && c[j] != '\'' {
                    j += 1;
                }
            } else {
                j += 1;
            }
            out.push_str("' '");
            i = j + 1;
        } else {
            out.push(c[i]);
            i += 1;
        }
    }
    out
}

/// The text without its `#[cfg(test)]` items, and the names of `#[cfg(test)] mod x;`.
fn strip_cfg_test(text: &str) -> (String, Vec<String>) {
    const ATTR: &str = "#[cfg(test)]";
    let (mut out, mut skipped, mut rest) = (String::new(), Vec::new(), text);
    while let Some(at) = rest.find(ATTR) {
        out.push_str(&rest[..at]);
        let after = &rest[at + ATTR.len()..];
        let Some(end) = after.find(['{', ';']) else {
            rest = "";
            break;
        };
        if after.as_bytes()[end] == b';' {
            let item: Vec<&str> = after[..end].split_whitespace().collect();
            if let [.., "mod", name] = item.as_slice() {
                skipped.push(name.to_string());
            }
            rest = &after[end + 1..];
            continue;
        }
        let mut depth = 0usize;
        let mut close = after.len();
        for (k, ch) in after[end..].char_indices() {
            match ch {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        close = end + k + 1;
                        break;
                    }
                }
                _ => {}
            }
        }
        rest = &after[close.min(after.len())..];
    }
    out.push_str(rest);
    (out, skipped)
}

/// Names referenced as `prefix::name` or `prefix::{a, b::c, …}` (the group's first segments).
fn refs(text: &str, prefix: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut from = 0;
    while let Some(k) = text[from..].find(prefix) {
        let start = from + k;
        from = start + prefix.len();
        if start > 0 && text[..start].chars().next_back().is_some_and(is_ident) {
            continue;
        }
        let tail = text[from..].trim_start();
        let Some(tail) = tail.strip_prefix("::") else {
            continue;
        };
        let tail = tail.trim_start();
        if let Some(group) = tail.strip_prefix('{') {
            let mut depth = 1;
            let mut item = String::new();
            let mut items = Vec::new();
            for ch in group.chars() {
                match ch {
                    '{' => depth += 1,
                    '}' => {
                        depth -= 1;
                        if depth == 0 {
                            break;
                        }
                    }
                    ',' if depth == 1 => {
                        items.push(std::mem::take(&mut item));
                        continue;
                    }
                    _ => {}
                }
                if depth == 1 {
                    item.push(ch);
                }
            }
            items.push(item);
            for it in items {
                let name: String = it
                    .trim_start()
                    .chars()
                    .take_while(|&c| is_ident(c))
                    .collect();
                if !name.is_empty() {
                    out.insert(name);
                }
            }
        } else {
            let name: String = tail.chars().take_while(|&c| is_ident(c)).collect();
            if !name.is_empty() {
                out.insert(name);
            }
        }
    }
    out
}

/// The top-level module of a path relative to src/ (`None` for lib.rs).
fn module_of(rel: &Path) -> Option<String> {
    let mut parts = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned());
    let first = parts.next()?;
    if parts.next().is_some() {
        return Some(first);
    }
    let name = first.strip_suffix(".rs")?.to_string();
    (name != "lib").then_some(name)
}

fn module_graph(src: &Path) -> Edges {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    files.sort();
    let rels: Vec<PathBuf> = files
        .iter()
        .map(|f| f.strip_prefix(src).expect("under src").to_path_buf())
        .collect();
    let modules: BTreeSet<String> = rels.iter().filter_map(|r| module_of(r)).collect();
    // `pub use graph::fused;` in lib.rs: `crate::fused::` is a path into `graph`.
    let mut alias = BTreeMap::new();
    let lib = fs::read_to_string(src.join("lib.rs")).expect("lib.rs");
    for line in lib.lines() {
        if let Some(path) = line
            .strip_prefix("pub use ")
            .and_then(|l| l.strip_suffix(';'))
        {
            if let Some((a, b)) = path.split_once("::") {
                let lower = |s: &str| {
                    !s.is_empty()
                        && s.chars()
                            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
                };
                if modules.contains(a) && lower(b) {
                    alias.insert(b.to_string(), a.to_string());
                }
            }
        }
    }
    let mut texts = BTreeMap::new();
    let mut test_only = BTreeSet::new();
    for (file, rel) in files.iter().zip(&rels) {
        let raw = fs::read_to_string(file).expect("read source");
        let (text, skipped) = strip_cfg_test(&strip_comments_and_strings(&raw));
        let dir = rel.parent().unwrap_or(Path::new("")).to_path_buf();
        let stem = rel
            .file_stem()
            .expect("stem")
            .to_string_lossy()
            .into_owned();
        let base = if stem == "mod" || stem == "lib" {
            dir
        } else {
            dir.join(&stem)
        };
        for name in skipped {
            test_only.insert(base.join(format!("{name}.rs")));
            test_only.insert(base.join(&name).join("mod.rs"));
        }
        texts.insert(rel.clone(), text);
    }
    let mut edges: Edges = modules
        .iter()
        .map(|m| (m.clone(), BTreeMap::new()))
        .collect();
    for rel in &rels {
        let Some(from) = module_of(rel) else { continue };
        if test_only.contains(rel) {
            continue;
        }
        let text = &texts[rel];
        let mut targets = refs(text, "crate");
        // In a top-level file (src/X.rs or src/X/mod.rs) `super::` is the crate root.
        if rel.components().count() == 1 || rel == &Path::new(&from).join("mod.rs") {
            targets.extend(refs(text, "super"));
        }
        for t in targets {
            let t = alias.get(&t).cloned().unwrap_or(t);
            if t != from && modules.contains(&t) {
                let files = edges.get_mut(&from).expect("module").entry(t).or_default();
                files.insert(rel.display().to_string());
            }
        }
    }
    edges
}

/// Strongly connected components (Tarjan, iterative enough for a few dozen modules).
fn sccs(edges: &Edges) -> Vec<Vec<String>> {
    struct State<'a> {
        edges: &'a Edges,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on: BTreeSet<&'a str>,
        out: Vec<Vec<String>>,
    }
    fn visit<'a>(s: &mut State<'a>, v: &'a str) {
        let n = s.index.len();
        s.index.insert(v, n);
        s.low.insert(v, n);
        s.stack.push(v);
        s.on.insert(v);
        for w in s.edges[v].keys() {
            let w = w.as_str();
            if !s.index.contains_key(w) {
                visit(s, w);
                let lw = s.low[w];
                let lv = s.low.get_mut(v).expect("low");
                *lv = (*lv).min(lw);
            } else if s.on.contains(w) {
                let iw = s.index[w];
                let lv = s.low.get_mut(v).expect("low");
                *lv = (*lv).min(iw);
            }
        }
        if s.low[v] == s.index[v] {
            let mut comp = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on.remove(w);
                comp.push(w.to_string());
                if w == v {
                    break;
                }
            }
            comp.sort();
            s.out.push(comp);
        }
    }
    let mut s = State {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in edges.keys() {
        if !s.index.contains_key(v.as_str()) {
            visit(&mut s, v);
        }
    }
    s.out
}

fn cycles(edges: &Edges) -> Vec<String> {
    sccs(edges)
        .into_iter()
        .filter(|c| c.len() > 1)
        .map(|comp| {
            let mut msg = format!("cycle: {}", comp.join(", "));
            for a in &comp {
                for (b, files) in &edges[a] {
                    if comp.contains(b) {
                        let files: Vec<_> = files.iter().cloned().collect();
                        msg += &format!("\n  {a} -> {b}  ({})", files.join(", "));
                    }
                }
            }
            msg
        })
        .collect()
}

#[test]
fn root_crate_modules_form_no_cycle() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let edges = module_graph(&src);
    // The check sees the modules it must: the format, op semantics and the planner.
    for m in [
        "graph", "plan", "ops", "cost", "planner", "budget", "tiers", "pipeline",
    ] {
        assert!(edges.contains_key(m), "module {m} not found in {edges:?}");
    }
    assert!(edges["planner"].contains_key("plan"), "{edges:?}");
    let found = cycles(&edges);
    assert!(found.is_empty(), "module cycles:\n{}", found.join("\n"));
}

#[test]
fn the_checker_finds_a_cycle_and_ignores_test_code_comments_and_strings() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    fs::create_dir_all(src.join("b")).unwrap();
    fs::write(src.join("lib.rs"), "pub mod a;\npub mod b;\npub mod c;\n").unwrap();
    fs::write(src.join("a.rs"), "use crate::{b::X, c};\n").unwrap();
    fs::write(
        src.join("b/mod.rs"),
        "pub mod inner;\n#[cfg(test)]\nmod tests;\n// crate::c::Y\nconst S: &str = \"crate::c\";\n",
    )
    .unwrap();
    fs::write(
        src.join("b/inner.rs"),
        "pub fn f() { super::super::a::g(); }\n",
    )
    .unwrap();
    fs::write(src.join("b/tests.rs"), "use crate::c::Z;\n").unwrap();
    fs::write(
        src.join("c.rs"),
        "pub fn g() { crate::b::inner::f() }\n#[cfg(test)]\nmod tests { use crate::a::Q; }\n",
    )
    .unwrap();
    let edges = module_graph(&src);
    assert_eq!(edges["a"].keys().collect::<Vec<_>>(), ["b", "c"]);
    assert!(edges["b"].is_empty(), "{edges:?}");
    assert_eq!(edges["c"].keys().collect::<Vec<_>>(), ["b"]);
    let found = cycles(&edges);
    assert!(found.is_empty(), "{found:?}");
    // a -> c -> b -> a once b uses a.
    let mut cyclic = edges.clone();
    cyclic
        .get_mut("b")
        .unwrap()
        .insert("a".into(), BTreeSet::new());
    let found = cycles(&cyclic);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].starts_with("cycle: a, b"), "{found:?}");
}

/// The package names listed in one `[dependencies]`-like table of a Cargo.toml (the keys of
/// that section, up to the next `[` header).
fn dependency_names(manifest: &str, section: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut inside = false;
    for line in manifest.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            inside = line == section;
            continue;
        }
        if inside && !line.starts_with('#') {
            if let Some((key, _)) = line.split_once('=') {
                let key = key.trim();
                names.insert(key.strip_suffix(".workspace").unwrap_or(key).to_string());
            }
        }
    }
    names
}

fn manifest(crate_dir: &str) -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    fs::read_to_string(root.join(crate_dir).join("Cargo.toml")).unwrap()
}

#[test]
fn only_the_solver_names_highs_and_the_api_links_no_executor() {
    let deps = |dir: &str| dependency_names(&manifest(dir), "[dependencies]");
    let root = deps(".");
    assert!(root.contains("memplan-solver"), "{root:?}");
    for banned in [
        "highs",
        "highs-sys",
        "good_lp",
        "memplan-executor",
        "cudarc",
    ] {
        assert!(!root.contains(banned), "memplan depends on {banned}");
    }
    let api = deps("api");
    for banned in ["memplan-executor", "cudarc", "highs", "highs-sys"] {
        assert!(!api.contains(banned), "memplan-api depends on {banned}");
    }
    let executor = deps("executor");
    assert!(executor.contains("memplan"), "{executor:?}");
    for banned in ["memplan-solver", "memplan-api", "highs", "highs-sys"] {
        assert!(
            !executor.contains(banned),
            "memplan-executor depends on {banned}"
        );
    }
    assert!(deps("solver").contains("highs"));
    // And no source file outside the solver names the HiGHS crates.
    for dir in ["src", "api/src", "executor/src", "cli/src"] {
        let mut files = Vec::new();
        rust_files(&Path::new(env!("CARGO_MANIFEST_DIR")).join(dir), &mut files);
        for f in files {
            let code = strip_comments_and_strings(&fs::read_to_string(&f).unwrap());
            let names_highs = code
                .split(|c: char| !is_ident(c))
                .any(|token| token == "highs" || token == "highs_sys");
            assert!(!names_highs, "{} names highs", f.display());
        }
    }
}

#[test]
fn dependency_tables_are_read_by_section() {
    let toml = "[package]\nname = \"x\"\n[dependencies]\na.workspace = true\nb = \"1\"\n# c = 1\n[dev-dependencies]\nd = \"1\"\n";
    let names = dependency_names(toml, "[dependencies]");
    assert_eq!(names, BTreeSet::from(["a".to_string(), "b".to_string()]));
}
