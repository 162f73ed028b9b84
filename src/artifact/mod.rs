//! Compiled models as files: `ladder compile MODEL -o model.ladder` lowers a model once and
//! stores the graph of its last graph rung (`recovered` in native mode, `simplified` in
//! reference mode) with its weights, so that loading it skips import, functionalization,
//! decomposition, simplification and recovery, and only schedules and compiles kernels.
//!
//! The file (`format.rs`, specified in `docs/artifact.md`) is a header with a magic, a format
//! version and a CRC-32, then tagged sections:
//!
//! - `META`: `key = value` lines: who wrote it, the lowering mode and rung, the source's
//!   name, and the epilogue of the graph it came from (inputs the model writes in place,
//!   what each output aliased); a reader ignores keys it does not know;
//! - `GRPH`: the graph in ladder's text form, every blob's data printed `elided`;
//! - `BLOB`: per blob its name, dtype (by name), dims and where its bytes lie in `DATA`;
//! - `DATA`: the blobs' little-endian bytes, each 64-byte aligned.
//!
//! Operators and attributes are stored by name in the text form, so adding an op or an
//! attribute with a default does not change how an old file reads. A reader loads every format
//! version up to [`FORMAT_VERSION`] (`tests/artifacts/` keeps a file of each, which must keep
//! loading and giving the same outputs) and refuses a newer one with an error naming both
//! versions. Every count and offset is checked against the file before use, within a
//! [`Limits`]; the `artifact` fuzz target feeds it arbitrary bytes.
//!
//! Loading copies the weights out of the file into tensors (ladder's tensors own their
//! data); the CPU backend then packs the GEMM and convolution weights into its own layouts.

mod format;

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use crate::ir::{DType, Graph};
use crate::limits::{named, Limits};
use crate::passes::functionalize::{Epilogue, InputMutation, OutputAlias};
use crate::pipeline::{Mode, PipelineError, Rung};
use crate::runtime::{compile_lowered, CompileError, CompileOptions, Plan};
use crate::tensor::{checked_numel, Mapping, Tensor, TensorData};
use crate::text::{parse_with_blobs, print_with, ParseError, PrintOptions};

pub use format::{is_artifact, MAGIC};

/// Whether the file at `path` starts like an artifact (only its first bytes are read).
pub fn file_is_artifact(path: &Path) -> std::io::Result<bool> {
    use std::io::Read as _;
    let mut head = Vec::with_capacity(MAGIC.len());
    std::fs::File::open(path)?.take(MAGIC.len() as u64).read_to_end(&mut head)?;
    Ok(is_artifact(&head))
}

/// The format version this ladder writes, and the newest it reads.
pub const FORMAT_VERSION: u32 = 1;

const META: &[u8; 4] = b"META";
const GRAPH: &[u8; 4] = b"GRPH";
const BLOBS: &[u8; 4] = b"BLOB";
const DATA: &[u8; 4] = b"DATA";

