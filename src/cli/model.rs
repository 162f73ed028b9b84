//! Loading the model a command works on: a text-form file, or the built-in example.

use std::path::Path;

use ladder::models::{example_encoder, EXAMPLE_ENCODER_OPS};
use ladder::ops::coverage;
use ladder::Graph;

use super::Error;

/// The graph in `path` (text form), or the built-in example encoder when there is no path.
pub fn load(path: Option<&Path>) -> Result<Graph, Error> {
    match path {
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|source| Error::Read { path: path.into(), source })?;
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
