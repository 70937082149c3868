//! Writes the static embedding table as `tabby download` distils it, but without the code
//! adapter folded in: the table `scripts/eval/train_code_adapter.py` trains the adapter on.
//!
//! `cargo run --release -p tabby-local --example distill_plain -- SOURCE_DIR OUT_DIR`, with
//! SOURCE_DIR the encoder, `~/.tabby/models/sentence-transformers/all-MiniLM-L6-v2`.

use tabby_local::embedding::distill::{DistillOptions, distill};

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args_os().skip(1);
    let (Some(source), Some(out), None) = (args.next(), args.next(), args.next()) else {
        anyhow::bail!("usage: distill_plain SOURCE_DIR OUT_DIR");
    };
    let options = DistillOptions {
        code_adapter: None,
        ..Default::default()
    };
    distill(source.as_ref(), out.as_ref(), &options, &|_, _| {})?;
    println!("wrote {}", std::path::Path::new(&out).display());
    Ok(())
}
