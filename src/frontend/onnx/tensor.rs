//! `TensorProto` to `Tensor`: element types, dims, data in any of its encodings (raw
//! little-endian bytes, typed lists, external files), each checked against the others before
//! anything is allocated.

use std::io::{Read, Seek, SeekFrom};
use std::path::{Component, Path};

use half::{bf16, f16};

use super::proto::TensorProto;
use super::{ImportError, ImportOptions};
use crate::ir::DType;
use crate::tensor::{Tensor, TensorData};

/// ONNX's name for an element type number.
pub fn dtype_name(elem_type: i32) -> String {
    super::proto::tensor_proto::DataType::try_from(elem_type)
        .map_or_else(|_| format!("#{elem_type}"), |d| d.as_str_name().to_string())
}

/// The ladder dtype of an ONNX element type, if it has one.
pub fn dtype_of(elem_type: i32) -> Option<DType> {
    Some(match elem_type {
        1 => DType::F32,
        2 => DType::U8,
        3 => DType::I8,
        4 => DType::U16,
        5 => DType::I16,
        6 => DType::I32,
        7 => DType::I64,
        9 => DType::Bool,
        10 => DType::F16,
        11 => DType::F64,
        12 => DType::U32,
        13 => DType::U64,
        16 => DType::BF16,
        _ => return None,
    })
}

/// The ONNX element type number of a ladder dtype.
pub fn elem_type_of(dtype: DType) -> i32 {
    match dtype {
        DType::F32 => 1,
        DType::I32 => 6,
        DType::I64 => 7,
        DType::Bool => 9,
        DType::F16 => 10,
        DType::F64 => 11,
        DType::BF16 => 16,
        DType::U8 => 2,
        DType::I8 => 3,
        DType::U16 => 4,
        DType::I16 => 5,
        DType::U32 => 12,
        DType::U64 => 13,
    }
}

/// Checks dims (non-negative, product fits) and returns them with the element count.
pub fn check_dims(what: &str, dims: &[i64]) -> Result<(Vec<usize>, u64), ImportError> {
    let bad = |problem| ImportError::BadDims { what: what.to_string(), dims: dims.to_vec(), problem };
    let mut numel: u64 = 1;
    let mut out = Vec::with_capacity(dims.len().min(64));
    for &d in dims {
        if d < 0 {
            return Err(bad("a dim is negative"));
        }
        numel = numel.checked_mul(d as u64).ok_or_else(|| bad("their product overflows"))?;
        out.push(usize::try_from(d).map_err(|_| bad("a dim does not fit this machine"))?);
    }
    usize::try_from(numel).map_err(|_| bad("their product does not fit this machine"))?;
    Ok((out, numel))
}

/// Running total of tensor bytes read in one import, against `Limits::max_file_bytes`.
#[derive(Debug, Default)]
pub struct Budget {
    pub used: u64,
}

impl Budget {
    pub fn spend(&mut self, name: &str, bytes: u64, options: &ImportOptions) -> Result<(), ImportError> {
        if bytes > options.limits.max_tensor_bytes {
            return Err(ImportError::Limit {
                what: format!("the data of tensor `{name}`"),
                size: bytes,
                limit: "max_tensor_bytes",
                max: options.limits.max_tensor_bytes,
            });
        }
        self.used = self.used.saturating_add(bytes);
        if self.used > options.limits.max_file_bytes {
            return Err(ImportError::Limit {
                what: "the tensor data of the model".into(),
                size: self.used,
                limit: "max_file_bytes",
                max: options.limits.max_file_bytes,
            });
        }
        Ok(())
    }
}

