//! A walk over the protobuf wire format before prost decodes it, so that decoding cannot be
//! made to allocate out of proportion or recurse without bound.
//!
//! prost decodes eagerly: it limits message nesting to 100 and every length it reads is
//! checked against the remaining input, so a single field cannot ask for more memory than the
//! file has bytes. But a small encoding can still decode into a much larger structure (a
//! two-byte empty `NodeProto` becomes a struct of a few hundred bytes; a one-byte varint in a
//! packed `int64` list becomes eight), and nothing limits node counts or subgraph nesting.
//! This walk knows which fields of each message read here are messages, and charges every
//! message, string and repeated element its in-memory size, so the decoded size is bounded by
//! `Limits::max_file_bytes` before any of it is allocated. It also rejects malformed encodings with a
//! message that says where.

use std::mem::size_of;

use super::proto;
use super::{ImportError, ImportOptions};

/// What the bytes are expected to hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Root {
    Model,
    Tensor,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Msg {
    Model,
    Graph,
    Node,
    Attr,
    Tensor,
    Sparse,
    ValueInfo,
    Type,
    TypeTensor,
    TypeSeq,
    TypeMap,
    TypeOpt,
    Shape,
    Dim,
    Opset,
    Entry,
    Function,
    Segment,
}

/// How a length-delimited field is decoded.
enum Field {
    Message(Msg),
    /// A packed list of scalars: each input byte becomes at most this many bytes.
    Packed(u64),
    /// A string or bytes.
    Bytes,
}

impl Msg {
    fn name(self) -> &'static str {
        match self {
            Msg::Model => "ModelProto",
            Msg::Graph => "GraphProto",
            Msg::Node => "NodeProto",
            Msg::Attr => "AttributeProto",
            Msg::Tensor => "TensorProto",
            Msg::Sparse => "SparseTensorProto",
            Msg::ValueInfo => "ValueInfoProto",
            Msg::Type => "TypeProto",
            Msg::TypeTensor => "TypeProto.Tensor",
            Msg::TypeSeq => "TypeProto.Sequence",
            Msg::TypeMap => "TypeProto.Map",
            Msg::TypeOpt => "TypeProto.Optional",
            Msg::Shape => "TensorShapeProto",
            Msg::Dim => "TensorShapeProto.Dimension",
            Msg::Opset => "OperatorSetIdProto",
            Msg::Entry => "StringStringEntryProto",
            Msg::Function => "FunctionProto",
            Msg::Segment => "TensorProto.Segment",
        }
    }

    /// Bytes the decoded message itself occupies.
    fn size(self) -> u64 {
        (match self {
            Msg::Model => size_of::<proto::ModelProto>(),
            Msg::Graph => size_of::<proto::GraphProto>(),
            Msg::Node => size_of::<proto::NodeProto>(),
            Msg::Attr => size_of::<proto::AttributeProto>(),
            Msg::Tensor => size_of::<proto::TensorProto>(),
            Msg::Sparse => size_of::<proto::SparseTensorProto>(),
            Msg::ValueInfo => size_of::<proto::ValueInfoProto>(),
            Msg::Type | Msg::TypeTensor | Msg::TypeSeq | Msg::TypeMap | Msg::TypeOpt => {
                size_of::<proto::TypeProto>() * 2
            }
            Msg::Shape => size_of::<proto::TensorShapeProto>(),
            Msg::Dim => size_of::<proto::tensor_shape_proto::Dimension>(),
            Msg::Opset => size_of::<proto::OperatorSetIdProto>(),
            Msg::Entry => size_of::<proto::StringStringEntryProto>(),
            Msg::Function => size_of::<proto::FunctionProto>(),
            Msg::Segment => size_of::<proto::tensor_proto::Segment>(),
        }) as u64
    }

    /// The schema: how each length-delimited field of this message decodes. Fields not listed
    /// are strings/bytes or unknown (which prost skips without allocating).
    fn field(self, number: u64) -> Field {
        use Field::*;
        use Msg::*;
        match (self, number) {
            (Model, 7) => Message(Graph),
            (Model, 8) => Message(Opset),
            (Model, 14) => Message(Entry),
            (Model, 25) => Message(Function),
            (Graph, 1) => Message(Node),
            (Graph, 5) => Message(Tensor),
            (Graph, 15) => Message(Sparse),
            (Graph, 11..=13) => Message(ValueInfo),
            (Graph, 16) => Message(Entry),
            (Node, 5) => Message(Attr),
            (Node, 9) => Message(Entry),
            (Attr, 5 | 10) => Message(Tensor),
            (Attr, 6 | 11) => Message(Graph),
            (Attr, 22 | 23) => Message(Sparse),
            (Attr, 14 | 15) => Message(Type),
            (Attr, 7) => Packed(1),
            (Attr, 8) => Packed(8),
            (ValueInfo, 2) => Message(Type),
            (ValueInfo, 4) => Message(Entry),
            (Type, 1 | 8) => Message(TypeTensor),
            (Type, 4) => Message(TypeSeq),
            (Type, 5) => Message(TypeMap),
            (Type, 9) => Message(TypeOpt),
            (TypeTensor, 2) => Message(Shape),
            (TypeSeq | TypeOpt, 1) => Message(Type),
            (TypeMap, 2) => Message(Type),
            (Shape, 1) => Message(Dim),
            (Tensor, 3) => Message(Segment),
            (Tensor, 13 | 16) => Message(Entry),
            (Tensor, 1 | 7 | 11) => Packed(8),
            (Tensor, 5) => Packed(4),
            (Tensor, 4 | 10) => Packed(1),
            (Sparse, 1 | 2) => Message(Tensor),
            (Sparse, 3) => Packed(8),
            (Function, 11) => Message(Attr),
            (Function, 7) => Message(Node),
            (Function, 9) => Message(Opset),
            (Function, 12) => Message(ValueInfo),
            (Function, 14) => Message(Entry),
            _ => Bytes,
        }
    }
}

