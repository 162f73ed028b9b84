//! Tokens of the text form, each with its line and column.

use super::ParseError;

#[derive(Clone, Debug, PartialEq)]
pub enum Tok {
    /// `%name` or `%"quoted"` (the flag: quoted, so never a node index even when all digits).
    Value(String, bool),
    /// `@name` or `@"quoted"`.
    Blob(String),
    Ident(String),
    /// An integer literal (decimal, or hex with `0x`), without sign.
    Int(u64),
    /// A float literal with a `.` or an exponent, without sign.
    Float(String),
    Str(String),
    Punct(char),
    Eof,
}

impl Tok {
    pub fn describe(&self) -> String {
        match self {
            Tok::Value(n, _) => format!("value `%{n}`"),
            Tok::Blob(n) => format!("blob `@{n}`"),
            Tok::Ident(s) => format!("`{s}`"),
            Tok::Int(n) => format!("integer {n}"),
            Tok::Float(s) => format!("number {s}"),
            Tok::Str(s) => format!("string {s:?}"),
            Tok::Punct(c) => format!("`{c}`"),
            Tok::Eof => "end of input".to_string(),
        }
    }
}

#[derive(Clone, Debug)]
pub struct Token {
    pub tok: Tok,
    pub line: usize,
    pub col: usize,
}

pub fn lex(src: &str) -> Result<Vec<Token>, ParseError> {
    let chars: Vec<char> = src.chars().collect();
    let mut out = Vec::new();
    let (mut i, mut line, mut col) = (0usize, 1usize, 1usize);
    let err = |line, col, message: String| ParseError { line, col, message };
    while i < chars.len() {
        let c = chars[i];
        let (tl, tc) = (line, col);
        let advance = |n: usize, i: &mut usize, col: &mut usize| {
            *i += n;
            *col += n;
        };
        if c == '\n' {
            i += 1;
            line += 1;
            col = 1;
            continue;
        }
        if c.is_whitespace() {
            advance(1, &mut i, &mut col);
            continue;
        }
        if c == ';' {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
            continue;
        }
        if c == '%' || c == '@' {
            advance(1, &mut i, &mut col);
            let quoted = i < chars.len() && chars[i] == '"';
            let name = if quoted {
                let (s, used) =
                    lex_string(&chars[i..]).ok_or_else(|| err(tl, tc, "unterminated quoted name".into()))?;
                if s.is_empty() {
                    return Err(err(tl, tc, format!("expected a name after `{c}` (a quoted name must not be empty)")));
                }
                advance(used, &mut i, &mut col);
                s
            } else {
                let start = i;
                while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '_' || chars[i] == '.') {
                    advance(1, &mut i, &mut col);
                }
                if start == i {
                    return Err(err(tl, tc, format!("expected a name after `{c}`")));
                }
                chars[start..i].iter().collect()
            };
            out.push(Token {
                tok: if c == '%' { Tok::Value(name, quoted) } else { Tok::Blob(name) },
                line: tl,
                col: tc,
            });
            continue;
        }
        if c == '"' {
            let (s, used) = lex_string(&chars[i..]).ok_or_else(|| err(tl, tc, "unterminated string".into()))?;
            advance(used, &mut i, &mut col);
            out.push(Token { tok: Tok::Str(s), line: tl, col: tc });
            continue;
        }
        if c.is_ascii_digit() {
            let start = i;
            if c == '0' && i + 1 < chars.len() && (chars[i + 1] == 'x' || chars[i + 1] == 'X') {
                advance(2, &mut i, &mut col);
                let hs = i;
                while i < chars.len() && chars[i].is_ascii_hexdigit() {
                    advance(1, &mut i, &mut col);
                }
                let hex: String = chars[hs..i].iter().collect();
                let n = u64::from_str_radix(&hex, 16).map_err(|_| err(tl, tc, format!("bad hex literal 0x{hex}")))?;
                out.push(Token { tok: Tok::Int(n), line: tl, col: tc });
                continue;
            }
            let mut is_float = false;
            while i < chars.len() {
                let d = chars[i];
                if d.is_ascii_digit() {
                    advance(1, &mut i, &mut col);
                } else if d == '.' && !is_float {
                    is_float = true;
                    advance(1, &mut i, &mut col);
                } else if d == 'e' || d == 'E' {
                    is_float = true;
                    advance(1, &mut i, &mut col);
                    if i < chars.len() && (chars[i] == '-' || chars[i] == '+') {
                        advance(1, &mut i, &mut col);
                    }
                } else {
                    break;
                }
            }
            let text: String = chars[start..i].iter().collect();
            let tok = if is_float {
                Tok::Float(text)
            } else {
                Tok::Int(text.parse().map_err(|_| err(tl, tc, format!("integer {text} is too large")))?)
            };
            out.push(Token { tok, line: tl, col: tc });
            continue;
        }
        if c.is_ascii_alphabetic() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '_') {
                advance(1, &mut i, &mut col);
            }
            out.push(Token { tok: Tok::Ident(chars[start..i].iter().collect()), line: tl, col: tc });
            continue;
        }
        if "(){}[],=:*+-/".contains(c) {
            advance(1, &mut i, &mut col);
            out.push(Token { tok: Tok::Punct(c), line: tl, col: tc });
            continue;
        }
        return Err(err(tl, tc, format!("unexpected character {c:?}")));
    }
    out.push(Token { tok: Tok::Eof, line, col });
    Ok(out)
}

/// A `"`-quoted string with `\"`, `\\`, `\n`, `\t` and `\u{...}` escapes; returns the string
/// and the number of chars consumed. `None` if unterminated or badly escaped.
fn lex_string(chars: &[char]) -> Option<(String, usize)> {
    let mut s = String::new();
    let mut i = 1;
    while i < chars.len() {
        match chars[i] {
            '"' => return Some((s, i + 1)),
            '\n' => return None,
            '\\' => {
                i += 1;
                match *chars.get(i)? {
                    'n' => s.push('\n'),
                    't' => s.push('\t'),
                    'r' => s.push('\r'),
                    '0' => s.push('\0'),
                    '\\' => s.push('\\'),
                    '"' => s.push('"'),
                    '\'' => s.push('\''),
                    'u' => {
                        if chars.get(i + 1) != Some(&'{') {
                            return None;
                        }
                        let close = chars[i..].iter().position(|&c| c == '}')? + i;
                        let hex: String = chars[i + 2..close].iter().collect();
                        s.push(char::from_u32(u32::from_str_radix(&hex, 16).ok()?)?);
                        i = close;
                    }
                    _ => return None,
                }
            }
            c => s.push(c),
        }
        i += 1;
    }
    None
}
