//! `ladder dump`: print a model in the text form.

use std::io::Write;
use std::path::PathBuf;

use ladder::text::{print_with, PrintOptions};

use super::{model, Error};

#[derive(clap::Args, Debug)]
pub struct DumpArgs {
    /// Model in the text form (.lad); the built-in example encoder when omitted.
    pub model: Option<PathBuf>,
    /// Print `elided` instead of the data of blobs with more than N elements (such text is
    /// for reading only: it does not parse). Use a large N to print everything.
    #[arg(long, value_name = "N", default_value_t = 64)]
    pub elide: usize,
}

pub fn dump(args: &DumpArgs, out: &mut dyn Write) -> Result<(), Error> {
    let g = model::load(args.model.as_deref())?;
    let text = print_with(&g, &PrintOptions { elide_blobs_over: Some(args.elide) });
    out.write_all(text.as_bytes()).map_err(Error::Stdout)
}