/// Converts a tensor. `dir` is the model's folder, where external data may be read from
/// (only when the options allow it).
pub fn tensor_from_proto(
    t: &TensorProto,
    options: &ImportOptions,
    dir: Option<&Path>,
    budget: &mut Budget,
) -> Result<Tensor, ImportError> {
    let name = if t.name.is_empty() { "<unnamed>" } else { t.name.as_str() };
    let bad = |problem: String| ImportError::BadTensor { name: name.to_string(), problem };
    if t.data_type == 0 {
        return Err(ImportError::Missing(format!("data_type of tensor `{name}`")));
    }
    let dtype = dtype_of(t.data_type)
        .ok_or_else(|| ImportError::DType { what: format!("tensor `{name}`"), elem_type: dtype_name(t.data_type) })?;
    if t.segment.is_some() {
        return Err(bad("segmented tensors are not supported".into()));
    }
    let (dims, numel) = check_dims(&format!("tensor `{name}`"), &t.dims)?;
    let bytes = numel.checked_mul(dtype.size_bytes() as u64).ok_or_else(|| bad("its size overflows".into()))?;
    budget.spend(name, bytes, options)?;
    let n = numel as usize;

    let typed_len = t.float_data.len()
        + t.int32_data.len()
        + t.int64_data.len()
        + t.double_data.len()
        + t.uint64_data.len()
        + t.string_data.len();
    let external = t.data_location == 1;
    let raw: Option<Vec<u8>> = if external {
        if !t.raw_data.is_empty() || typed_len > 0 {
            return Err(bad("it has both external and inline data".into()));
        }
        Some(read_external(t, name, bytes, options, dir)?)
    } else if !t.raw_data.is_empty() {
        if typed_len > 0 {
            return Err(bad("it has both raw_data and typed data".into()));
        }
        None
    } else {
        None
    };
    let raw_bytes: Option<&[u8]> = match &raw {
        Some(r) => Some(r),
        None if !t.raw_data.is_empty() => Some(&t.raw_data),
        None => None,
    };

    let data = if let Some(raw) = raw_bytes {
        if raw.len() as u64 != bytes {
            return Err(bad(format!("raw data has {} bytes but {} {} elements need {bytes}", raw.len(), numel, dtype)));
        }
        decode_raw(dtype, raw)
    } else {
        let count = match dtype {
            DType::F32 => t.float_data.len(),
            DType::F64 => t.double_data.len(),
            DType::I64 => t.int64_data.len(),
            DType::I32 | DType::Bool | DType::F16 | DType::BF16 => t.int32_data.len(),
            DType::I8 | DType::I16 | DType::U8 | DType::U16 => t.int32_data.len(),
            DType::U32 | DType::U64 => t.uint64_data.len(),
        };
        if count != n || typed_len != count {
            return Err(bad(format!(
                "it declares {numel} elements of {} but holds {typed_len} values{}",
                dtype_name(t.data_type),
                if typed_len != count { " (in the wrong field)" } else { "" }
            )));
        }
        match dtype {
            DType::F32 => TensorData::F32(t.float_data.clone()),
            DType::F64 => TensorData::F64(t.double_data.clone()),
            DType::I64 => TensorData::I64(t.int64_data.clone()),
            DType::I32 => TensorData::I32(t.int32_data.clone()),
            DType::Bool => TensorData::Bool(t.int32_data.iter().map(|&x| x != 0).collect()),
            DType::F16 => TensorData::F16(t.int32_data.iter().map(|&x| f16::from_bits(x as u16)).collect()),
            DType::BF16 => TensorData::BF16(t.int32_data.iter().map(|&x| bf16::from_bits(x as u16)).collect()),
            // The narrow integers travel widened in int32_data, u32 and u64 in uint64_data;
            // each value is truncated to the type's width, as ONNX's own readers do.
            DType::I8 => TensorData::I8(t.int32_data.iter().map(|&x| x as i8).collect()),
            DType::I16 => TensorData::I16(t.int32_data.iter().map(|&x| x as i16).collect()),
            DType::U8 => TensorData::U8(t.int32_data.iter().map(|&x| x as u8).collect()),
            DType::U16 => TensorData::U16(t.int32_data.iter().map(|&x| x as u16).collect()),
            DType::U32 => TensorData::U32(t.uint64_data.iter().map(|&x| x as u32).collect()),
            DType::U64 => TensorData::U64(t.uint64_data.clone()),
        }
    };
    Tensor::new(dims, data).map_err(|e| bad(e.to_string()))
}

