//! Prose as the generated references write it into Markdown.

/// Outside `code`, `<`, `>` and `*` are text, not HTML or emphasis.
pub(super) fn escape(text: &str) -> String {
    text.split('`')
        .enumerate()
        .map(|(i, part)| {
            if i % 2 == 1 {
                part.to_owned()
            } else {
                part.replace('<', "&lt;")
                    .replace('>', "&gt;")
                    .replace('*', "\\*")
            }
        })
        .collect::<Vec<_>>()
        .join("`")
}

/// Text of one table cell: a pipe is text, not the end of the cell.
pub(super) fn pipes(text: &str) -> String {
    text.replace('|', "\\|")
}

#[test]
fn markup_outside_code_is_text_and_code_is_left_alone() {
    assert_eq!(
        escape("a <b> *c* `<d> *e*` f*"),
        "a &lt;b&gt; \\*c\\* `<d> *e*` f\\*"
    );
    assert_eq!(pipes("a|b"), "a\\|b");
}
