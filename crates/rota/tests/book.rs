//! The book (`docs/`, built with mdBook) builds without a warning, every chapter is in its
//! `SUMMARY.md`, and no link in it or in the README points at nothing: every relative link of
//! the built pages names a file of the book and, with a `#fragment`, an id on that page.
//!
//! mdBook comes from `scripts/mdbook --install` (run by `scripts/test`); the test does not
//! install it.

use std::collections::{BTreeSet, HashMap};
use std::path::{Component, Path, PathBuf};
use std::process::Command;

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("the repository's root")
}

fn mdbook() -> PathBuf {
    let out = Command::new(repo_root().join("scripts/mdbook"))
        .arg("--path")
        .output()
        .expect("run scripts/mdbook --path");
    assert!(
        out.status.success(),
        "mdBook is not installed: run scripts/mdbook --install (scripts/test does): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

/// Every value of `attribute="…"` in an HTML page.
fn attributes<'a>(html: &'a str, attribute: &str) -> Vec<&'a str> {
    let needle = format!(" {attribute}=\"");
    html.match_indices(&needle)
        .filter_map(|(at, _)| {
            let rest = &html[at + needle.len()..];
            rest.find('"').map(|end| &rest[..end])
        })
        .collect()
}

/// `a/b/../c` as `a/c`, without touching the filesystem.
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

fn html_files(dir: &Path, found: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir)
        .expect("read the built book")
        .flatten()
    {
        let path = entry.path();
        if path.is_dir() {
            html_files(&path, found);
        } else if path.extension().is_some_and(|e| e == "html") {
            found.push(path);
        }
    }
}

/// The broken relative links of the built book, as "page: link".
fn broken_links(book: &Path) -> Vec<String> {
    let mut pages = Vec::new();
    html_files(book, &mut pages);
    let mut ids: HashMap<PathBuf, BTreeSet<String>> = HashMap::new();
    let mut texts = HashMap::new();
    for page in &pages {
        let html = std::fs::read_to_string(page).expect("read a page");
        ids.insert(
            page.clone(),
            attributes(&html, "id")
                .into_iter()
                .map(str::to_owned)
                .collect(),
        );
        texts.insert(page.clone(), html);
    }
    let mut broken = Vec::new();
    for page in &pages {
        // The print page repeats every chapter with its links rewritten to its own anchors; the
        // 404 page links to the site's root, which a web server gives it.
        if page
            .file_name()
            .is_some_and(|n| n == "print.html" || n == "404.html")
        {
            continue;
        }
        for link in attributes(&texts[page], "href") {
            if link.contains("://")
                || link.starts_with("mailto:")
                || link.starts_with("javascript:")
            {
                continue;
            }
            let (file, fragment) = link.split_once('#').unwrap_or((link, ""));
            let target = if file.is_empty() {
                page.clone()
            } else {
                normalize(&page.parent().expect("a page in a directory").join(file))
            };
            let ok = if !target.starts_with(book) || !target.exists() {
                false
            } else if fragment.is_empty() {
                true
            } else {
                ids.get(&target).is_some_and(|ids| ids.contains(fragment))
            };
            if !ok {
                let page = page.strip_prefix(book).unwrap_or(page);
                broken.push(format!("{}: {link}", page.display()));
            }
        }
    }
    broken
}

#[test]
fn the_book_builds_without_warnings_and_no_link_is_broken() {
    let root = repo_root();
    let out_dir = tempfile::tempdir().expect("tempdir");
    let out = Command::new(mdbook())
        .arg("build")
        .arg(root.join("docs"))
        .arg("--dest-dir")
        .arg(out_dir.path())
        .output()
        .expect("run mdbook build");
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "mdbook build docs failed:\n{log}");
    assert!(
        !log.contains("WARN") && !log.contains("ERROR"),
        "mdbook build docs warned:\n{log}"
    );
    let book = out_dir.path().canonicalize().expect("the built book");
    let broken = broken_links(&book);
    assert!(
        broken.is_empty(),
        "broken links in the book:\n{}",
        broken.join("\n")
    );
}

#[test]
fn every_chapter_of_docs_is_in_the_summary() {
    let docs = repo_root().join("docs");
    let summary = std::fs::read_to_string(docs.join("SUMMARY.md")).expect("docs/SUMMARY.md");
    let mut missing = Vec::new();
    let mut stack = vec![docs.clone()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("read docs/").flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "md") {
                let relative = path.strip_prefix(&docs).expect("under docs/");
                let relative = relative.to_string_lossy();
                if relative != "SUMMARY.md" && !summary.contains(&format!("]({relative})")) {
                    missing.push(relative.into_owned());
                }
            }
        }
    }
    assert!(
        missing.is_empty(),
        "chapters of docs/ that docs/SUMMARY.md does not list (the book leaves them out): {missing:?}"
    );
}

#[test]
fn every_relative_link_of_the_readme_names_a_file() {
    let root = repo_root();
    let readme = std::fs::read_to_string(root.join("README.md")).expect("README.md");
    let broken: Vec<&str> = readme
        .match_indices("](")
        .filter_map(|(at, _)| {
            let rest = &readme[at + 2..];
            rest.find(')').map(|end| &rest[..end])
        })
        .filter(|link| !link.contains("://") && !link.starts_with('#'))
        .filter(|link| {
            let file = link.split_once('#').map_or(*link, |(f, _)| f);
            !root.join(file).exists()
        })
        .collect();
    assert!(
        broken.is_empty(),
        "README.md links to missing files: {broken:?}"
    );
}

#[test]
fn a_link_to_a_missing_page_or_id_is_found() {
    let dir = tempfile::tempdir().expect("tempdir");
    let book = dir.path().canonicalize().expect("canonical");
    std::fs::create_dir(book.join("guide")).expect("mkdir");
    std::fs::write(
        book.join("guide/a.html"),
        r##"<h1 id="top">A</h1><a href="b.html#here">ok</a> <a href="#top">ok</a>
            <a href="b.html#gone">no id</a> <a href="../c.html">no page</a>
            <a href="https://example.org/x">outside</a>"##,
    )
    .expect("write a");
    std::fs::write(book.join("guide/b.html"), r#"<h2 id="here">B</h2>"#).expect("write b");
    assert_eq!(
        broken_links(&book),
        vec![
            "guide/a.html: b.html#gone".to_owned(),
            "guide/a.html: ../c.html".to_owned()
        ]
    );
}

/// The walk from a sentinel file to the uncordon names files of the code: each one exists, so
/// that a file renamed or removed shows up here rather than in a reader's search.
#[test]
fn every_file_the_walk_names_exists() {
    let root = repo_root();
    let walk = std::fs::read_to_string(root.join("docs/design/walk.md")).expect("the walk");
    let named: Vec<&str> = walk
        .split('`')
        .skip(1)
        .step_by(2)
        .filter(|code| code.starts_with("rota") && code.contains("/src/"))
        .collect();
    assert!(named.len() >= 20, "the walk names its files: {named:?}");
    let missing: Vec<&&str> = named
        .iter()
        .filter(|path| !root.join("crates").join(path).exists())
        .collect();
    assert!(
        missing.is_empty(),
        "the walk names files that do not exist: {missing:?}"
    );
}