/// Why an artifact could not be written or read.
#[derive(Debug, thiserror::Error)]
pub enum ArtifactError {
    /// The bytes do not start with [`MAGIC`].
    #[error("not a ladder artifact (it does not start with the artifact magic)")]
    NotAnArtifact,
    /// Written by a newer ladder, in format version `file`; this one reads up to `supported`.
    #[error(
        "format version {file} is newer than this ladder reads (versions 1 to {supported}): load it with a newer ladder, or compile the model again with this one"
    )]
    Newer {
        /// The file's format version.
        file: u32,
        /// The newest version this ladder reads ([`FORMAT_VERSION`]).
        supported: u32,
    },
    /// The header's version is 0.
    #[error("format version 0 is not a version")]
    VersionZero,
    /// A structure runs past the end of the file or of its section.
    #[error("truncated: {what} needs {need} bytes at byte {at}, but there are {len}")]
    Truncated {
        /// What was being read.
        what: String,
        /// Where it starts (in the file or in its section).
        at: u64,
        /// How many bytes it needs.
        need: u64,
        /// How many there are.
        len: u64,
    },
    /// The CRC-32 in the header does not match the bytes.
    #[error("checksum mismatch: the file says {stored:#010x}, its bytes give {computed:#010x} (the file is damaged)")]
    Checksum {
        /// The header's checksum.
        stored: u32,
        /// The bytes' checksum.
        computed: u32,
    },
    /// The header or the section table breaks a rule of the format (the message says which).
    #[error("{0}")]
    Malformed(String),
    /// A section the version requires is not there.
    #[error("no `{0}` section")]
    Missing(&'static str),
    /// A line of the `META` section (line 0: the section as a whole).
    #[error("META line {line}: {message}")]
    Meta {
        /// The line, from 1.
        line: usize,
        /// What is wrong with it.
        message: String,
    },
    /// An entry of the `BLOB` table.
    #[error("blob {index} (`{name}`): {message}")]
    Blob {
        /// Its index in the table.
        index: usize,
        /// Its name, where it was read.
        name: String,
        /// What is wrong with it.
        message: String,
    },
    /// The graph text does not parse (or names a blob the table lacks).
    #[error("the graph text, line {}, column {}: {}", .0.line, .0.col, .0.message)]
    Graph(ParseError),
    /// The model could not be lowered to the stored rung (when writing), or the stored graph
    /// is not a graph of its rung.
    #[error("the stored graph: {0}")]
    Lower(#[from] PipelineError),
    /// The file or a blob is above a [`Limits`] field.
    #[error("{what} is {size} bytes, above {limit}")]
    Limit {
        /// What is too large.
        what: String,
        /// Its size.
        size: u64,
        /// The limit, named.
        limit: String,
    },
    /// The file could not be read.
    #[error("cannot read it: {0}")]
    Io(#[from] std::io::Error),
}

/// A model lowered to the rung plans are scheduled from, as an artifact stores it.
#[derive(Clone, Debug)]
pub struct Artifact {
    /// The format version it was read from (the current one for a new artifact).
    pub format_version: u32,
    /// Who wrote it: `ladder` and its version.
    pub writer: String,
    /// The lowering mode: native (`recovered` rung) or reference (`simplified` rung).
    pub mode: Mode,
    /// The graph at that rung, with its blobs.
    pub graph: Graph,
    /// The epilogue of the graph it was lowered from: the inputs that model writes.
    pub epilogue: Epilogue,
    /// The name of the model file it came from (for `ladder info`; may be empty).
    pub source: String,
}

impl Artifact {
    /// `g` lowered in `mode` to the rung plans are scheduled from.
    pub fn lower(g: &Graph, mode: Mode, source: &str) -> Result<Artifact, ArtifactError> {
        let l = crate::pipeline::lower(g, mode, Rung::Recovered)?;
        let epilogue = l.functional.as_ref().map(|f| f.epilogue.clone()).unwrap_or_default();
        Ok(Artifact {
            format_version: FORMAT_VERSION,
            writer: writer(),
            mode,
            graph: l.graph().clone(),
            epilogue,
            source: source.to_string(),
        })
    }

    /// A plan for the stored graph (only scheduling and kernel compilation run).
    pub fn compile(&self, options: &CompileOptions) -> Result<Plan, CompileError> {
        compile_lowered(&self.graph, self.mode, self.epilogue.clone(), options)
    }

    /// The file's bytes, in the current format version.
    pub fn to_bytes(&self) -> Vec<u8> {
        let text = print_with(&self.graph, &PrintOptions { elide_blobs_over: Some(0) });
        let (table, data) = blob_sections(&self.graph);
        let meta = self.meta_text();
        format::write(
            FORMAT_VERSION,
            &[(META, meta.as_bytes()), (GRAPH, text.as_bytes()), (BLOBS, &table), (DATA, &data)],
        )
    }

    /// Writes the artifact to `path`.
    pub fn save(&self, path: &Path) -> std::io::Result<()> {
        std::fs::write(path, self.to_bytes())
    }

    /// Reads an artifact of any format version up to [`FORMAT_VERSION`] within `limits`
    /// (`max_file_bytes` for the whole, `max_tensor_bytes` per blob, `max_nodes`).
    pub fn from_bytes(bytes: &[u8], limits: &Limits) -> Result<Artifact, ArtifactError> {
        Artifact::parse(bytes, None, limits)
    }

    /// [`Artifact::from_bytes`]; the blobs read in place from `mapping` when `bytes` is its
    /// whole file.
    fn parse(bytes: &[u8], mapping: Option<&Arc<Mapping>>, limits: &Limits) -> Result<Artifact, ArtifactError> {
        if bytes.len() as u64 > limits.max_file_bytes {
            return Err(ArtifactError::Limit {
                what: "the artifact".into(),
                size: bytes.len() as u64,
                limit: named("max_file_bytes", limits.max_file_bytes),
            });
        }
        let version = format::version(bytes)?;
        if version == 0 {
            return Err(ArtifactError::VersionZero);
        }
        if version > FORMAT_VERSION {
            return Err(ArtifactError::Newer { file: version, supported: FORMAT_VERSION });
        }
        // Version 1 is the only one so far; a later version adds its differences here.
        let sections = format::read(bytes)?;
        let find = |tag: &'static [u8; 4], name: &'static str| {
            sections.iter().find(|s| &s.tag == tag).map(|s| s.bytes).ok_or(ArtifactError::Missing(name))
        };
        let meta = Meta::parse(find(META, "META")?)?;
        let blobs = read_blobs(find(BLOBS, "BLOB")?, find(DATA, "DATA")?, mapping, limits)?;
        let text = std::str::from_utf8(find(GRAPH, "GRPH")?)
            .map_err(|e| ArtifactError::Malformed(format!("the graph text is not UTF-8 ({e})")))?;
        let graph = parse_with_blobs(text, limits, Some(&blobs)).map_err(ArtifactError::Graph)?;
        let epilogue = meta.epilogue(&graph)?;
        Ok(Artifact {
            format_version: version,
            writer: meta.writer,
            mode: meta.mode,
            graph,
            epilogue,
            source: meta.source,
        })
    }

    /// Reads the artifact at `path` (see [`Artifact::from_bytes`]) with its weights mapped,
    /// not copied: the file is mapped read-only and every blob's tensor reads its elements in
    /// place there ([`Tensor::is_mapped`]), so the weights take no heap memory of their own
    /// and processes that load one file share its pages. The whole file is still read once,
    /// for its checksum. The file must not be modified or truncated while the artifact, or a
    /// model or plan made from it, is in use (a truncated mapping faults on access); where
    /// that cannot be promised, read the file and call [`Artifact::from_bytes`], which copies.
    pub fn load(path: &Path, limits: &Limits) -> Result<Artifact, ArtifactError> {
        let file = std::fs::File::open(path)?;
        let len = file.metadata()?.len();
        if len > limits.max_file_bytes {
            return Err(ArtifactError::Limit {
                what: "the artifact".into(),
                size: len,
                limit: named("max_file_bytes", limits.max_file_bytes),
            });
        }
        if len == 0 {
            return Artifact::from_bytes(&[], limits);
        }
        let mapping = Mapping::map(&file)?;
        Artifact::parse(mapping.bytes(), Some(&mapping), limits)
    }

    fn meta_text(&self) -> String {
        let mut s = String::new();
        let mut line = |k: &str, v: &str| {
            s.push_str(k);
            s.push_str(" = ");
            s.push_str(v);
            s.push('\n');
        };
        line("writer", &self.writer);
        line("mode", mode_name(self.mode));
        line("rung", rung_of(self.mode).name());
        // Newlines cannot be stored in a line; a source name is informative only.
        line("source", &self.source.replace(['\n', '\r'], " "));
        for m in &self.epilogue.mutations {
            line("mutation", &format!("{} {}", m.input, m.output));
        }
        for a in &self.epilogue.output_aliases {
            let v = match a {
                OutputAlias::None => "none".to_string(),
                OutputAlias::Input(i) => format!("input {i}"),
                OutputAlias::Intermediate => "intermediate".to_string(),
            };
            line("output_alias", &v);
        }
        s
    }
}

/// `ladder` and this crate's version.
fn writer() -> String {
    format!("ladder {}", env!("CARGO_PKG_VERSION"))
}

fn mode_name(mode: Mode) -> &'static str {
    mode.name()
}

/// The rung an artifact of `mode` stores.
fn rung_of(mode: Mode) -> Rung {
    match mode {
        Mode::Native | Mode::Shaders => Rung::Recovered,
        Mode::Reference => Rung::Simplified,
    }
}

/// The `BLOB` table and the `DATA` bytes of `g`'s blobs.
fn blob_sections(g: &Graph) -> (Vec<u8>, Vec<u8>) {
    let blobs: Vec<_> = g.blobs().collect();
    let mut table = Vec::new();
    let mut data = Vec::new();
    table.extend_from_slice(&(blobs.len() as u32).to_le_bytes());
    for (_, blob) in blobs {
        let t = &blob.tensor;
        data.resize(data.len().next_multiple_of(format::ALIGN), 0);
        let offset = data.len();
        t.data().write_le_bytes(&mut data);
        let dtype = t.dtype().name().as_bytes();
        table.extend_from_slice(&(blob.name.len() as u32).to_le_bytes());
        table.extend_from_slice(blob.name.as_bytes());
        table.extend_from_slice(&(dtype.len() as u32).to_le_bytes());
        table.extend_from_slice(dtype);
        table.extend_from_slice(&(t.shape().len() as u32).to_le_bytes());
        for &d in t.shape() {
            table.extend_from_slice(&(d as u64).to_le_bytes());
        }
        table.extend_from_slice(&(offset as u64).to_le_bytes());
        table.extend_from_slice(&((data.len() - offset) as u64).to_le_bytes());
    }
    (table, data)
}

/// The blobs the `BLOB` table describes, their bytes taken from `data`.
fn read_blobs(
    table: &[u8],
    data: &[u8],
    mapping: Option<&Arc<Mapping>>,
    limits: &Limits,
) -> Result<HashMap<String, Arc<Tensor>>, ArtifactError> {
    let what = "the BLOB table";
    let count = format::u32_at(table, 0, what)? as usize;
    let mut at = 4;
    // Each entry takes at least 28 bytes, so the table's length bounds what is reserved.
    let mut out = HashMap::with_capacity(count.min(table.len() / 28));
    for index in 0..count {
        let text = |at: &mut usize, field: &str| -> Result<String, ArtifactError> {
            let len = format::u32_at(table, *at, what)? as usize;
            let bytes = format::slice(table, *at + 4, len, what)?;
            *at += 4 + len;
            String::from_utf8(bytes.to_vec()).map_err(|_| ArtifactError::Blob {
                index,
                name: String::new(),
                message: format!("its {field} is not UTF-8"),
            })
        };
        let name = text(&mut at, "name")?;
        let bad = |message: String| ArtifactError::Blob { index, name: name.clone(), message };
        let dtype_name = text(&mut at, "dtype")?;
        let dtype = DType::from_name(&dtype_name).ok_or_else(|| bad(format!("unknown dtype `{dtype_name}`")))?;
        let rank = format::u32_at(table, at, what)? as usize;
        at += 4;
        // Checked against the table's length before any dims are kept.
        format::slice(table, at, rank.saturating_mul(8), what)?;
        let mut dims = Vec::with_capacity(rank);
        for _ in 0..rank {
            let d = format::u64_at(table, at, what)?;
            dims.push(usize::try_from(d).map_err(|_| bad(format!("dim {d} does not fit this machine")))?);
            at += 8;
        }
        let offset = format::u64_at(table, at, what)?;
        let len = format::u64_at(table, at + 8, what)?;
        at += 16;
        let bytes = checked_numel(&dims)
            .and_then(|n| (n as u64).checked_mul(dtype.size_bytes() as u64))
            .ok_or_else(|| bad(format!("shape {dims:?} is too large")))?;
        if bytes != len {
            return Err(bad(format!("{dtype}{dims:?} takes {bytes} bytes, the table says {len}")));
        }
        if len > limits.max_tensor_bytes {
            return Err(bad(format!("{len} bytes, above {}", named("max_tensor_bytes", limits.max_tensor_bytes))));
        }
        let raw = offset
            .checked_add(len)
            .filter(|&end| end <= data.len() as u64)
            .map(|end| &data[offset as usize..end as usize])
            .ok_or_else(|| bad(format!("bytes {offset}..+{len} lie beyond DATA's {} bytes", data.len())))?;
        let t = match mapping {
            Some(map) => {
                // `raw` lies in the mapping's bytes (`parse` was given them whole).
                let start = raw.as_ptr() as usize - map.bytes().as_ptr() as usize;
                Tensor::from_mapping(dims, dtype, map, start..start + raw.len())
            }
            None => Tensor::new(dims, TensorData::from_le_bytes(dtype, raw)),
        };
        let t = t.map_err(|e| bad(e.to_string()))?;
        if out.insert(name.clone(), Arc::new(t)).is_some() {
            return Err(bad("the name appears twice".into()));
        }
    }
    Ok(out)
}

/// The `META` section's entries.
struct Meta {
    writer: String,
    mode: Mode,
    source: String,
    mutations: Vec<(usize, (usize, usize))>,
    aliases: Vec<(usize, OutputAlias)>,
}

impl Meta {
    fn parse(bytes: &[u8]) -> Result<Meta, ArtifactError> {
        let text = std::str::from_utf8(bytes).map_err(|e| ArtifactError::Meta { line: 1, message: e.to_string() })?;
        let mut meta = Meta {
            writer: String::new(),
            mode: Mode::Native,
            source: String::new(),
            mutations: vec![],
            aliases: vec![],
        };
        let (mut mode, mut rung) = (None, None);
        for (k, l) in text.lines().enumerate() {
            let line = k + 1;
            let bad = |message: String| ArtifactError::Meta { line, message };
            if l.trim().is_empty() {
                continue;
            }
            let (key, value) = l.split_once(" = ").ok_or_else(|| bad(format!("`{l}` is not `key = value`")))?;
            let number = |s: &str| s.parse::<usize>().map_err(|_| bad(format!("`{s}` is not an index")));
            match key {
                "writer" => meta.writer = value.to_string(),
                "source" => meta.source = value.to_string(),
                "mode" => {
                    mode = Some(match value {
                        "native" => Mode::Native,
                        "reference" => Mode::Reference,
                        "shaders" => Mode::Shaders,
                        _ => return Err(bad(format!("unknown mode `{value}` (native, reference or shaders)"))),
                    })
                }
                "rung" => rung = Some((line, value.to_string())),
                "mutation" => {
                    let (i, o) =
                        value.split_once(' ').ok_or_else(|| bad(format!("`{value}` is not `INPUT OUTPUT`")))?;
                    meta.mutations.push((line, (number(i)?, number(o)?)));
                }
                "output_alias" => {
                    let a = match value.split_once(' ') {
                        None if value == "none" => OutputAlias::None,
                        None if value == "intermediate" => OutputAlias::Intermediate,
                        Some(("input", i)) => OutputAlias::Input(number(i)?),
                        _ => return Err(bad(format!("unknown output alias `{value}`"))),
                    };
                    meta.aliases.push((line, a));
                }
                // Keys a later ladder writes are not this reader's business.
                _ => {}
            }
        }
        meta.mode = mode.ok_or(ArtifactError::Meta { line: 0, message: "no `mode` line".into() })?;
        if let Some((line, rung)) = rung {
            let want = rung_of(meta.mode).name();
            if rung != want {
                return Err(ArtifactError::Meta {
                    line,
                    message: format!(
                        "rung `{rung}` does not go with mode `{}` (its rung is `{want}`)",
                        mode_name(meta.mode)
                    ),
                });
            }
        }
        Ok(meta)
    }

    /// The epilogue, its indices checked against `g`'s inputs and outputs.
    fn epilogue(&self, g: &Graph) -> Result<Epilogue, ArtifactError> {
        let (inputs, outputs) = (g.inputs().len(), g.outputs().len());
        let mut e = Epilogue::default();
        for &(line, (input, output)) in &self.mutations {
            let bad = |message: String| ArtifactError::Meta { line, message };
            if input >= inputs || output >= outputs {
                return Err(bad(format!(
                    "mutation {input} {output}: the graph has {inputs} inputs and {outputs} outputs"
                )));
            }
            if e.mutations.iter().any(|m| m.input == input || m.output == output) {
                return Err(bad(format!("mutation {input} {output} repeats an input or an output")));
            }
            e.mutations.push(InputMutation { input, output });
        }
        for &(line, a) in &self.aliases {
            if matches!(a, OutputAlias::Input(i) if i >= inputs) {
                return Err(ArtifactError::Meta { line, message: format!("the graph has {inputs} inputs") });
            }
            e.output_aliases.push(a);
        }
        Ok(e)
    }
}
