//! Embeds texts with a model of the embedded runtime, for offline experiments: one JSON string
//! per input line, one JSON array of floats per output line, in order.
//!
//! `cargo run --release -p tabby-local --example embed_texts -- MODEL_DIR < texts.jsonl > vectors.jsonl`,
//! with MODEL_DIR a BERT encoder (`~/.tabby/models/sentence-transformers/all-MiniLM-L6-v2`) or a
//! static table. `scripts/eval/try_nl_feature.py encoder` uses it.

use std::io::{BufRead, BufWriter, Write};

use tabby_local::embedding::{EmbeddingOptions, load_any};

const BATCH: usize = 64;

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args_os().skip(1);
    let (Some(model), None) = (args.next(), args.next()) else {
        anyhow::bail!("usage: embed_texts MODEL_DIR < texts.jsonl > vectors.jsonl");
    };
    let options = EmbeddingOptions {
        parallelism: std::thread::available_parallelism().map_or(1, |n| n.get()),
        ..Default::default()
    };
    let loaded = load_any(model.as_ref(), options)?;
    let runtime = tokio::runtime::Runtime::new()?;
    let mut out = BufWriter::new(std::io::stdout().lock());
    let mut batch: Vec<String> = Vec::with_capacity(BATCH);
    let mut lines = std::io::stdin().lock().lines();
    loop {
        let line = lines.next().transpose()?;
        if let Some(line) = &line {
            let text: String = serde_json::from_str(line)
                .map_err(|e| anyhow::anyhow!("each input line must be a JSON string: {e}"))?;
            batch.push(text);
        }
        if batch.len() == BATCH || (line.is_none() && !batch.is_empty()) {
            for vector in runtime.block_on(loaded.model.embed(&batch))? {
                serde_json::to_writer(&mut out, &vector)?;
                out.write_all(b"\n")?;
            }
            batch.clear();
        }
        if line.is_none() {
            break;
        }
    }
    out.flush()?;
    Ok(())
}
