//! The README's C code is the example's code.
//!
//! README.md's "Use it from C" shows an excerpt of `capi/examples/run_model.c`, which
//! `capi/run_example.sh` compiles, runs and checks. This test keeps the excerpt honest: each
//! run of lines between `/* ... */` markers must appear, line for line, in the example, in the
//! order shown.

fn read(path: &str) -> String {
    std::fs::read_to_string(format!("{}/{path}", env!("CARGO_MANIFEST_DIR"))).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The ```c blocks of the README's section `title`, as their lines.
fn c_blocks(readme: &str, title: &str) -> Vec<Vec<String>> {
    let start = readme.find(&format!("\n## {title}\n")).unwrap_or_else(|| panic!("README.md has no `## {title}`"));
    let section = &readme[start + 1..];
    let section = &section[..section[3..].find("\n## ").map_or(section.len(), |end| end + 3)];
    let mut blocks = Vec::new();
    let mut current: Option<Vec<String>> = None;
    for line in section.lines() {
        match (&mut current, line.trim()) {
            (None, "```c") => current = Some(Vec::new()),
            (Some(_), "```") => blocks.extend(current.take()),
            (Some(block), _) => block.push(line.to_string()),
            (None, _) => {}
        }
    }
    blocks
}

#[test]
fn the_readme_shows_an_excerpt_of_the_c_example() {
    let example: Vec<String> = read("examples/run_model.c").lines().map(str::to_string).collect();
    let blocks = c_blocks(&read("../README.md"), "Use it from C");
    assert!(!blocks.is_empty(), "README.md's C section has no ```c block");
    let mut from = 0;
    for block in blocks {
        for piece in block.split(|line| line.trim() == "/* ... */").filter(|p| !p.is_empty()) {
            let found = (from..=example.len().saturating_sub(piece.len()))
                .find(|&i| example[i..i + piece.len()] == *piece)
                .unwrap_or_else(|| {
                    panic!("README.md shows lines that are not (in this order) in run_model.c:\n{}", piece.join("\n"))
                });
            from = found + piece.len();
        }
    }
}
