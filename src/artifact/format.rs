//! The container: a fixed header, a table of tagged sections, the sections' bytes, and a
//! CRC-32 over everything after the header's first 16 bytes. `docs/artifact.md` is the
//! specification; this file is its one implementation.
//!
//! ```text
//! 0   magic        8 bytes  89 4C 41 44 44 45 52 0A  ("\x89LADDER\n")
//! 8   version      u32      the format version (1..)
//! 12  crc32        u32      CRC-32 (IEEE, as zlib's crc32) of bytes 16..end
//! 16  sections     u32      entries in the section table (at most MAX_SECTIONS)
//! 20  reserved     u32      0
//! 24  table        sections × { tag: 4 bytes, flags: u32 (0), offset: u64, length: u64 }
//! ..  payloads     each section's `length` bytes at `offset`, 64-byte aligned
//! ```
//!
//! Every integer is little-endian. Reading checks, before it reads a payload, that every
//! offset and length lies inside the file (arithmetic checked), so no count in the file sizes
//! an allocation: a section's bytes are a slice of the file.

use super::ArtifactError;

/// The first eight bytes: not ASCII (a text transfer that strips the high bit breaks it), then
/// the name, then a newline (a transfer that rewrites line ends breaks it).
pub const MAGIC: [u8; 8] = *b"\x89LADDER\n";

/// Bytes of the header before the section table.
pub const HEADER: usize = 24;

/// Bytes of one section-table entry.
const ENTRY: usize = 24;

/// Most sections a file may list.
pub const MAX_SECTIONS: usize = 64;

/// Payloads start at multiples of this (so a reader may map them and view them as any
/// element type).
pub const ALIGN: usize = 64;

/// One section: its tag and its bytes.
pub struct Section<'a> {
    pub tag: [u8; 4],
    pub bytes: &'a [u8],
}

/// The sections in order, framed with the header, the table and the checksum.
pub fn write(version: u32, sections: &[(&[u8; 4], &[u8])]) -> Vec<u8> {
    let table_end = HEADER + ENTRY * sections.len();
    let mut offsets = Vec::with_capacity(sections.len());
    let mut at = table_end.next_multiple_of(ALIGN);
    for (_, bytes) in sections {
        offsets.push(at);
        at = (at + bytes.len()).next_multiple_of(ALIGN);
    }
    let mut out = Vec::with_capacity(at);
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&version.to_le_bytes());
    out.extend_from_slice(&[0; 4]); // the checksum, below
    out.extend_from_slice(&(sections.len() as u32).to_le_bytes());
    out.extend_from_slice(&[0; 4]);
    for ((tag, bytes), &offset) in sections.iter().zip(&offsets) {
        out.extend_from_slice(&tag[..]);
        out.extend_from_slice(&[0; 4]);
        out.extend_from_slice(&(offset as u64).to_le_bytes());
        out.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
    }
    for ((_, bytes), &offset) in sections.iter().zip(&offsets) {
        out.resize(offset, 0);
        out.extend_from_slice(bytes);
    }
    out.resize(at, 0);
    let crc = crc32fast::hash(&out[16..]);
    out[12..16].copy_from_slice(&crc.to_le_bytes());
    out
}

/// Whether `head` starts like an artifact.
pub fn is_artifact(head: &[u8]) -> bool {
    head.starts_with(&MAGIC)
}

/// The format version of `bytes` after checking the magic (no other check).
pub fn version(bytes: &[u8]) -> Result<u32, ArtifactError> {
    if !is_artifact(bytes) {
        return Err(ArtifactError::NotAnArtifact);
    }
    u32_at(bytes, 8, "the header")
}

/// The sections of `bytes`, a whole file of a version this reader knows: the header and
/// table checked, the checksum verified, every section inside the file.
pub fn read(bytes: &[u8]) -> Result<Vec<Section<'_>>, ArtifactError> {
    let stored = u32_at(bytes, 12, "the header")?;
    let count = u32_at(bytes, 16, "the header")? as usize;
    if count > MAX_SECTIONS {
        return Err(ArtifactError::Malformed(format!("the header lists {count} sections, above {MAX_SECTIONS}")));
    }
    let computed = crc32fast::hash(&bytes[16..]);
    if stored != computed {
        return Err(ArtifactError::Checksum { stored, computed });
    }
    let mut out: Vec<Section<'_>> = Vec::with_capacity(count);
    for k in 0..count {
        let at = HEADER + k * ENTRY;
        let what = "the section table";
        let tag: [u8; 4] = slice(bytes, at, 4, what)?.try_into().expect("4 bytes");
        let offset = u64_at(bytes, at + 8, what)?;
        let len = u64_at(bytes, at + 16, what)?;
        let name = tag_name(&tag);
        let end = offset.checked_add(len).filter(|&e| e <= bytes.len() as u64).ok_or_else(|| {
            ArtifactError::Malformed(format!(
                "section `{name}` claims bytes {offset}..{offset}+{len}, beyond the file's {} bytes",
                bytes.len()
            ))
        })?;
        if out.iter().any(|s| s.tag == tag) {
            return Err(ArtifactError::Malformed(format!("section `{name}` appears twice")));
        }
        out.push(Section { tag, bytes: &bytes[offset as usize..end as usize] });
    }
    Ok(out)
}

/// A tag as text (non-ASCII bytes escaped).
pub fn tag_name(tag: &[u8; 4]) -> String {
    tag.iter().flat_map(|&b| std::ascii::escape_default(b)).map(char::from).collect()
}

/// `len` bytes of `bytes` at `at`, or an error naming `what` was cut short.
pub fn slice<'a>(bytes: &'a [u8], at: usize, len: usize, what: &str) -> Result<&'a [u8], ArtifactError> {
    at.checked_add(len).and_then(|end| bytes.get(at..end)).ok_or_else(|| ArtifactError::Truncated {
        what: what.to_string(),
        at: at as u64,
        need: len as u64,
        len: bytes.len() as u64,
    })
}

pub fn u32_at(bytes: &[u8], at: usize, what: &str) -> Result<u32, ArtifactError> {
    Ok(u32::from_le_bytes(slice(bytes, at, 4, what)?.try_into().expect("4 bytes")))
}

pub fn u64_at(bytes: &[u8], at: usize, what: &str) -> Result<u64, ArtifactError> {
    Ok(u64::from_le_bytes(slice(bytes, at, 8, what)?.try_into().expect("8 bytes")))
}
