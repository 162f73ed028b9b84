//! The text form of a graph: a printer and a parser that round-trip exactly
//! (`parse(&print(g)) == g`).
//!
//! ```text
//! ; comments run to the end of a line
//! blob @w: f32[2, 2] = [1.0, 2.0, 3.0, 4.0]
//! graph mlp(%x: f32[batch, 2]) {
//!   %w = const @w : f32[2, 2]
//!   %1 = matmul(%x, %w) : f32[batch, 2]
//!   %2 = softmax(%1) {axis=-1} : f32[batch, 2]
//!   return %2 as probs
//! }
//! ```
//!
//! Values are `%N` (N is the node's index, so ids print as they parse) or `%name`; names that
//! are not plain identifiers are quoted (`%"onnx::Add_3"`). Attributes print only where they
//! differ from the op's default. Type annotations (`: f32[...]`) are printed on every node
//! and are optional when parsing; where given they must equal the inferred type. Blobs are
//! declared before the graph; the printer can elide large blob data for display, and text
//! with elided data does not parse.

mod lexer;
mod parse;
mod print;

pub use parse::{parse, parse_with, parse_with_blobs, ParseError};
pub use print::{print, print_with, PrintOptions};

/// True for names that print without quotes: ASCII letters, digits, `_` and `.`.
pub fn is_plain_name(name: &str) -> bool {
    !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.')
}

/// True for names that lex as one identifier: a letter or `_`, then letters, digits, `_`.
pub fn is_ident(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// A name as it appears after `%` or `@`: bare when plain, otherwise quoted. An all-digit
/// name is quoted too: bare, `%9` means node number 9.
pub fn quote_name(name: &str) -> String {
    if is_plain_name(name) && !name.bytes().all(|b| b.is_ascii_digit()) {
        name.to_string()
    } else {
        format!("{name:?}")
    }
}
