//! `.npy` files in and out, through the `npyz` crate.
//!
//! Supported element types: f16 (`f2`), f32 (`f4`), f64 (`f8`), i8 (`i1`), i16 (`i2`), i32
//! (`i4`), i64 (`i8`), u8 (`u1`), u16 (`u2`), u32 (`u4`), u64 (`u8`) and bool (`b1`), either
//! byte order, C or Fortran order. NumPy has no bf16, so bf16 tensors are
//! written as f32 (exactly: every bf16 is an f32) and bf16 inputs are read from f32 files.
//!
//! Files are untrusted. Before `npyz` sees a file, its header is checked here: the declared
//! header length and the data size implied by the shape must fit in the bytes the file
//! actually has, so a hostile header cannot make the reader allocate more than the file's
//! size, and the shape's element count must not overflow.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;

use half::{bf16, f16};
use npyz::WriterBuilder;

use ladder::tensor::{checked_numel, Tensor, TensorData};
use ladder::DType;

use super::Error;

/// Longest header accepted. NumPy writes headers of at most a few hundred bytes and by default
/// refuses to read headers over 10,000 bytes.
const MAX_HEADER_BYTES: usize = 1 << 16;

/// What the header of a `.npy` file declares.
#[derive(Debug, PartialEq)]
struct Header {
    dtype: DType,
    fortran_order: bool,
    shape: Vec<usize>,
    /// Where the data starts.
    data_offset: usize,
}

/// Reads a whole `.npy` file into a tensor (in the file's own dtype). Only a regular file of
/// at most the command's `Limits::max_tensor_bytes` (plus a header) is read (a FIFO would
/// wait for a writer, `/dev/zero` never ends).
pub fn read(path: &Path) -> Result<Tensor, Error> {
    let max = super::model::limits().max_tensor_bytes.saturating_add(1 << 16);
    let meta = std::fs::metadata(path).map_err(|source| Error::Read { path: path.into(), source })?;
    if !meta.is_file() {
        return Err(Error::Npy { path: path.into(), message: "not a regular file".into() });
    }
    if meta.len() > max {
        return Err(Error::Npy {
            path: path.into(),
            message: format!(
                "{} bytes, above `Limits::max_tensor_bytes` and a header, {max} bytes (raise it with --limit max_tensor_bytes=N)",
                meta.len()
            ),
        });
    }
    let bytes = std::fs::read(path).map_err(|source| Error::Read { path: path.into(), source })?;
    decode(&bytes).map_err(|message| Error::Npy { path: path.into(), message })
}

fn decode(bytes: &[u8]) -> Result<Tensor, String> {
    let h = parse_header(bytes)?;
    let n = checked_numel(&h.shape).ok_or_else(|| format!("shape {:?} has too many elements", h.shape))?;
    let need = n.checked_mul(h.dtype.size_bytes()).ok_or_else(|| format!("shape {:?} is too large", h.shape))?;
    let have = bytes.len() - h.data_offset;
    if have < need {
        return Err(format!(
            "the header declares {} {:?} ({need} bytes of data) but only {have} bytes follow it",
            h.dtype, h.shape
        ));
    }
    if have > need {
        return Err(format!("{} bytes follow the data of {} {:?}", have - need, h.dtype, h.shape));
    }
    let file = npyz::NpyFile::new(bytes).map_err(|e| e.to_string())?;
    let err = |e: std::io::Error| e.to_string();
    let data = match h.dtype {
        DType::F32 => TensorData::F32(file.into_vec::<f32>().map_err(err)?),
        DType::F64 => TensorData::F64(file.into_vec::<f64>().map_err(err)?),
        DType::F16 => TensorData::F16(file.into_vec::<f16>().map_err(err)?),
        DType::I32 => TensorData::I32(file.into_vec::<i32>().map_err(err)?),
        DType::I64 => TensorData::I64(file.into_vec::<i64>().map_err(err)?),
        DType::Bool => TensorData::Bool(file.into_vec::<bool>().map_err(err)?),
        DType::I8 => TensorData::I8(file.into_vec::<i8>().map_err(err)?),
        DType::I16 => TensorData::I16(file.into_vec::<i16>().map_err(err)?),
        DType::U8 => TensorData::U8(file.into_vec::<u8>().map_err(err)?),
        DType::U16 => TensorData::U16(file.into_vec::<u16>().map_err(err)?),
        DType::U32 => TensorData::U32(file.into_vec::<u32>().map_err(err)?),
        DType::U64 => TensorData::U64(file.into_vec::<u64>().map_err(err)?),
        DType::BF16 => return Err("bf16 has no .npy type".into()),
    };
    let data = if h.fortran_order { fortran_to_c(data, &h.shape) } else { data };
    Tensor::new(h.shape, data).map_err(|e| e.to_string())
}

