//! Parser for the text form. Errors carry line:column and say what was expected.

use std::fmt;
use std::sync::Arc;

use half::{bf16, f16};

use super::lexer::{lex, Tok, Token};
use crate::ir::{AttrValue, Attrs, DType, Dim, Graph, Shape, SizeExpr, TensorType, Value};
use crate::limits::{named, Limits};
use crate::ops::OpKind;
use crate::tensor::{checked_numel, Tensor, TensorData};

/// A syntax or type error in graph text, at a line and column (both 1-based).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParseError {
    /// The line, from 1.
    pub line: usize,
    /// The column, from 1.
    pub col: usize,
    /// What is wrong there.
    pub message: String,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}: {}", self.line, self.col, self.message)
    }
}

impl std::error::Error for ParseError {}

/// Parses one graph (with its blobs) from text, within [`Limits::default`].
pub fn parse(src: &str) -> Result<Graph, ParseError> {
    parse_with(src, &Limits::default())
}

/// Parses one graph from text within `limits`: the text's length within
/// `Limits::max_file_bytes`, each blob's data within `Limits::max_tensor_bytes`, the nodes
/// within `Limits::max_nodes` (a limit reached is an error at the place it is reached, naming
/// the limit).
pub fn parse_with(src: &str, limits: &Limits) -> Result<Graph, ParseError> {
    parse_with_blobs(src, limits, None)
}

/// [`parse_with`], where a blob whose data reads `elided` takes the tensor of its name in
/// `external` (which must have the declared dtype and shape): how an artifact stores a graph,
/// its text with the blobs' bytes beside it. Without `external`, elided data is an error.
pub fn parse_with_blobs(
    src: &str,
    limits: &Limits,
    external: Option<&std::collections::HashMap<String, Arc<Tensor>>>,
) -> Result<Graph, ParseError> {
    if src.len() as u64 > limits.max_file_bytes {
        let message =
            format!("the text is {} bytes, above {}", src.len(), named("max_file_bytes", limits.max_file_bytes));
        return Err(ParseError { line: 1, col: 1, message });
    }
    let tokens = lex(src)?;
    let mut p = Parser { tokens, pos: 0, dim_depth: 0, limits: limits.clone(), nodes: 0, external };
    p.file()
}

struct Parser<'a> {
    /// Tensors for blobs printed as `elided` ([`parse_with_blobs`]).
    external: Option<&'a std::collections::HashMap<String, Arc<Tensor>>>,
    tokens: Vec<Token>,
    pos: usize,
    limits: Limits,
    /// Nodes parsed so far, against `limits.max_nodes`.
    nodes: u64,
    /// Nesting of parentheses and calls in the dim being parsed (bounded by
    /// [`MAX_DIM_NESTING`], so hostile text cannot exhaust the stack).
    dim_depth: usize,
}

/// Deepest nesting of parentheses and `min`/`max` calls a dim may have.
pub const MAX_DIM_NESTING: usize = 64;

