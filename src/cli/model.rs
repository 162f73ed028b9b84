//! Loading the model a command works on: a text-form file, an ONNX file, or the built-in
//! example (`ladder::Model`).

use std::path::Path;
use std::sync::OnceLock;

use ladder::frontend::onnx::ImportOptions;

use ladder::models::example_encoder;
use ladder::{Graph, Model};

use super::Error;

/// How every command imports ONNX files (`--allow-external-data`); set once, at start-up.
static IMPORT_OPTIONS: OnceLock<ImportOptions> = OnceLock::new();

/// Sets the import options of this process's commands (the first call wins).
pub fn set_import_options(options: ImportOptions) {
    let _ = IMPORT_OPTIONS.set(options);
}

/// The import options the command line asked for (the library's defaults otherwise).
pub fn import_options() -> ImportOptions {
    IMPORT_OPTIONS.get().cloned().unwrap_or_default()
}

/// The limits the command line asked for (`--untrusted`, `--limit`): the import's, and every
/// plan's and input file's.
pub fn limits() -> ladder::Limits {
    IMPORT_OPTIONS.get().map(|o| o.limits.clone()).unwrap_or_default()
}

/// The model in `path` (text form or ONNX), or the built-in example encoder when there is
/// no path.
pub fn load(path: Option<&Path>) -> Result<Model, Error> {
    match path {
        Some(path) => {
            let what = format!("loading {}", path.display());
            Ok(super::progress::spin(&what, || Model::load_with(path, &import_options()))?)
        }
        None => Ok(Model::from_graph(built_in()?)),
    }
}

/// The model's graph with symbolic input shapes (an ONNX model imported).
pub fn load_graph(path: Option<&Path>) -> Result<Graph, Error> {
    let model = load(path)?;
    model
        .graph()
        .map_err(|error| Error::Onnx { path: path.map(Path::to_path_buf).unwrap_or_default(), error: Box::new(error) })
}

/// The model's graph, specialized for the given sizes of its input symbols when there are
/// any (every input dim then static; a symbol not given is an error).
pub fn load_graph_for(path: Option<&Path>, dims: &[(String, u64)]) -> Result<Graph, Error> {
    if dims.is_empty() {
        return load_graph(path);
    }
    let model = load(path)?;
    let onnx_err =
        |error| Error::Onnx { path: path.map(Path::to_path_buf).unwrap_or_default(), error: Box::new(error) };
    let inputs = model.inputs().map_err(onnx_err)?;
    super::run::check_dims(&inputs, dims)?;
    let mut shapes = std::collections::HashMap::new();
    for (name, ty) in inputs {
        let mut sizes = Vec::new();
        for d in ty.shape.dims() {
            let n = d
                .eval(&|s| dims.iter().find(|(n, _)| n == s).map(|(_, v)| *v))
                .map_err(|e| Error::Arguments(format!("input `{name}` ({ty}): {e} (give every symbol with --dim)")))?;
            sizes.push(n);
        }
        shapes.insert(name, sizes);
    }
    model.specialized_graph(shapes, Default::default(), None).map_err(onnx_err)
}

fn built_in() -> Result<Graph, Error> {
    example_encoder().map_err(|e| Error::Usage(format!("cannot build the built-in model: {e}")))
}