/// Writes `t` as a `.npy` file. Returns a note when the file's type differs from the tensor's
/// (bf16 is written as f32).
pub fn write(path: &Path, t: &Tensor) -> Result<Option<String>, Error> {
    let werr = |source: std::io::Error| Error::Write { path: path.into(), source };
    let file = File::create(path).map_err(werr)?;
    let mut sink = BufWriter::new(file);
    let shape: Vec<u64> = t.shape().iter().map(|&d| d as u64).collect();
    let mut note = None;
    match t.data() {
        TensorData::F32(v) => write_all(&mut sink, &shape, v),
        TensorData::F64(v) => write_all(&mut sink, &shape, v),
        TensorData::F16(v) => write_all(&mut sink, &shape, v),
        TensorData::I32(v) => write_all(&mut sink, &shape, v),
        TensorData::I64(v) => write_all(&mut sink, &shape, v),
        TensorData::Bool(v) => write_all(&mut sink, &shape, v),
        TensorData::I8(v) => write_all(&mut sink, &shape, v),
        TensorData::I16(v) => write_all(&mut sink, &shape, v),
        TensorData::U8(v) => write_all(&mut sink, &shape, v),
        TensorData::U16(v) => write_all(&mut sink, &shape, v),
        TensorData::U32(v) => write_all(&mut sink, &shape, v),
        TensorData::U64(v) => write_all(&mut sink, &shape, v),
        TensorData::BF16(v) => {
            note = Some(format!("{}: .npy has no bf16; written as f32 (exactly)", path.display()));
            let widened: Vec<f32> = v.iter().map(|x| x.to_f32()).collect();
            write_all(&mut sink, &shape, &widened)
        }
    }
    .and_then(|()| sink.flush())
    .map_err(werr)?;
    Ok(note)
}

fn write_all<T: npyz::AutoSerialize>(sink: &mut dyn Write, shape: &[u64], values: &[T]) -> std::io::Result<()> {
    let mut w = npyz::WriteOptions::new().default_dtype().shape(shape).writer(sink).begin_nd()?;
    w.extend(values.iter())?;
    w.finish()
}

/// An f32 tensor rounded (to nearest even) to bf16: how a bf16 input is read, since `.npy`
/// can only carry it as f32. `None` when `t` is not f32.
pub fn to_bf16(t: &Tensor) -> Option<Tensor> {
    let v = t.as_f32()?;
    Tensor::new(t.shape().to_vec(), TensorData::BF16(v.iter().map(|&x| bf16::from_f32(x)).collect())).ok()
}

/// Reorders Fortran-order (column-major) data into row-major order.
fn fortran_to_c(data: TensorData, shape: &[usize]) -> TensorData {
    fn reorder<T: Copy>(v: Vec<T>, shape: &[usize]) -> Vec<T> {
        let n = v.len();
        let mut out = Vec::with_capacity(n);
        let mut idx = vec![0usize; shape.len()];
        for _ in 0..n {
            // Column-major offset of the row-major index `idx`.
            let mut off = 0;
            let mut stride = 1;
            for (i, &d) in idx.iter().zip(shape) {
                off += i * stride;
                stride *= d;
            }
            out.push(v[off]);
            for axis in (0..shape.len()).rev() {
                idx[axis] += 1;
                if idx[axis] < shape[axis] {
                    break;
                }
                idx[axis] = 0;
            }
        }
        out
    }
    match data {
        TensorData::F32(v) => TensorData::F32(reorder(v, shape)),
        TensorData::F64(v) => TensorData::F64(reorder(v, shape)),
        TensorData::F16(v) => TensorData::F16(reorder(v, shape)),
        TensorData::BF16(v) => TensorData::BF16(reorder(v, shape)),
        TensorData::I32(v) => TensorData::I32(reorder(v, shape)),
        TensorData::I64(v) => TensorData::I64(reorder(v, shape)),
        TensorData::Bool(v) => TensorData::Bool(reorder(v, shape)),
        TensorData::I8(v) => TensorData::I8(reorder(v, shape)),
        TensorData::I16(v) => TensorData::I16(reorder(v, shape)),
        TensorData::U8(v) => TensorData::U8(reorder(v, shape)),
        TensorData::U16(v) => TensorData::U16(reorder(v, shape)),
        TensorData::U32(v) => TensorData::U32(reorder(v, shape)),
        TensorData::U64(v) => TensorData::U64(reorder(v, shape)),
    }
}