impl Parser<'_> {
    fn peek(&self) -> &Token {
        &self.tokens[self.pos.min(self.tokens.len() - 1)]
    }

    fn next(&mut self) -> Token {
        let t = self.peek().clone();
        if self.pos < self.tokens.len() - 1 {
            self.pos += 1;
        }
        t
    }

    fn error_at(&self, t: &Token, message: impl Into<String>) -> ParseError {
        ParseError { line: t.line, col: t.col, message: message.into() }
    }

    fn expected(&self, what: &str) -> ParseError {
        let t = self.peek();
        self.error_at(t, format!("expected {what}, found {}", t.tok.describe()))
    }

    fn eat_punct(&mut self, c: char) -> bool {
        if self.peek().tok == Tok::Punct(c) {
            self.next();
            true
        } else {
            false
        }
    }

    fn expect_punct(&mut self, c: char) -> Result<(), ParseError> {
        if self.eat_punct(c) {
            Ok(())
        } else {
            Err(self.expected(&format!("`{c}`")))
        }
    }

    fn is_ident(&self, word: &str) -> bool {
        matches!(&self.peek().tok, Tok::Ident(s) if s == word)
    }

    fn expect_ident(&mut self, word: &str) -> Result<(), ParseError> {
        if self.is_ident(word) {
            self.next();
            Ok(())
        } else {
            Err(self.expected(&format!("`{word}`")))
        }
    }

    fn ident(&mut self, what: &str) -> Result<String, ParseError> {
        match &self.peek().tok {
            Tok::Ident(s) => {
                let s = s.clone();
                self.next();
                Ok(s)
            }
            _ => Err(self.expected(what)),
        }
    }

    fn file(&mut self) -> Result<Graph, ParseError> {
        let mut blobs: Vec<(String, Arc<Tensor>)> = Vec::new();
        while self.is_ident("blob") {
            let start = self.peek().clone();
            let (name, t) = self.blob()?;
            if blobs.iter().any(|(n, _)| *n == name) {
                return Err(self.error_at(&start, format!("blob `@{name}` is declared twice")));
            }
            blobs.push((name, t));
        }
        let mut g = self.graph_header()?;
        for (name, t) in blobs {
            // Names were checked unique above.
            g.add_blob(&name, t).map_err(|e| self.error_at(&self.peek().clone(), e.to_string()))?;
        }
        self.graph_body(&mut g)?;
        if self.peek().tok != Tok::Eof {
            return Err(self.expected("end of input after the graph"));
        }
        Ok(g)
    }

    /// `blob @name: dtype[dims] = [values]`
    fn blob(&mut self) -> Result<(String, Arc<Tensor>), ParseError> {
        self.expect_ident("blob")?;
        let name = match self.next().tok {
            Tok::Blob(n) => n,
            _ => {
                self.pos -= 1;
                return Err(self.expected("a blob name like `@w`"));
            }
        };
        self.expect_punct(':')?;
        let at = self.peek().clone();
        let ty = self.tensor_type()?;
        let Some(dims) = ty.shape.as_static() else {
            return Err(self.error_at(&at, "blob shapes must be static"));
        };
        let dims: Vec<usize> = dims.into_iter().map(|d| d as usize).collect();
        let max = self.limits.max_tensor_bytes;
        let n = checked_numel(&dims)
            .filter(|&n| (n as u64).checked_mul(ty.dtype.size_bytes() as u64).is_some_and(|b| b <= max))
            .ok_or_else(|| {
                self.error_at(
                    &at,
                    format!("blob `@{name}` of shape {dims:?} is above {}", named("max_tensor_bytes", max)),
                )
            })?;
        self.expect_punct('=')?;
        if self.is_ident("elided") {
            let t = self.next();
            let Some(external) = self.external else {
                return Err(
                    self.error_at(&t, format!("the data of blob `@{name}` was elided when this text was printed"))
                );
            };
            let found = external
                .get(&name)
                .ok_or_else(|| self.error_at(&t, format!("blob `@{name}` has no data beside the text")))?;
            if found.dtype() != ty.dtype || found.shape() != dims.as_slice() {
                return Err(self.error_at(
                    &at,
                    format!(
                        "blob `@{name}` is declared {}{:?} but its data is {}{:?}",
                        ty.dtype,
                        dims,
                        found.dtype(),
                        found.shape()
                    ),
                ));
            }
            return Ok((name, Arc::clone(found)));
        }
        let open = self.peek().clone();
        self.expect_punct('[')?;
        let data = self.blob_values(ty.dtype, n)?;
        let got = data.len();
        if got != n {
            return Err(
                self.error_at(&open, format!("blob `@{name}` of shape {:?} needs {n} values, found {got}", dims))
            );
        }
        let t = Tensor::new(dims, data).map_err(|e| self.error_at(&open, e.to_string()))?;
        Ok((name, Arc::new(t)))
    }

    fn blob_values(&mut self, dtype: DType, n: usize) -> Result<TensorData, ParseError> {
        if let Some((lo, hi)) = dtype.int_range() {
            // Integers of every width: each literal is checked against the dtype's range and
            // kept as the i64 the interpreter stores (a u64 as its bit pattern).
            let mut ints = Vec::new();
            if !self.eat_punct(']') {
                loop {
                    if ints.len() >= n {
                        return Err(self.expected(&format!("`]` after {n} values")));
                    }
                    let at = self.peek().clone();
                    let x = self.int_literal_wide()?;
                    if x < lo || x > hi {
                        return Err(self.error_at(&at, format!("{x} does not fit in {dtype}")));
                    }
                    ints.push(x as i64);
                    if self.eat_punct(']') {
                        break;
                    }
                    self.expect_punct(',')?;
                }
            }
            return Ok(TensorData::from_ints(dtype, ints).unwrap_or_else(|| unreachable!("{dtype} is an integer type")));
        }
        let mut data = TensorData::zeros(dtype, 0);
        let mut count = 0usize;
        if self.eat_punct(']') {
            return Ok(data);
        }
        loop {
            if count >= n {
                return Err(self.expected(&format!("`]` after {n} values")));
            }
            match &mut data {
                TensorData::F32(v) => v.push(self.float_literal_f32()?),
                TensorData::F64(v) => v.push(self.float_literal()?),
                TensorData::F16(v) => v.push(f16::from_f32(self.float_literal_f32()?)),
                TensorData::BF16(v) => v.push(bf16::from_f32(self.float_literal_f32()?)),
                TensorData::Bool(v) => v.push(self.bool_literal()?),
                _ => unreachable!("integer blobs are read above"),
            }
            count += 1;
            if self.eat_punct(']') {
                return Ok(data);
            }
            self.expect_punct(',')?;
        }
    }

    /// An integer literal of any sign and up to u64::MAX in magnitude.
    fn int_literal_wide(&mut self) -> Result<i128, ParseError> {
        let neg = self.eat_punct('-');
        let t = self.next();
        match t.tok {
            Tok::Int(n) => Ok(if neg { -(n as i128) } else { n as i128 }),
            _ => {
                self.pos -= 1;
                Err(self.expected("an integer"))
            }
        }
    }

    fn int_literal(&mut self) -> Result<i64, ParseError> {
        let neg = self.eat_punct('-');
        let t = self.next();
        match t.tok {
            Tok::Int(n) => {
                let v = if neg { 0i128 - n as i128 } else { n as i128 };
                i64::try_from(v).map_err(|_| self.error_at(&t, "integer out of the i64 range"))
            }
            _ => {
                self.pos -= 1;
                Err(self.expected("an integer"))
            }
        }
    }

    fn bool_literal(&mut self) -> Result<bool, ParseError> {
        match self.peek().tok.clone() {
            Tok::Ident(s) if s == "true" => {
                self.next();
                Ok(true)
            }
            Tok::Ident(s) if s == "false" => {
                self.next();
                Ok(false)
            }
            _ => Err(self.expected("`true` or `false`")),
        }
    }

    /// A float: decimal, `inf`, `nan`, or `nan:0xBITS` (f64 bits).
    fn float_literal(&mut self) -> Result<f64, ParseError> {
        let neg = self.eat_punct('-');
        let t = self.next();
        let v = match &t.tok {
            Tok::Int(n) => *n as f64,
            Tok::Float(s) => s.parse::<f64>().map_err(|_| self.error_at(&t, format!("bad number {s}")))?,
            Tok::Ident(s) if s == "inf" => f64::INFINITY,
            Tok::Ident(s) if s == "nan" => {
                if self.eat_punct(':') {
                    let b = self.next();
                    match b.tok {
                        Tok::Int(bits) => f64::from_bits(bits),
                        _ => return Err(self.error_at(&b, "expected NaN bits like 0x7ff8000000000001")),
                    }
                } else {
                    f64::NAN
                }
            }
            _ => {
                self.pos -= 1;
                return Err(self.expected("a number"));
            }
        };
        Ok(if neg { -v } else { v })
    }

    /// Like `float_literal`, but decimal text is parsed straight to f32 (no double rounding)
    /// and NaN bits are f32 bits.
    fn float_literal_f32(&mut self) -> Result<f32, ParseError> {
        let neg = self.eat_punct('-');
        let t = self.next();
        let v = match &t.tok {
            Tok::Int(_) | Tok::Float(_) => {
                let s = match &t.tok {
                    Tok::Int(n) => n.to_string(),
                    Tok::Float(s) => s.clone(),
                    _ => unreachable!(),
                };
                s.parse::<f32>().map_err(|_| self.error_at(&t, format!("bad number {s}")))?
            }
            Tok::Ident(s) if s == "inf" => f32::INFINITY,
            Tok::Ident(s) if s == "nan" => {
                if self.eat_punct(':') {
                    let b = self.next();
                    match b.tok {
                        Tok::Int(bits) => f32::from_bits(
                            u32::try_from(bits).map_err(|_| self.error_at(&b, "f32 NaN bits must fit in 32 bits"))?,
                        ),
                        _ => return Err(self.error_at(&b, "expected NaN bits like 0x7fc00001")),
                    }
                } else {
                    f32::NAN
                }
            }
            _ => {
                self.pos -= 1;
                return Err(self.expected("a number"));
            }
        };
        Ok(if neg { -v } else { v })
    }

    /// `dtype[dim, ...]`
    fn tensor_type(&mut self) -> Result<TensorType, ParseError> {
        let t = self.peek().clone();
        let name = self.ident("a dtype like f32")?;
        let dtype = DType::from_name(&name).ok_or_else(|| {
            let names: Vec<&str> = DType::ALL.iter().map(|d| d.name()).collect();
            self.error_at(&t, format!("unknown dtype `{name}` (expected one of {})", names.join(", ")))
        })?;
        self.expect_punct('[')?;
        let mut dims = Vec::new();
        if !self.eat_punct(']') {
            loop {
                dims.push(self.dim_expr()?);
                if self.eat_punct(']') {
                    break;
                }
                self.expect_punct(',')?;
            }
        }
        Ok(TensorType::new(dtype, Shape(dims.into())))
    }

    /// A dim: a sum of products of integers, symbols, floor quotients by positive integers,
    /// `min(...)` and `max(...)` (`2*batch*seq + 1`, `seq - 1`, `(n + 1) / 2`, `min(n, 512)`).
    fn dim_expr(&mut self) -> Result<Dim, ParseError> {
        let at = self.peek().clone();
        let e = self.size_expr()?;
        e.to_dim().map_err(|err| self.error_at(&at, err.to_string()))
    }

    /// A dim's expression, signed on the way (`max(5 - a, 0 - 2)`).
    fn size_expr(&mut self) -> Result<SizeExpr, ParseError> {
        let mut acc = self.size_term()?;
        loop {
            let at = self.peek().clone();
            let sub = if self.eat_punct('+') {
                false
            } else if self.eat_punct('-') {
                true
            } else {
                break;
            };
            let rhs = self.size_term()?;
            acc = if sub { acc.sub(&rhs) } else { acc.add(&rhs) }.map_err(|e| self.error_at(&at, e.to_string()))?;
        }
        Ok(acc)
    }

    fn size_term(&mut self) -> Result<SizeExpr, ParseError> {
        let mut acc = self.size_factor()?;
        loop {
            let at = self.peek().clone();
            if self.eat_punct('*') {
                let rhs = self.size_factor()?;
                acc = acc.mul(&rhs).map_err(|e| self.error_at(&at, e.to_string()))?;
            } else if self.eat_punct('/') {
                let t = self.next();
                let Tok::Int(d) = t.tok else {
                    self.pos -= 1;
                    return Err(self.expected("a positive integer divisor"));
                };
                if d == 0 {
                    return Err(self.error_at(&t, "division of a dim by zero"));
                }
                acc = acc.floor_div(d).map_err(|e| self.error_at(&at, e.to_string()))?;
            } else {
                return Ok(acc);
            }
        }
    }

    fn size_factor(&mut self) -> Result<SizeExpr, ParseError> {
        let t = self.next();
        let nested = matches!(&t.tok, Tok::Punct('('))
            || matches!(&t.tok, Tok::Ident(s) if (s == "min" || s == "max") && self.peek().tok == Tok::Punct('('));
        if nested {
            if self.dim_depth >= MAX_DIM_NESTING {
                return Err(self.error_at(&t, format!("dim nested deeper than {MAX_DIM_NESTING} levels")));
            }
            self.dim_depth += 1;
        }
        let out = match t.tok.clone() {
            Tok::Int(n) => {
                i64::try_from(n).map(SizeExpr::constant).map_err(|_| self.error_at(&t, "dim overflows 2^63 - 1"))
            }
            Tok::Ident(s) if nested => {
                self.expect_punct('(')?;
                let mut acc = self.size_expr()?;
                while self.eat_punct(',') {
                    let at = self.peek().clone();
                    let rhs = self.size_expr()?;
                    acc = if s == "min" { acc.min(&rhs) } else { acc.max(&rhs) }
                        .map_err(|e| self.error_at(&at, e.to_string()))?;
                }
                self.expect_punct(')')?;
                Ok(acc)
            }
            Tok::Ident(s) => SizeExpr::from_dim(&Dim::sym(&s)).map_err(|e| self.error_at(&t, e.to_string())),
            Tok::Punct('(') => {
                let d = self.size_expr()?;
                self.expect_punct(')')?;
                Ok(d)
            }
            _ => {
                self.pos -= 1;
                Err(self.expected("a dim (an integer or a symbol)"))
            }
        };
        if nested {
            self.dim_depth -= 1;
        }
        out
    }

    fn value_name(&mut self, what: &str) -> Result<(String, Token), ParseError> {
        let t = self.peek().clone();
        match &t.tok {
            Tok::Value(n, _) => {
                let n = n.clone();
                self.next();
                Ok((n, t))
            }
            _ => Err(self.expected(what)),
        }
    }

    /// `graph name(%x: f32[...], ...) {`
    fn graph_header(&mut self) -> Result<Graph, ParseError> {
        self.expect_ident("graph")?;
        let name = match self.peek().tok.clone() {
            Tok::Ident(s) => {
                self.next();
                s
            }
            Tok::Str(s) => {
                self.next();
                s
            }
            _ => return Err(self.expected("the graph's name")),
        };
        let mut g = Graph::new(&name);
        self.expect_punct('(')?;
        if !self.eat_punct(')') {
            loop {
                let (vname, at) = self.value_name("an input like `%x: f32[4]`")?;
                self.expect_punct(':')?;
                let ty = self.tensor_type()?;
                self.check_numbered_name(&g, &vname, &at)?;
                // A numbered input (`%0`) keeps its number as its name: inputs are bound by
                // name, so the verifier wants every input named.
                g.add_input(&vname, ty).map_err(|e| self.error_at(&at, e.to_string()))?;
                if self.eat_punct(')') {
                    break;
                }
                self.expect_punct(',')?;
            }
        }
        self.expect_punct('{')?;
        Ok(g)
    }

    /// A name made of digits is a node index and must be the index the node will get.
    fn check_numbered_name(&self, g: &Graph, name: &str, at: &Token) -> Result<(), ParseError> {
        if index_token(at) {
            let next = g.len();
            if name != next.to_string() {
                return Err(self.error_at(
                    at,
                    format!("expected %{next} here: numbered values are numbered in order (use a name like %t{name} otherwise)"),
                ));
            }
        }
        Ok(())
    }

    fn lookup(&self, g: &Graph, name: &str, at: &Token) -> Result<Value, ParseError> {
        let found = if index_token(at) {
            // Unnamed, or a numbered input (named by its number).
            name.parse::<u32>()
                .ok()
                .map(Value::from_u32)
                .filter(|&v| g.get(v).is_some() && g.name_of(v).is_none_or(|n| n == name))
        } else {
            g.value_by_name(name)
        };
        found.ok_or_else(|| self.error_at(at, format!("`%{name}` is not defined before this use")))
    }

    fn graph_body(&mut self, g: &mut Graph) -> Result<(), ParseError> {
        loop {
            if self.is_ident("return") {
                self.next();
                self.returns(g)?;
                self.expect_punct('}')?;
                return Ok(());
            }
            self.node(g)?;
        }
    }

    fn returns(&mut self, g: &mut Graph) -> Result<(), ParseError> {
        if self.peek().tok == Tok::Punct('}') {
            return Ok(());
        }
        loop {
            let (name, at) = self.value_name("a value to return")?;
            let v = self.lookup(g, &name, &at)?;
            let out_name = if self.is_ident("as") {
                self.next();
                match self.next().tok {
                    Tok::Ident(s) | Tok::Str(s) => s,
                    _ => {
                        self.pos -= 1;
                        return Err(self.expected("an output name"));
                    }
                }
            } else {
                g.default_output_name(v)
            };
            if out_name.is_empty() {
                return Err(self.error_at(&at, "output names must not be empty"));
            }
            g.add_output(&out_name, v).map_err(|e| self.error_at(&at, e.to_string()))?;
            if !self.eat_punct(',') {
                return Ok(());
            }
        }
    }

    /// `%v = op(args) {attrs} : type` or `%v = const @blob : type`
    fn node(&mut self, g: &mut Graph) -> Result<(), ParseError> {
        let (vname, at) = self.value_name("a node like `%1 = add(%0, %0)` or `return`")?;
        self.nodes += 1;
        if self.nodes > self.limits.max_nodes {
            let max = self.limits.max_nodes;
            return Err(self.error_at(&at, format!("the graph has more nodes than {}", named("max_nodes", max))));
        }
        self.check_numbered_name(g, &vname, &at)?;
        if !index_token(&at) && g.value_by_name(&vname).is_some() {
            return Err(self.error_at(&at, format!("`%{vname}` is defined twice")));
        }
        self.expect_punct('=')?;
        let op_tok = self.peek().clone();
        let op_name = self.ident("an operator name")?;
        let v = if op_name == "const" {
            let bt = self.peek().clone();
            let blob_name = match self.next().tok {
                Tok::Blob(n) => n,
                _ => {
                    self.pos -= 1;
                    return Err(self.expected("a blob like `@w`"));
                }
            };
            let blob = g
                .blob_by_name(&blob_name)
                .ok_or_else(|| self.error_at(&bt, format!("blob `@{blob_name}` is not declared")))?;
            g.add_const(blob)
        } else {
            let op = OpKind::from_name(&op_name).filter(|k| k.rung() != crate::ops::Rung::Source).ok_or_else(|| {
                self.error_at(&op_tok, format!("unknown operator `{op_name}` (`ladder ops` lists them)"))
            })?;
            self.expect_punct('(')?;
            let mut args = Vec::new();
            if !self.eat_punct(')') {
                loop {
                    let (an, at) = self.value_name("an argument like `%0`")?;
                    args.push(self.lookup(g, &an, &at)?);
                    if self.eat_punct(')') {
                        break;
                    }
                    self.expect_punct(',')?;
                }
            }
            let given = if self.peek().tok == Tok::Punct('{') { self.attrs(op.spec().attrs)? } else { Vec::new() };
            let attrs = Attrs::resolve(op.spec().attrs, given)
                .map_err(|e| self.error_at(&op_tok, format!("{op_name}: {e}")))?;
            g.add_node(op, &args, attrs).map_err(|e| self.error_at(&op_tok, e.to_string()))?
        };
        if self.eat_punct(':') {
            let tt = self.peek().clone();
            let ty = self.tensor_type()?;
            if &ty != g.ty(v) {
                return Err(self.error_at(&tt, format!("annotated type {ty} but `{op_name}` infers {}", g.ty(v))));
            }
        }
        if !index_token(&at) {
            g.set_name(v, &vname).map_err(|e| self.error_at(&at, e.to_string()))?;
        }
        Ok(())
    }

    /// `{name=value, ...}`, for an operator whose attributes are `specs`: where a size is
    /// expected, a word is a symbol even when it is also a dtype or a literal's name (an
    /// ONNX model may call a dim `u32` or `inf`).
    fn attrs(&mut self, specs: &[crate::ir::AttrSpec]) -> Result<Vec<(String, AttrValue)>, ParseError> {
        self.expect_punct('{')?;
        let mut out = Vec::new();
        if self.eat_punct('}') {
            return Ok(out);
        }
        loop {
            let name = self.ident("an attribute name")?;
            self.expect_punct('=')?;
            let size = specs.iter().any(|s| s.name == name && s.kind == crate::ir::AttrKind::Size);
            let value = match &self.peek().tok {
                Tok::Ident(_) if size => self.size_attr()?,
                _ => self.attr_value()?,
            };
            out.push((name, value));
            if self.eat_punct('}') {
                return Ok(out);
            }
            self.expect_punct(',')?;
        }
    }

    fn attr_value(&mut self) -> Result<AttrValue, ParseError> {
        let t = self.peek().clone();
        match &t.tok {
            Tok::Punct('[') => self.list_attr(),
            Tok::Str(s) => {
                let s = s.clone();
                self.next();
                Ok(AttrValue::Str(s))
            }
            Tok::Ident(s) if s == "true" || s == "false" => Ok(AttrValue::Bool(self.bool_literal()?)),
            Tok::Ident(s) if s == "inf" || s == "nan" => Ok(AttrValue::Float(self.float_literal()?)),
            Tok::Ident(s) if DType::from_name(s).is_some() => {
                let s = s.clone();
                self.next();
                DType::from_name(&s)
                    .map(AttrValue::DType)
                    .ok_or_else(|| self.error_at(&t, format!("expected an attribute value, found `{s}`")))
            }
            // A size: a symbol, a parenthesised or `min`/`max` expression, or an integer that
            // an operator follows (`seq - 1`, `2*n`).
            Tok::Ident(_) | Tok::Punct('(') => self.size_attr(),
            Tok::Int(_)
                if matches!(self.tokens.get(self.pos + 1).map(|t| &t.tok), Some(Tok::Punct('*' | '+' | '-' | '/'))) =>
            {
                self.size_attr()
            }
            Tok::Float(_) => Ok(AttrValue::Float(self.float_literal()?)),
            Tok::Punct('-') => {
                // A negative int, or a negative float.
                match self.tokens.get(self.pos + 1).map(|t| &t.tok) {
                    Some(Tok::Int(_)) => Ok(AttrValue::Int(self.int_literal()?)),
                    _ => Ok(AttrValue::Float(self.float_literal()?)),
                }
            }
            Tok::Int(_) => Ok(AttrValue::Int(self.int_literal()?)),
            _ => Err(self.expected("an attribute value")),
        }
    }

    /// A size attribute value (an int when it is constant).
    fn size_attr(&mut self) -> Result<AttrValue, ParseError> {
        let e = self.size_expr()?;
        Ok(match e.as_const() {
            Some(c) => AttrValue::Int(c),
            None => AttrValue::Size(e),
        })
    }

    /// `[1, 2, 3]` is an int list; a list with any symbol (`[batch, -1]`) is a dim list.
    fn list_attr(&mut self) -> Result<AttrValue, ParseError> {
        self.expect_punct('[')?;
        let mut items: Vec<Option<Dim>> = Vec::new();
        let mut ints: Vec<i64> = Vec::new();
        let mut symbolic = false;
        if self.eat_punct(']') {
            return Ok(AttrValue::Ints(ints));
        }
        loop {
            if self.peek().tok == Tok::Punct('-') {
                let at = self.peek().clone();
                let v = self.int_literal()?;
                ints.push(v);
                items.push(if v == -1 { None } else { Some(Dim::new(0)) });
                if v != -1 && symbolic {
                    return Err(self.error_at(&at, "a dim list may only hold -1 as a negative entry"));
                }
            } else {
                let d = self.dim_expr()?;
                match d.as_const() {
                    Some(n) => ints.push(i64::try_from(n).unwrap_or(i64::MAX)),
                    None => symbolic = true,
                }
                items.push(Some(d));
            }
            if self.eat_punct(']') {
                break;
            }
            self.expect_punct(',')?;
        }
        if symbolic {
            if ints.iter().any(|&v| v < -1) {
                return Err(self.expected("dims (>= 0) or -1 in a list with symbols"));
            }
            Ok(AttrValue::Dims(items))
        } else {
            Ok(AttrValue::Ints(ints))
        }
    }
}

fn is_index_name(name: &str) -> bool {
    !name.is_empty() && name.bytes().all(|b| b.is_ascii_digit())
}

/// A `%` token naming a node by index: all digits and not quoted (`%"9"` is the name "9").
fn index_token(at: &Token) -> bool {
    matches!(&at.tok, Tok::Value(n, false) if is_index_name(n))
}