/// Deepest message nesting accepted, below prost's recursion limit of 100.
const MAX_MESSAGE_DEPTH: u32 = 80;

struct Walk<'o> {
    options: &'o ImportOptions,
    nodes: u64,
    bytes: u64,
}

fn decode_err(msg: Msg, at: usize, problem: &str) -> ImportError {
    ImportError::Decode(format!("{} at byte {at}: {problem}", msg.name()))
}

/// Reads a varint at `*pos`, advancing it.
fn varint(buf: &[u8], pos: &mut usize) -> Option<u64> {
    let mut v: u64 = 0;
    for i in 0..10 {
        let b = *buf.get(*pos)?;
        *pos += 1;
        if i == 9 && b > 1 {
            return None;
        }
        v |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Some(v);
        }
    }
    None
}

impl Walk<'_> {
    fn charge(&mut self, n: u64) -> Result<(), ImportError> {
        self.bytes = self.bytes.saturating_add(n);
        let max = self.options.limits.max_file_bytes;
        if self.bytes > max {
            return Err(ImportError::Limit {
                what: "the decoded size of the model".into(),
                size: self.bytes,
                limit: "max_file_bytes",
                max,
            });
        }
        Ok(())
    }

    /// Walks the message `msg` held in `buf[start..end]`. `base` is its offset in the file.
    fn message(&mut self, buf: &[u8], base: usize, msg: Msg, depth: u32, graphs: u32) -> Result<(), ImportError> {
        if depth > MAX_MESSAGE_DEPTH {
            return Err(ImportError::TooDeep {
                what: "protobuf messages",
                depth,
                bound: "the fixed bound on message nesting",
                limit: MAX_MESSAGE_DEPTH,
            });
        }
        let graphs = if msg == Msg::Graph { graphs + 1 } else { graphs };
        if graphs > self.options.limits.max_depth {
            return Err(ImportError::TooDeep {
                what: "subgraphs",
                depth: graphs,
                bound: "`Limits::max_depth`",
                limit: self.options.limits.max_depth,
            });
        }
        if msg == Msg::Node {
            self.nodes += 1;
            if self.nodes > self.options.limits.max_nodes {
                return Err(ImportError::Limit {
                    what: "the number of nodes".into(),
                    size: self.nodes,
                    limit: "max_nodes",
                    max: self.options.limits.max_nodes,
                });
            }
        }
        self.charge(msg.size())?;
        let mut pos = 0usize;
        while pos < buf.len() {
            let at = base + pos;
            let tag = varint(buf, &mut pos).ok_or_else(|| decode_err(msg, at, "bad or truncated field tag"))?;
            let number = tag >> 3;
            if number == 0 || number > (1 << 29) - 1 {
                return Err(decode_err(msg, at, &format!("invalid field number {number}")));
            }
            match tag & 7 {
                0 => {
                    varint(buf, &mut pos)
                        .ok_or_else(|| decode_err(msg, at, &format!("field {number}: bad or truncated varint")))?;
                    self.charge(8)?;
                }
                1 | 5 => {
                    let n = if tag & 7 == 1 { 8 } else { 4 };
                    if buf.len() - pos < n {
                        return Err(decode_err(msg, at, &format!("field {number}: truncated fixed-size value")));
                    }
                    pos += n;
                    self.charge(8)?;
                }
                2 => {
                    let len = varint(buf, &mut pos)
                        .ok_or_else(|| decode_err(msg, at, &format!("field {number}: bad or truncated length")))?;
                    let remaining = (buf.len() - pos) as u64;
                    if len > remaining {
                        return Err(decode_err(
                            msg,
                            at,
                            &format!("field {number}: length {len} runs past the end ({remaining} bytes left)"),
                        ));
                    }
                    let len = len as usize;
                    let body = &buf[pos..pos + len];
                    match msg.field(number) {
                        Field::Message(child) => self.message(body, base + pos, child, depth + 1, graphs)?,
                        Field::Packed(factor) => self.charge(24 + factor * len as u64)?,
                        Field::Bytes => self.charge(24 + len as u64)?,
                    }
                    pos += len;
                }
                3 | 4 => return Err(decode_err(msg, at, &format!("field {number}: groups are not used by ONNX"))),
                w => return Err(decode_err(msg, at, &format!("field {number}: invalid wire type {w}"))),
            }
            // A message field must be length-delimited for prost to decode it.
            if tag & 7 != 2 {
                if let Field::Message(child) = msg.field(number) {
                    return Err(decode_err(
                        msg,
                        at,
                        &format!("field {number} ({}) is not length-delimited", child.name()),
                    ));
                }
            }
        }
        Ok(())
    }
}

/// Checks that `bytes` are a well-formed encoding of `root` within the limits of `options`.
pub fn check(bytes: &[u8], root: Root, options: &ImportOptions) -> Result<(), ImportError> {
    let len = bytes.len() as u64;
    let max = options.limits.max_file_bytes;
    if len > max {
        return Err(ImportError::Limit { what: "the model file".into(), size: len, limit: "max_file_bytes", max });
    }
    let mut walk = Walk { options, nodes: 0, bytes: 0 };
    let msg = match root {
        Root::Model => Msg::Model,
        Root::Tensor => Msg::Tensor,
    };
    walk.message(bytes, 0, msg, 1, 0)
}