/// Checks the magic, version and header length, and reads the header dict
/// (`{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }`).
fn parse_header(bytes: &[u8]) -> Result<Header, String> {
    if bytes.len() < 10 || &bytes[..6] != b"\x93NUMPY" {
        return Err("it does not start with the .npy magic `\\x93NUMPY`".into());
    }
    let (len, start) = match (bytes[6], bytes[7]) {
        (1, 0) => (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10),
        (2, 0) | (3, 0) => {
            if bytes.len() < 12 {
                return Err("the file ends inside its header".into());
            }
            (u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize, 12)
        }
        (major, minor) => return Err(format!("format version {major}.{minor} is not supported (1.0 to 3.0 are)")),
    };
    if len > MAX_HEADER_BYTES {
        return Err(format!("its header claims {len} bytes (at most {MAX_HEADER_BYTES} are accepted)"));
    }
    let end = start + len;
    if end > bytes.len() {
        return Err(format!(
            "its header claims {len} bytes but the file has only {} after the prefix",
            bytes.len() - start
        ));
    }
    let text = std::str::from_utf8(&bytes[start..end]).map_err(|_| "its header is not text".to_string())?;
    let (descr, fortran_order, shape) = parse_dict(text)?;
    let dtype = dtype_of(&descr)?;
    let shape = shape
        .into_iter()
        .map(|d| usize::try_from(d).map_err(|_| format!("dim {d} is too large")))
        .collect::<Result<Vec<usize>, String>>()?;
    Ok(Header { dtype, fortran_order, shape, data_offset: end })
}

/// The dtype of a descr like `<f4`, `>i8`, `|b1`.
fn dtype_of(descr: &str) -> Result<DType, String> {
    let body = descr.strip_prefix(['<', '>', '|', '=']).unwrap_or(descr);
    Ok(match body {
        "f2" | "e" => DType::F16,
        "f4" => DType::F32,
        "f8" => DType::F64,
        "i4" => DType::I32,
        "i8" => DType::I64,
        "i1" => DType::I8,
        "i2" => DType::I16,
        "u1" => DType::U8,
        "u2" => DType::U16,
        "u4" => DType::U32,
        "u8" => DType::U64,
        "b1" | "?" => DType::Bool,
        _ => {
            return Err(format!(
                "element type `{descr}` is not supported (f2, f4, f8, i1, i2, i4, i8, u1, u2, u4, u8 and b1 are: \
                 f16, f32, f64, i8, i16, i32, i64, u8, u16, u32, u64, bool)"
            ))
        }
    })
}

#[derive(Debug, PartialEq)]
enum PyValue {
    Str(String),
    Bool(bool),
    Ints(Vec<u64>),
}

/// A tiny reader for the flat Python dict literal of an `.npy` header: string keys; values
/// that are strings, `True`/`False`, or tuples/lists of non-negative integers.
fn parse_dict(text: &str) -> Result<(String, bool, Vec<u64>), String> {
    let mut p = DictParser { s: text.as_bytes(), i: 0 };
    let bad = |what: &str| format!("its header is not a plain dict literal ({what})");
    p.skip_ws();
    if !p.eat(b'{') {
        return Err(bad("expected `{`"));
    }
    let (mut descr, mut fortran, mut shape) = (None, None, None);
    loop {
        p.skip_ws();
        if p.eat(b'}') {
            break;
        }
        let key = p.string().ok_or_else(|| bad("expected a quoted key"))?;
        p.skip_ws();
        if !p.eat(b':') {
            return Err(bad("expected `:`"));
        }
        p.skip_ws();
        let value = match p.value() {
            Some(v) => v,
            None if key == "descr" => return Err("structured (record) element types are not supported".into()),
            None => return Err(bad(&format!("unsupported value for `{key}`"))),
        };
        match (key.as_str(), value) {
            ("descr", PyValue::Str(s)) => descr = Some(s),
            ("descr", _) => return Err("structured (record) element types are not supported".into()),
            ("fortran_order", PyValue::Bool(b)) => fortran = Some(b),
            ("shape", PyValue::Ints(v)) => shape = Some(v),
            ("fortran_order" | "shape", _) => return Err(bad(&format!("`{key}` has the wrong kind of value"))),
            _ => {}
        }
        p.skip_ws();
        if p.eat(b'}') {
            break;
        }
        if !p.eat(b',') {
            return Err(bad("expected `,` or `}`"));
        }
    }
    p.skip_ws();
    if p.i != p.s.len() {
        return Err(bad("text after the dict"));
    }
    Ok((
        descr.ok_or_else(|| bad("no `descr`"))?,
        fortran.ok_or_else(|| bad("no `fortran_order`"))?,
        shape.ok_or_else(|| bad("no `shape`"))?,
    ))
}

