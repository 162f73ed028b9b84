//! Loading the model a command works on: a text-form file, an ONNX file, or the built-in
//! example.

use std::path::Path;

use ladder::frontend::onnx::{self, ImportOptions};
use ladder::models::{example_encoder, EXAMPLE_ENCODER_OPS};
use ladder::ops::coverage;
use ladder::Graph;

use super::Error;

/// True when `path` names an ONNX file: by its `.onnx` extension, or, for any other name,
/// by content that starts like a protobuf `ModelProto` and is not text.
pub fn is_onnx(path: &Path, head: &[u8]) -> bool {
    if path.extension().is_some_and(|e| e.eq_ignore_ascii_case("onnx")) {
        return true;
    }
    if path.extension().is_some_and(|e| e.eq_ignore_ascii_case("lad")) {
        return false;
    }
    onnx::looks_like_onnx(head) && std::str::from_utf8(head).is_err()
}

/// The graph in `path` (text form or ONNX), or the built-in example encoder when there is
/// no path.
pub fn load(path: Option<&Path>) -> Result<Graph, Error> {
    match path {
        Some(path) => {
            let read_err = |source| Error::Read { path: path.into(), source };
            let len = std::fs::metadata(path).map_err(read_err)?.len();
            let limit = ImportOptions::default().max_total_bytes;
            if len > limit {
                return Err(Error::Onnx {
                    path: path.into(),
                    error: onnx::ImportError::Limit { what: "the file".into(), size: len, limit },
                });
            }
            let bytes = std::fs::read(path).map_err(read_err)?;
            if is_onnx(path, &bytes[..bytes.len().min(64)]) {
                let options = ImportOptions::default();
                return onnx::decode(&bytes, &options)
                    .and_then(|m| {
                        let dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
                        onnx::import_model(&m, &options, Some(&dir))
                    })
                    .map_err(|error| Error::Onnx { path: path.into(), error });
            }
            let text = String::from_utf8(bytes).map_err(|_| {
                read_err(std::io::Error::new(std::io::ErrorKind::InvalidData, "stream did not contain valid UTF-8"))
            })?;
            ladder::text::parse(&text).map_err(|error| Error::Parse { path: path.into(), error })
        }
        None => built_in(),
    }
}

fn built_in() -> Result<Graph, Error> {
    let missing: Vec<String> =
        EXAMPLE_ENCODER_OPS.iter().filter(|&&k| !coverage(k).interp).map(|k| format!("{k:?}")).collect();
    if !missing.is_empty() {
        return Err(Error::Usage(format!(
            "the built-in model needs operators this build does not have ({}); pass a model file instead",
            missing.join(", ")
        )));
    }
    example_encoder().map_err(|e| Error::Usage(format!("cannot build the built-in model: {e}")))
}