fn decode_raw(dtype: DType, raw: &[u8]) -> TensorData {
    TensorData::from_le_bytes(dtype, raw)
}

/// Checks that an external-data location is a plain relative path inside the model's folder.
pub fn check_location(location: &str) -> Result<(), String> {
    if location.is_empty() {
        return Err("the location is empty".into());
    }
    if location.contains('\0') {
        return Err("the location contains a NUL byte".into());
    }
    let bytes = location.as_bytes();
    let drive = bytes.len() >= 2 && bytes[1] == b':' && bytes[0].is_ascii_alphabetic();
    if location.starts_with('/') || location.starts_with('\\') || drive || Path::new(location).is_absolute() {
        return Err(format!("location `{location}` is absolute"));
    }
    if location.split(['/', '\\']).any(|c| c == "..") {
        return Err(format!("location `{location}` contains `..`"));
    }
    for c in Path::new(location).components() {
        match c {
            Component::Normal(_) | Component::CurDir => {}
            _ => return Err(format!("location `{location}` is not a plain relative path")),
        }
    }
    Ok(())
}

fn read_external(
    t: &TensorProto,
    name: &str,
    bytes: u64,
    options: &ImportOptions,
    dir: Option<&Path>,
) -> Result<Vec<u8>, ImportError> {
    let err = |problem: String| ImportError::ExternalData { name: name.to_string(), problem };
    let mut location = None;
    let mut offset: u64 = 0;
    let mut length: Option<u64> = None;
    for e in &t.external_data {
        match e.key.as_str() {
            "location" => location = Some(e.value.as_str()),
            "offset" => offset = e.value.parse().map_err(|_| err(format!("offset `{}` is not a number", e.value)))?,
            "length" => {
                length = Some(e.value.parse().map_err(|_| err(format!("length `{}` is not a number", e.value)))?)
            }
            _ => {}
        }
    }
    let location = location.ok_or_else(|| err("no location is given".into()))?;
    check_location(location).map_err(&err)?;
    if !options.allow_external_data {
        return Err(err(format!("reading `{location}` is disabled (external data is off by default: `ImportOptions::allow_external_data`, `--allow-external-data` on the command line)")));
    }
    let dir = dir.ok_or_else(|| err("the model was not loaded from a file, so it has no folder".into()))?;
    if let Some(len) = length {
        if len != bytes {
            return Err(err(format!("length {len} disagrees with the {bytes} bytes the tensor needs")));
        }
    }
    let io = |e: std::io::Error| err(format!("`{location}`: {e}"));
    let root = dir.canonicalize().map_err(io)?;
    let path = root.join(location).canonicalize().map_err(io)?;
    if !path.starts_with(&root) {
        return Err(err(format!("`{location}` resolves outside the model's folder")));
    }
    // Opening a FIFO would wait for a writer; a device has no length to check.
    if !std::fs::metadata(&path).map_err(io)?.is_file() {
        return Err(err(format!("`{location}` is not a regular file")));
    }
    let mut f = std::fs::File::open(&path).map_err(io)?;
    let file_len = f.metadata().map_err(io)?.len();
    if offset.checked_add(bytes).is_none_or(|end| end > file_len) {
        return Err(err(format!("`{location}` has {file_len} bytes; the tensor needs {bytes} from offset {offset}")));
    }
    f.seek(SeekFrom::Start(offset)).map_err(io)?;
    let mut buf = vec![0u8; bytes as usize];
    f.read_exact(&mut buf).map_err(io)?;
    Ok(buf)
}