struct DictParser<'a> {
    s: &'a [u8],
    i: usize,
}

impl DictParser<'_> {
    fn skip_ws(&mut self) {
        while self.i < self.s.len() && self.s[self.i].is_ascii_whitespace() {
            self.i += 1;
        }
    }

    fn eat(&mut self, c: u8) -> bool {
        if self.s.get(self.i) == Some(&c) {
            self.i += 1;
            true
        } else {
            false
        }
    }

    fn string(&mut self) -> Option<String> {
        let q = *self.s.get(self.i)?;
        if q != b'\'' && q != b'"' {
            return None;
        }
        let start = self.i + 1;
        let len = self.s[start..].iter().position(|&c| c == q)?;
        let body = &self.s[start..start + len];
        if body.contains(&b'\\') {
            return None;
        }
        self.i = start + len + 1;
        String::from_utf8(body.to_vec()).ok()
    }

    fn word(&mut self, w: &str) -> bool {
        if self.s[self.i..].starts_with(w.as_bytes()) {
            self.i += w.len();
            true
        } else {
            false
        }
    }

    fn value(&mut self) -> Option<PyValue> {
        match *self.s.get(self.i)? {
            b'\'' | b'"' => self.string().map(PyValue::Str),
            b'(' | b'[' => {
                let close = if self.s[self.i] == b'(' { b')' } else { b']' };
                self.i += 1;
                let mut v = Vec::new();
                loop {
                    self.skip_ws();
                    if self.eat(close) {
                        return Some(PyValue::Ints(v));
                    }
                    v.push(self.int()?);
                    self.skip_ws();
                    if self.eat(close) {
                        return Some(PyValue::Ints(v));
                    }
                    if !self.eat(b',') {
                        return None;
                    }
                }
            }
            _ if self.word("True") => Some(PyValue::Bool(true)),
            _ if self.word("False") => Some(PyValue::Bool(false)),
            _ => None,
        }
    }

    fn int(&mut self) -> Option<u64> {
        let start = self.i;
        while self.i < self.s.len() && self.s[self.i].is_ascii_digit() {
            self.i += 1;
        }
        // Python 2 headers may write longs as `3L`.
        let digits = std::str::from_utf8(&self.s[start..self.i]).ok()?;
        self.eat(b'L');
        digits.parse().ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn npy(header: &str, data: &[u8]) -> Vec<u8> {
        let mut h = header.to_string();
        while !(10 + h.len() + 1).is_multiple_of(64) {
            h.push(' ');
        }
        h.push('\n');
        let mut out = b"\x93NUMPY\x01\x00".to_vec();
        out.extend_from_slice(&(h.len() as u16).to_le_bytes());
        out.extend_from_slice(h.as_bytes());
        out.extend_from_slice(data);
        out
    }

    #[test]
    fn reads_c_and_fortran_order_and_big_endian() {
        let data: Vec<u8> = [1i32, 2, 3, 4, 5, 6].iter().flat_map(|x| x.to_le_bytes()).collect();
        let c = decode(&npy("{'descr': '<i4', 'fortran_order': False, 'shape': (2, 3), }", &data)).unwrap();
        assert_eq!(c.shape(), &[2, 3]);
        assert_eq!(c.to_f64_vec(), vec![1., 2., 3., 4., 5., 6.]);
        // Column-major [[1, 3, 5], [2, 4, 6]] is stored 1..6.
        let f = decode(&npy("{'descr': '<i4', 'fortran_order': True, 'shape': (2, 3), }", &data)).unwrap();
        assert_eq!(f.to_f64_vec(), vec![1., 3., 5., 2., 4., 6.]);
        let be: Vec<u8> = [1.5f64, -2.0].iter().flat_map(|x| x.to_be_bytes()).collect();
        let t = decode(&npy("{'descr': '>f8', 'fortran_order': False, 'shape': (2,), }", &be)).unwrap();
        assert_eq!(t.dtype(), DType::F64);
        assert_eq!(t.to_f64_vec(), vec![1.5, -2.0]);
        let be: Vec<u8> = [1u16, 65535].iter().flat_map(|x| x.to_be_bytes()).collect();
        let u = decode(&npy("{'descr': '>u2', 'fortran_order': False, 'shape': (2,), }", &be)).unwrap();
        assert_eq!((u.dtype(), u.to_f64_vec()), (DType::U16, vec![1.0, 65535.0]));
        let s = decode(&npy("{'descr': '|b1', 'fortran_order': False, 'shape': (), }", &[1])).unwrap();
        assert_eq!((s.shape(), s.to_f64_vec()), (&[][..], vec![1.0]));
    }

    #[test]
    fn hostile_headers_are_errors_without_allocation() {
        // The data a shape implies must be present.
        let e =
            decode(&npy("{'descr': '<f4', 'fortran_order': False, 'shape': (1000000000000,), }", &[0; 8])).unwrap_err();
        assert!(e.contains("only 8 bytes follow"), "{e}");
        // The element count must not overflow.
        let e = decode(&npy(
            "{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296, 4294967296), }",
            &[],
        ))
        .unwrap_err();
        assert!(e.contains("too many elements"), "{e}");
        // The header length must fit in the file.
        let mut b = npy("{'descr': '<f4', 'fortran_order': False, 'shape': (), }", &[0; 4]);
        b[6] = 2;
        b.splice(8..10, [0xff, 0xff, 0xff, 0x7f, 0, 0]);
        let e = decode(&b).unwrap_err();
        assert!(e.contains("header claims"), "{e}");
        let e = decode(b"\x93NUMPY\x01\x00\xff\x00{").unwrap_err();
        assert!(e.contains("has only"), "{e}");
        assert!(decode(b"PK\x03\x04").unwrap_err().contains("magic"));
        let e = decode(&npy("{'descr': '<c8', 'fortran_order': False, 'shape': (1,), }", &[0; 8])).unwrap_err();
        assert!(e.contains("not supported"), "{e}");
        let e =
            decode(&npy("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (1,), }", &[0; 4])).unwrap_err();
        assert!(e.contains("structured"), "{e}");
        let e = decode(&npy("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }", &[0; 5])).unwrap_err();
        assert!(e.contains("1 bytes follow"), "{e}");
        let e = decode(&npy("{'descr': '|b1', 'fortran_order': False, 'shape': (1,), }", &[7])).unwrap_err();
        assert!(e.contains("bool"), "{e}");
    }

    #[test]
    fn write_then_read_every_dtype() {
        let dir = std::env::temp_dir().join(format!("ladder-npy-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let cases = [
            Tensor::from_f32(&[2, 2], vec![1.0, -0.5, f32::INFINITY, 3.25]).unwrap(),
            Tensor::new(vec![3], TensorData::F64(vec![0.1, -0.0, 1e300])).unwrap(),
            Tensor::new(vec![2], TensorData::F16(vec![f16::from_f32(0.5), f16::from_f32(-2.0)])).unwrap(),
            Tensor::new(vec![1, 2], TensorData::I32(vec![-7, i32::MAX])).unwrap(),
            Tensor::from_i64(&[0, 3], vec![]).unwrap(),
            Tensor::from_bool(&[], vec![true]).unwrap(),
            Tensor::new(vec![3], TensorData::I8(vec![i8::MIN, -1, i8::MAX])).unwrap(),
            Tensor::new(vec![2], TensorData::I16(vec![i16::MIN, i16::MAX])).unwrap(),
            Tensor::new(vec![2], TensorData::U8(vec![0, u8::MAX])).unwrap(),
            Tensor::new(vec![2], TensorData::U16(vec![1, u16::MAX])).unwrap(),
            Tensor::new(vec![2], TensorData::U32(vec![7, u32::MAX])).unwrap(),
            Tensor::new(vec![3], TensorData::U64(vec![0, 1 << 63, u64::MAX])).unwrap(),
        ];
        for (i, t) in cases.iter().enumerate() {
            let p = dir.join(format!("{i}.npy"));
            assert_eq!(write(&p, t).unwrap(), None);
            let back = read(&p).unwrap();
            assert!(back.bit_eq(t) && back.dtype() == t.dtype(), "{t} came back as {back}");
        }
        let b = Tensor::new(vec![2], TensorData::BF16(vec![bf16::from_f32(1.5), bf16::from_f32(-3.0)])).unwrap();
        let p = dir.join("bf16.npy");
        assert!(write(&p, &b).unwrap().is_some());
        let back = read(&p).unwrap();
        assert_eq!(back.dtype(), DType::F32);
        assert!(to_bf16(&back).unwrap().bit_eq(&b));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
